"""EAGLE-3 head and EAGLE-2 dynamic trees: training matches decoding, greedy equality, chi-squared exactness.

Exactness design as in test_exactness.py: N rows of one prompt, 3 tokens each, a chi-squared
test of the 512 joint counts against the exact target distribution, for static and dynamic trees
at T=1 and with top-p. The power check: EAGLE-2's selection score (the drawn token's own
probability) applied to sampled children must FAIL the same test, on the same number of rows.
"""
import pathlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import stats_util

import specjax
from specjax import testing
from specjax import tree as tree_lib
from specjax import tree_rows
from specjax.drafters.eagle import DynamicTree, Eagle, default_static_paths
from specjax.models import eagle_head, heads, kv_cache
from specjax.train import eagle as train_eagle
from specjax.train import heads as train_heads
from specjax.train import loop

V = 8
# rows per chi-squared run: half of the shared stats_util.N, as test_exactness (the loop's run time is
# proportional to it). The power check still fails by far: p ~ 1e-88 on 5,000 rows, 0 on 20,000.
N = stats_util.N // 2
T1 = specjax.Sampling(temperature=1.0)
TOPP = specjax.Sampling(temperature=1.0, top_p=0.8)
DEMO_HEAD = pathlib.Path(specjax.__file__).parent / "assets" / "demo" / "eagle"


def tiny_head(target, seed=1, lm_scale=3.0, draft_vocab_size=0):
  tc = target.config
  head = heads.init_head(eagle_head.EagleHead(eagle_head.EagleConfig(
      vocab_size=tc.vocab_size, d_model=tc.d_model, num_heads=4, num_kv_heads=2, head_dim=8, mlp_dim=64,
      target_layers=(0, 1), draft_vocab_size=draft_vocab_size)), seed)
  params = dict(head.params, lm_head=head.params["lm_head"] * lm_scale)  # a peaked q, far from p
  return head.replace(params=params)


@pytest.fixture(scope="module")
def tiny():
  target = testing.tiny_decoder(V, seed=0, weight_scale=1.0)
  return target, tiny_head(target)


# ----------------------------------------------------------------------------- training = decoding
def test_training_time_test_matches_decoding(tiny):
  """Step j of the unrolled training pass at slot s equals the j-th draft step of a real decode
  that committed slots 0..s-j+1 and fed the true tokens (the head cache as propose fills it)."""
  target, head = tiny
  mod, ap = head.module, lambda *a, **k: head.module.apply({"params": head.params}, *a, **k)
  toks = np.random.default_rng(0).integers(1, V, size=(2, 14)).astype(np.int32)
  batch = train_heads.target_features(target, toks, mod.cfg.target_layers)
  embed, _ = heads.target_io(target)
  emb_next = embed[jnp.concatenate([batch["tokens"][:, 1:], batch["tokens"][:, -1:]], 1)]
  depth = 4
  unrolled = ap(batch["feat"], emb_next, depth, method="unrolled")
  for c in (0, 3, 8):
    cache = kv_cache.init_cache(1, 2, 24, mod.cfg.num_kv_heads, mod.cfg.head_dim)
    h = ap(batch["feat"][:, :c + 1], method="project")
    g, logits, cache = ap(h, emb_next[:, :c + 1], jnp.broadcast_to(jnp.arange(c + 1)[None], (2, c + 1)), cache,
                          kv_cache.causal_mask(c + 1))
    np.testing.assert_allclose(logits[:, c], unrolled[0, :, c], atol=1e-4)
    g = g[:, c:c + 1]
    for j in range(2, depth + 1):
      s = c + j - 1  # draft slot of step j; the window holds this draft's earlier slots c+1..s
      g, logits, cache = ap(g, emb_next[:, s:s + 1], jnp.full((2, 1), s), cache.with_length(jnp.full((2,), s)),
                            jnp.ones((1, j - 1), bool))
      np.testing.assert_allclose(logits[:, 0], unrolled[j - 1, :, s], atol=1e-4)


