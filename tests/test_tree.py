"""Token trees: topology, masks and positions, one-pass scoring, KV compaction, greedy equality."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import specjax
from specjax import accept, testing
from specjax import tree as tree_lib
from specjax.drafters.specinfer import SpecInfer
from specjax.tree import chain_with_branches
from specjax.models import api, kv_cache

import stats_util
from stats_util import prompts as _prompts

V = 64
MAX_NEW = 20

forward = jax.jit(api.forward)  # eager flax dispatch is slower than one compile here
full_logits = jax.jit(specjax.logits)

TREES = {
    "chain3": tree_lib.chain(3),
    "specinfer": tree_lib.from_children((1, 1, 3, 1, 1, 1, 1, 1)),
    "width5": tree_lib.from_children((5, 2, 1)),
    "medusa": tree_lib.from_paths([(0,), (1,), (2,), (0, 0), (0, 1), (1, 0), (0, 0, 0), (2, 0)]),
}


def brute_force(parents):
  n = len(parents)
  depth, mask = np.zeros(n, int), np.zeros((n, n), bool)
  for i in range(n):
    j = i
    while j != -1:
      mask[i, j] = True
      depth[i] += j != i
      j = parents[j]
  return mask, depth


@pytest.mark.parametrize("name", list(TREES))
def test_mask_and_positions_match_brute_force(name):
  tree = TREES[name]
  mask, depth = brute_force(tree.parents)
  np.testing.assert_array_equal(tree.mask, mask)
  np.testing.assert_array_equal(tree.depth, depth)
  np.testing.assert_array_equal(tree.positions(jnp.array([0, 7])), np.stack([depth, depth + 7]))
  for i in range(tree.num_nodes):  # the ancestors table walks each root path
    path = [j for j in tree.ancestors[i, :depth[i] + 1]]
    assert path[0] == 0 and path[-1] == i and all(tree.parents[b] == a for a, b in zip(path, path[1:]))


def test_builders():
  assert tree_lib.chain(2).parents == (-1, 0, 1) and tree_lib.chain(2).is_chain
  t = tree_lib.from_children((1, 1, 3, 1, 1, 1, 1, 1))
  assert t.num_nodes == 1 + 1 + 1 + 3 * 6 and t.max_depth == 8 and t.max_width == 3 and t.is_bfs
  assert tree_lib.from_children((5, 2)).num_nodes == 1 + 5 + 10
  m = tree_lib.from_paths([(1, 0), (0,), (1,), (0, 0)])  # any order in; BFS out, by choice
  assert m.parents == (-1, 0, 0, 1, 2)
  np.testing.assert_array_equal(tree_lib.sibling_choices(m), [0, 0, 1, 0, 0])
  assert len(tree_lib.full_paths((3, 2, 1))) == 3 + 6 + 6
  with pytest.raises(ValueError, match="no parent path"):
    tree_lib.from_paths([(0,), (1, 0)])
  with pytest.raises(ValueError, match="parents must come earlier"):
    tree_lib.Tree((-1, 2, 0))


@pytest.fixture(scope="module")
def target():
  return testing.tiny_decoder(V, seed=0)


def _last_logits(model, seqs, rows=64, width=32):
  """Each sequence's last-position logits from one cache-free forward over all of them, right padded
  to one fixed shape (causal: padding after a position never reaches it): one compile for every
  test here instead of one per sequence length."""
  padded = np.zeros((rows, width), np.int32)
  for i, seq in enumerate(seqs):
    padded[i, :len(seq)] = np.asarray(seq)
  return full_logits(model, padded)[np.arange(len(seqs)), [len(seq) - 1 for seq in seqs]]


def _scored(model, prefix_BxP, tree, nodes_BxG, max_len=32):
  cfg = model.config
  cache = kv_cache.init_cache(cfg.num_layers, prefix_BxP.shape[0], max_len, cfg.num_kv_heads, cfg.head_dim)
  _, _, cache = forward(model, prefix_BxP[:, :-1], cache)
  cache = cache.with_length(jnp.full((prefix_BxP.shape[0],), prefix_BxP.shape[1] - 1))
  toks = jnp.concatenate([prefix_BxP[:, -1:], nodes_BxG], axis=1)
  logits, _, cache = forward(model, toks, cache, tree.positions(cache.length_B), jnp.asarray(tree.mask))
  return logits, cache, toks


def test_one_pass_scores_every_root_path(target):
  tree = TREES["width5"]
  prefix = jnp.array([[5, 9, 13, 2]])
  nodes = jax.random.randint(jax.random.PRNGKey(3), (1, tree.num_nodes - 1), 0, V)
  logits, _, toks = _scored(target, prefix, tree, nodes)
  toks = np.asarray(toks[0])  # every node a row: the prefix, then the node's root path
  seqs = [np.concatenate([prefix[0, :-1], toks[tree.ancestors[i, :tree.depth[i] + 1]]]) for i in range(tree.num_nodes)]
  np.testing.assert_allclose(logits[0], _last_logits(target, seqs), atol=1e-4)


def test_compaction_equals_fresh_forward(target):
  """Batch 3, each row keeps its own path; the next step after compaction == a fresh forward."""
  tree = TREES["specinfer"]
  b = 3
  prefix = jax.random.randint(jax.random.PRNGKey(0), (b, 5), 0, V)
  nodes = jax.random.randint(jax.random.PRNGKey(1), (b, tree.num_nodes - 1), 0, V)
  _, cache, toks = _scored(target, prefix, tree, nodes)
  leaf = jnp.array([tree.num_nodes - 1, 4, 0])  # a deep leaf, a mid node, nothing accepted
  path = jnp.asarray(tree.ancestors)[leaf]
  n = jnp.asarray(tree.depth)[leaf]
  length = cache.length_B
  cache = tree_lib.compact(cache, length[:, None] + path[:, 1:], length + 1).with_length(length + 1 + n)
  nxt = jnp.array([[7], [8], [9]])
  logits, _, _ = forward(target, nxt, cache)
  seqs = [np.concatenate([prefix[row, :-1], toks[row, path[row, :int(n[row]) + 1]], nxt[row]]) for row in range(b)]
  np.testing.assert_allclose(logits[:, 0], _last_logits(target, seqs), atol=1e-4)


def test_greedy_tree_accepts_the_longest_matching_path():
  tree = tree_lib.from_children((2, 2))  # nodes: 1,2 at depth 1; 3,4 under 1; 5,6 under 2
  v = 10
  best = np.array([4, 6, 4, 0, 0, 1, 0])  # the target's argmax at each node
  logits = jax.nn.one_hot(jnp.asarray(best), v)[None]
  toks = jnp.array([[0, 5, 4, 7, 7, 1, 9]])  # node 2 matches best[0]; neither of its children does
  leaf, nxt = accept.greedy(logits, toks, tree)
  assert int(leaf[0]) == 2 and int(nxt[0]) == 4  # node 2's children (1, 9) miss best[2] = 4
  toks = toks.at[0, 6].set(4)
  leaf, nxt = accept.greedy(logits, toks, tree)
  assert int(leaf[0]) == 6 and int(nxt[0]) == 0


@pytest.fixture(scope="module")
def baselines(target):
  return {b: specjax.generate(target, *_prompts(b, seed=b), max_new_tokens=MAX_NEW) for b in (1, 3, 8)}


SPECINFER = (1, 1, 3, 1, 1, 1, 1, 1)


# every tree shape, and every batch size for the paper's tree (each case is one compile)
@pytest.mark.parametrize("children,batch", [((1, 1, 1), 1), (SPECINFER, 1), (SPECINFER, 3), (SPECINFER, 8),
                                            ((5, 2, 1), 8)])
def test_specinfer_greedy_equality(target, baselines, children, batch):
  drafter = SpecInfer(testing.perturbed(target, 0.05), children=children)
  out = specjax.speculative_generate(target, drafter, *_prompts(batch, seed=batch), gamma=len(children),
                                     max_new_tokens=MAX_NEW)
  np.testing.assert_array_equal(out.tokens, baselines[batch].tokens)
  np.testing.assert_array_equal(out.lengths, baselines[batch].lengths)
  assert out.stats["mean_accepted"] > 0.3  # the tree path, compaction included, is exercised
  if batch > 1:  # one row's 20 tokens rarely reach the deepest node; the batched cases must
    stats_util.assert_accepts_at_every_depth(out.stats)


@pytest.mark.parametrize("batch", [8])  # batch 1 runs the same program as the trees above at batch 1
def test_specinfer_sparse_paths_greedy_equality(target, baselines, batch):
  """A chain of 5 with second choices at depths 1 and 3: parents have 2, 1 or 0 children per level."""
  paths = chain_with_branches(5, [(1, 2), (3, 1)])
  drafter = SpecInfer(testing.perturbed(target, 0.05), paths=paths)
  assert drafter.tree.num_nodes == 1 + 5 + 2 + 1 and not drafter.tree.is_chain
  out = specjax.speculative_generate(target, drafter, *_prompts(batch, seed=batch), gamma=5, max_new_tokens=MAX_NEW)
  np.testing.assert_array_equal(out.tokens, baselines[batch].tokens)
  assert out.stats["mean_accepted"] > 0.3
  if batch > 1:  # one row's 20 tokens rarely reach the deepest node; the batched cases must
    stats_util.assert_accepts_at_every_depth(out.stats)


def test_chain_with_branches_paths():
  assert chain_with_branches(3, []) == ((0,), (0, 0), (0, 0, 0))
  assert chain_with_branches(2, [(2, 1), (1, 2)])[2:] == ((0, 1), (1,), (1, 0))
  with pytest.raises(ValueError, match="depth 4"):
    chain_with_branches(3, [(4, 1)])
  assert tree_lib.parse_chain_paths("chain2+2x1+1x2") == chain_with_branches(2, [(2, 1), (1, 2)])
  with pytest.raises(ValueError, match="chainDEPTH"):
    tree_lib.parse_chain_paths("chain2+1")


def test_specinfer_with_the_target_as_drafter_accepts_everything(target, baselines):
  out = specjax.speculative_generate(target, SpecInfer(target, children=SPECINFER), *_prompts(3, seed=3),
                                     gamma=8, max_new_tokens=MAX_NEW)
  np.testing.assert_array_equal(out.tokens, baselines[3].tokens)
  assert out.stats["iterations"] == -(-MAX_NEW // 9)


def test_gamma_must_be_the_tree_depth(target):
  with pytest.raises(ValueError, match="depth 3"):
    specjax.speculative_generate(target, SpecInfer(target, children=(2, 1, 1)), *_prompts(1), gamma=4,
                                 max_new_tokens=4)


@pytest.mark.parametrize("shape", ["(2, 2, 1)", "chain3+1x2+2x1"])
def test_specinfer_level_by_level_drafting_matches_a_full_forward(target, shape):
  """Each node's q is the small model's distribution after the committed text and the node's
  ancestors, as a cache-free forward computes it: the window mask hides non-ancestor nodes."""
  small = testing.perturbed(target, 0.3)
  drafter = (SpecInfer(small, paths=tree_lib.parse_chain_paths(shape)) if shape.startswith("chain")
             else SpecInfer(small, children=eval(shape)))  # pylint: disable=eval-used
  tree, t1 = drafter.tree, specjax.Sampling(temperature=1.0)
  prompts, lengths = _prompts(2, seed=5)
  max_len = prompts.shape[1] + tree.num_nodes + 2
  state = drafter.init(target, jnp.asarray(prompts), jnp.asarray(lengths), max_len)
  tokens_BxS = jnp.zeros((2, max_len), jnp.int32).at[:, :prompts.shape[1]].set(prompts)
  propose = jax.jit(lambda d, *a: d.propose(*a, tree.max_depth, t1, jax.random.PRNGKey(0)))  # weights as arguments
  _, draft = propose(drafter, state, tokens_BxS, jnp.asarray(lengths))
  nodes = np.concatenate([np.zeros((2, 1), np.int32), np.asarray(draft.tokens_BxG)], axis=1)
  # the node's draft ancestors, root excluded
  seqs = [np.concatenate([prompts[b, :lengths[b]], nodes[b, tree.ancestors[i, 1:tree.depth[i]]]])
          for b in range(2) for i in range(1, tree.num_nodes)]
  want = jax.nn.softmax(_last_logits(small, seqs), -1).reshape(2, tree.num_nodes - 1, -1)
  np.testing.assert_allclose(draft.q_BxGxV, want, atol=2e-5)