def test_training_loss_falls_and_resume_is_exact(tiny, tmp_path):
  target, head = tiny
  layers = head.config.target_layers
  data = np.asarray(specjax.generate(target, *stats_util.prompts(8, seed=5, vocab=V), max_new_tokens=24).tokens)
  batch_fn = lambda step: train_heads.target_features(target, data[(step * 4 + np.arange(4)) % len(data)], layers)
  loss_fn = train_eagle.eagle_loss(head.module, target, depth=3)
  cfg = loop.TrainConfig(steps=10, learning_rate=1e-2, warmup_steps=1, checkpoint_every=5, log_every=1)
  fresh = lambda: jax.tree_util.tree_map(jnp.copy, head.params)
  straight = loop.train(fresh(), loss_fn, batch_fn, cfg, tmp_path / "straight")
  loop.train(fresh(), loss_fn, batch_fn, cfg, tmp_path / "resumed", stop_after=5)
  resumed = loop.train(fresh(), loss_fn, batch_fn, cfg, tmp_path / "resumed")
  a = [r["loss"] for r in loop.read_metrics(tmp_path / "straight")]
  np.testing.assert_array_equal(a, [r["loss"] for r in loop.read_metrics(tmp_path / "resumed")])
  for x, y in zip(jax.tree_util.tree_leaves(straight), jax.tree_util.tree_leaves(resumed)):
    np.testing.assert_array_equal(x, y)
  assert np.mean(a[-3:]) < 0.7 * a[0], a
  loaded = heads.load_head(heads.save_head(head.replace(params=straight), tmp_path / "eagle"))
  assert loaded.config == head.config


# ----------------------------------------------------------------------------- per-row trees
@pytest.mark.parametrize("tree", [tree_lib.from_children((3, 2)), tree_lib.chain(4),
                                  tree_lib.from_paths(tree_lib.chain_with_branches(4, [(1, 3), (2, 1)]))])
def test_row_trees_derive_the_static_tables(tree):
  b = 2
  rows = tree_rows.from_parents(np.broadcast_to(np.asarray(tree.parents), (b, tree.num_nodes)), tree.max_depth,
                                tree.max_width)
  for name in ("depth", "mask", "ancestors", "children_table"):
    np.testing.assert_array_equal(np.asarray(getattr(rows, name)), np.broadcast_to(getattr(tree, name), (b,) + getattr(tree, name).shape), err_msg=name)


def test_select_keeps_a_parent_closed_topological_tree():
  rng = np.random.default_rng(0)
  b, k, depth = 4, 3, 3
  parent = [np.full((b, k), -1)]
  score = [np.sort(np.log(rng.random((b, k))), -1)[:, ::-1]]
  offset = k
  for _ in range(depth - 1):
    beam = rng.permuted(np.tile(np.arange(offset - len(parent[-1][0]), offset), (b, 1)), axis=1)[:, :k]
    par_score = np.take_along_axis(np.concatenate(score, 1), beam, 1)
    child = np.minimum(par_score[:, :, None] + np.log(rng.random((b, k, k))), par_score[:, :, None])
    parent.append(np.repeat(beam, k, 1)), score.append(child.reshape(b, -1))
    offset += k * k
  score_BxZ, parent_BxZ = np.concatenate(score, 1), np.concatenate(parent, 1)
  keep, rows = tree_rows.select(jnp.asarray(score_BxZ, jnp.float32), jnp.asarray(parent_BxZ, jnp.int32), 7, depth, k)
  keep, par = np.asarray(keep), np.asarray(rows.parents)
  for r in range(b):
    kept = set(keep[r].tolist())
    assert all(parent_BxZ[r, i] < 0 or parent_BxZ[r, i] in kept for i in kept), "selection must be parent-closed"
    assert all(0 <= par[r, i] < i for i in range(1, 8))
    best = np.sort(score_BxZ[r])[::-1][:7]
    np.testing.assert_allclose(np.sort(score_BxZ[r, keep[r]])[::-1], best)
  with pytest.raises(ValueError, match="total_tokens"):
    tree_rows.select(jnp.asarray(score_BxZ, jnp.float32), jnp.asarray(parent_BxZ, jnp.int32), 99, depth, k)


# ----------------------------------------------------------------------------- greedy equality
@pytest.fixture(scope="module")
def demo():
  target = specjax.checkpoint.load_model(pathlib.Path(specjax.__file__).parent / "assets" / "demo" / "target")
  return target, heads.load_head(DEMO_HEAD)


def _demo_prompts(batch):
  from specjax.data import code_corpus  # pylint: disable=import-outside-toplevel
  prompts = np.stack(code_corpus.held_out_prompts(batch, 48, seed=3)).astype(np.int32)
  lengths = np.full((batch,), 48)
  lengths[1::2] = [30, 17, 41, 9][:len(lengths[1::2])]  # ragged rows
  prompts[np.arange(48)[None] >= lengths[:, None]] = 0
  return prompts, lengths


@pytest.mark.parametrize("shape,batch", [("chain", 8), ("static", 3), ("dynamic", 8), ("dynamic", 1)])
def test_greedy_equality_with_the_trained_head(demo, shape, batch):
  target, head = demo
  prompts, lengths = _demo_prompts(batch)
  gamma = 5
  drafter = {"chain": Eagle(head),
             "static": Eagle(head, paths=tree_lib.parse_chain_paths(default_static_paths(gamma))),
             "dynamic": Eagle(head, dynamic=DynamicTree(gamma, 3, 12))}[shape]
  base = specjax.generate(target, prompts, lengths, max_new_tokens=40)
  out = specjax.speculative_generate(target, drafter, prompts, lengths, gamma=gamma, max_new_tokens=40)
  np.testing.assert_array_equal(out.tokens, base.tokens)
  np.testing.assert_array_equal(out.lengths, base.lengths)
  assert out.stats["tokens_per_iteration"] > 2.0, out.stats  # the trained head's drafts are accepted, deep


# ----------------------------------------------------------------------------- sampling exactness
def _drafter(head, shape, score="rank"):
  if shape == "chain":
    return Eagle(head)
  if shape == "static":
    return Eagle(head, paths=tree_lib.full_paths((3, 2)))
  return Eagle(head, dynamic=DynamicTree(2, 3, 4, score=score))


# the exactness matrix (tests/test_exactness_matrix.py) runs EAGLE chains at T=1 and top-p, static
# trees at top-p and top-k, dynamic trees at T=1 and top-k; here the two pairs it leaves out
@pytest.mark.parametrize("shape,sampling", [("static", T1), ("dynamic", TOPP)], ids=["t1-static", "t1_topp0.8-dynamic"])
def test_sampled_output_is_exact(tiny, shape, sampling):
  target, head = tiny
  if sampling.top_p < 1:  # the sharp head drafts outside the top-p set nearly always: a milder one
    head = tiny_head(target, lm_scale=1.0)
  counts, st = stats_util.sampled_counts(target, _drafter(head, shape), sampling, N, gamma=2)
  assert 0.05 < st["acceptance_per_position"][0] < 0.98, "both accept and reject paths must be exercised"
  assert st["accepted_per_position"][1] > 0 and not st["lossy"]
  assert stats_util.chi2_pvalue(counts, stats_util.exact_joint(target, sampling)) > 1e-3


def test_selection_by_the_drawn_tokens_probability_is_biased(tiny):
  """The power check: EAGLE-2's rule on sampled children keeps likely draws more often -- detected."""
  target, head = tiny
  counts, _ = stats_util.sampled_counts(target, _drafter(head, "dynamic", score="drawn"), T1, N, gamma=2)
  assert stats_util.chi2_pvalue(counts, stats_util.exact_joint(target, T1)) < 1e-6


def test_truncated_vocabulary_head_is_exact(tiny):
  """A d2t-mapped head over 5 of the 8 ids: q is zero elsewhere and the residual still emits them."""
  target, _ = tiny
  head = tiny_head(target, seed=2, draft_vocab_size=5)
  drafter = Eagle(head, subset_K=jnp.array([0, 2, 3, 5, 6], jnp.int32), dynamic=DynamicTree(2, 3, 4))
  counts, st = stats_util.sampled_counts(target, drafter, T1, N, gamma=2)
  assert st["accepted_per_position"][0] > 0
  assert stats_util.chi2_pvalue(counts, stats_util.exact_joint(target, T1)) > 1e-3
  prompts, lengths = stats_util.prompts(3, seed=1, vocab=V)
  base = specjax.generate(target, prompts, lengths, max_new_tokens=12)
  out = specjax.speculative_generate(target, drafter, prompts, lengths, gamma=2, max_new_tokens=12)
  np.testing.assert_array_equal(out.tokens, base.tokens)


def test_head_cache_after_a_one_token_prompt_holds_the_true_inputs(tiny):
  """A row that starts from one token has no slot to predict its first draft from; its slot 0 must
  still end up holding (F_0, x_1) -- the generated x_1, not the padding that followed the prompt --
  like every other committed slot: the cache equals a fresh head pass over the committed text."""
  target, head = tiny
  drafter = Eagle(head)
  prompts = np.array([[5, 0, 0, 0, 0], [1, 2, 3, 1, 2]], np.int32)
  rows, state, _ = stats_util.drive_rounds(target, drafter, prompts, np.array([1, 5]), gamma=2,
                                           sampling=specjax.Sampling(), rounds=3)  # greedy: x_1 is the target's
  tokens, seq_len = np.asarray(rows.tokens_BxS), np.asarray(rows.seq_len_B)
  assert tokens[0, 1] != 0, "x_1 equals the padding: the check could not tell them apart"
  committed = np.asarray(state.cache.length_B)  # catch-up commits through the last round's root slot
  assert committed[0] >= 2 and np.all(committed < seq_len), (committed, seq_len)
  b, s = tokens.shape
  ap = lambda *a, **k: head.module.apply({"params": head.params}, *a, **k)
  feat = train_heads.target_features(target, tokens, head.config.target_layers)["feat"]
  embed, _ = heads.target_io(target)
  emb_next = embed[jnp.concatenate([tokens[:, 1:], tokens[:, -1:]], 1)]
  fresh = kv_cache.init_cache(1, b, s, head.config.num_kv_heads, head.config.head_dim)
  _, _, fresh = ap(ap(feat, method="project"), emb_next, jnp.broadcast_to(jnp.arange(s)[None], (b, s)), fresh,
                   kv_cache.causal_mask(s))
  for r in range(b):
    n = int(committed[r])
    np.testing.assert_allclose(state.cache.k_LxBxAxSxD[:, r, :, :n], fresh.k_LxBxAxSxD[:, r, :, :n], atol=1e-4)
    np.testing.assert_allclose(state.cache.v_LxBxAxSxD[:, r, :, :n], fresh.v_LxBxAxSxD[:, r, :, :n], atol=1e-4)


# ----------------------------------------------------------------------------- errors, config
def test_errors(tiny):
  target, head = tiny
  with pytest.raises(ValueError, match="total_tokens=99 exceeds"):
    DynamicTree(3, 2, 99)
  with pytest.raises(ValueError, match="positive integer"):
    DynamicTree(0, 2, 2)
  with pytest.raises(ValueError, match="not both"):
    Eagle(head, paths=((0,),), dynamic=DynamicTree(2, 2, 2))
  p = np.ones((1, 3), np.int32)
  with pytest.raises(ValueError, match="no d2t map"):
    specjax.speculative_generate(target, Eagle(tiny_head(target, draft_vocab_size=5)), p, [3], gamma=2,
                                 max_new_tokens=2)
  with pytest.raises(ValueError, match="gamma=3 but the drafter's token tree has depth 2"):
    specjax.speculative_generate(target, Eagle(head, dynamic=DynamicTree(2, 2, 3)), p, [3], gamma=3,
                                 max_new_tokens=2)


def test_eagle_demo_config_runs_through_the_cli_path():
  from specjax import config_util  # pylint: disable=import-outside-toplevel
  from specjax import experiment  # pylint: disable=import-outside-toplevel
  root = pathlib.Path(__file__).parent.parent / "configs"
  config = config_util.sibling_config(str(root / "demo.py"), "eagle_demo", "dynamic")
  config.max_new_tokens, config.batch_size, config.repeats = 24, 2, 1
  summary = experiment.run(config, verbose=False)
  assert summary["identical_to_autoregressive"] is True and summary["tokens_per_iteration"] > 1.5, summary
