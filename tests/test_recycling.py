"""Token Recycling (specjax.drafters.recycling) and the static tree's node budget switch.

The template and its checks; the tree formula (theory / adaptive agree, a chain gives the chain
formula); the trials count the budget's estimate learns from; greedy output equals autoregressive
with the budget switch using several budgets and the table learning across calls and refills; and
sampled output with budgets that really vary passes the chi-squared test (the matrix's sampled
cells run at a zero verify cost, where the widest budget always wins).
"""
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import stats_util  # tests/ is on sys.path under pytest

import specjax
from specjax import adaptive as adaptive_lib
from specjax import theory
from specjax import tree as tree_lib
from specjax.conformance import cases as cfgs
from specjax.conformance import matrix as exactness
from specjax.drafters import recycling
from specjax.kinds import recycling as recycling_kind


def test_template_checks_and_shape():
  parents, rank = recycling.template(recycling.DEFAULT_PATHS)
  assert parents == (-1, 0, 1, 0, 2, 1, 0, 3, 4) and list(rank) == [0, 0, 0, 1, 0, 1, 2, 0, 0]
  for k in (2, 4, 8):  # every budget's first nodes are a tree of their own
    tree_lib.Tree(parents[:k + 1])
  with pytest.raises(ValueError, match="before its parent"):
    recycling.template(((0, 0), (0,)))
  with pytest.raises(ValueError, match="increasing rank"):
    recycling.template(((1,), (0,)))
  with pytest.raises(ValueError, match="twice"):
    recycling.template(((0,), (0,)))
  with pytest.raises(ValueError, match="budgets"):
    recycling.Recycling.create(16, 8, budgets=(0, 9))
  with pytest.raises(ValueError, match="k must be"):
    specjax.drafters.make_options("recycling", {"k": 0})
  with pytest.raises(ValueError, match="learn_from must be one of"):
    recycling.Recycling.create(16, 8, learn_from="nodes")
  drafter = recycling.Recycling.create(16, 2)  # rank 2 in the default paths needs k >= 3
  with pytest.raises(ValueError, match="k > 2"):
    drafter.check_compatible(specjax.testing.tiny_decoder(16))


def test_ranked_paths_are_heaviest_first_and_every_prefix_is_a_tree():
  paths = recycling.ranked_paths(49)
  assert len(set(paths)) == 49 and max(map(len, paths)) == 6
  weight = lambda p: np.prod([recycling.RANK_WEIGHTS[r] for r in p])  # noqa: E731
  assert all(weight(a) >= weight(b) for a, b in zip(paths, paths[1:]))
  for b in (1, 4, 16, 49):  # each budget's first nodes: a template of their own (parents first)
    recycling.template(paths[:b])
  assert set(recycling.ranked_paths(8)) == set(recycling.DEFAULT_PATHS)
  with pytest.raises(ValueError, match="positive integer"):
    recycling.ranked_paths(0)


def test_a_table_counted_from_text_starts_with_the_most_frequent_successors():
  docs = [[1, 2, 1, 2, 1, 3], [1, 3, 1, 2, 4]]  # after 1: 2 three times, 3 twice; after 2: 1 twice, 4 once
  table = np.asarray(recycling.table_from_text(6, 3, docs))
  assert table[1].tolist() == [2, 3, 0] and table[2].tolist() == [1, 4, 0] and table[3].tolist() == [1, 0, 2]
  assert table[5].tolist() == [0, 1, 2]  # never seen: the initial ids
  with pytest.raises(ValueError, match="outside the vocabulary"):
    recycling.table_from_text(4, 3, docs)


def test_the_corpus_option_starts_the_table_from_a_data_folder(tmp_path):
  (tmp_path / "shards").mkdir()  # as python -m specjax.train data writes it: prompt 1 2, continuation 1 3
  np.savez(tmp_path / "shards" / "00000.npz", prompts=np.array([[1, 2, 0]], np.int32),
           prompt_lengths=np.array([2], np.int32), tokens=np.array([[1, 3, 0]], np.int32),
           lengths=np.array([2], np.int32), kinds=np.array(["chat"]), sources=np.array(["q"]), seconds=np.float64(1.0))
  drafter = specjax.drafters.build("recycling", {"corpus": str(tmp_path), "k": 3}, specjax.testing.tiny_decoder(16))
  assert np.asarray(drafter.memory)[[1, 2]].tolist() == [[2, 3, 0], [1, 0, 2]]


def test_tree_formula_chain_case_and_jnp_agree():
  alpha = np.array([0.0, 0.3, 0.7, 0.95])
  chain = tree_lib.chain(4).parents
  np.testing.assert_allclose(theory.expected_tokens_tree(alpha, chain), theory.expected_tokens(alpha, 4), rtol=1e-12)
  parents = recycling.template(recycling.DEFAULT_PATHS)[0]
  want = theory.expected_tokens_tree(alpha, parents)
  got = adaptive_lib.tree_expected_tokens(jnp.asarray(alpha), *theory.tree_path_sums(parents))
  np.testing.assert_allclose(np.asarray(got), want, rtol=1e-5)
  # by hand at alpha 0.5 for root children ranks 0, 1 (0.5, 0.25) and a grandchild of the first (0.25)
  np.testing.assert_allclose(theory.expected_tokens_tree(0.5, (-1, 0, 0, 1)), 1 + 0.5 + 0.25 + 0.25)
  assert np.all(np.diff(want) > 0)  # more acceptance, more tokens


def test_trials_along_the_path():
  tree = tree_lib.Tree((-1, 0, 0, 1, 1))  # root: children 1 (a), 2 (b); node 1: children 3 (c), 4 (d)
  tokens = jnp.asarray([[9, 1, 2, 3, 4]] * 4)
  new = jnp.asarray([[5, 0, 0], [2, 7, 0], [1, 4, 8], [1, 6, 0]])  # rejected both; 2nd; 1 then 2nd child; 1 then none
  n = jnp.asarray([0, 1, 2, 1])
  np.testing.assert_array_equal(np.asarray(tree_lib.tried_along_path(tree, tokens, new, n)), [2, 2, 3, 3])
  # a budget of 3 drafted nodes (1, 2, 3): node 4 is not there (row 2 took it, so it is left out)
  budget = np.asarray(tree_lib.tried_along_path(tree, tokens, new, n, jnp.full((4,), 4)))
  np.testing.assert_array_equal(budget[[0, 1, 3]], [2, 2, 2])
  chain = tree_lib.chain(3)  # a chain: accepted + 1, or all accepted
  np.testing.assert_array_equal(np.asarray(tree_lib.tried_along_path(
      chain, jnp.asarray([[9, 1, 2, 3]] * 2), jnp.asarray([[1, 5, 0, 0], [1, 2, 3, 4]]), jnp.asarray([1, 3]))), [2, 3])


def test_greedy_budgets_learning_and_refill_equal_autoregressive():
  target = stats_util.demo_target()
  prompts, lengths = stats_util.demo_prompts(4, width=32)
  n = 40
  ref = specjax.generate(target, prompts, lengths, max_new_tokens=n)
  drafter = specjax.drafters.Recycling.create(target.vocab_size)
  adaptive = specjax.Adaptive(prior=0.6)
  first = specjax.speculative_generate(target, drafter, prompts, lengths, gamma=4, max_new_tokens=n, adaptive=adaptive)
  np.testing.assert_array_equal(first.tokens, ref.tokens)
  assert first.stats["verify_budgets"] == [0, 2, 4, 8]
  assert sum(h > 0 for h in first.stats["width_histogram"]) >= 2, first.stats["width_histogram"]
  table = np.asarray(first.drafter.memory)
  learned = (table != np.asarray(drafter.memory)).any(axis=1).sum()
  assert learned > 20  # rows learned from the verify passes
  # learning from every scored node (rejected drafts too): the same tokens, more rows learned
  from_tree = specjax.speculative_generate(target, drafter.replace(learn_from="tree"), prompts, lengths, gamma=4,
                                           max_new_tokens=n, adaptive=adaptive)
  np.testing.assert_array_equal(from_tree.tokens, ref.tokens)
  assert (np.asarray(from_tree.drafter.memory) != np.asarray(drafter.memory)).any(axis=1).sum() > learned
  second = specjax.speculative_generate(target, first.drafter, prompts, lengths, gamma=4, max_new_tokens=n)
  np.testing.assert_array_equal(second.tokens, ref.tokens)
  assert min(second.stats["accepted_per_position"]) > 0  # accepted at every depth of the full tree
  assert second.stats["tokens_per_iteration"] > 1.5  # the learned table drafts the same text again
  refill = specjax.speculative_generate(target, first.drafter, prompts, lengths, gamma=4, max_new_tokens=n,
                                        batch_size=2, adaptive=adaptive)
  np.testing.assert_array_equal(refill.tokens, ref.tokens)


def test_sampled_with_varying_budgets_is_exact():
  """The matrix's recycling template with budgets 0, 2, 5 chosen at a real verify cost: every budget
  runs, and the 3-token joint passes the chi-squared test."""
  drafter = recycling.Recycling.create(cfgs.V, 2, recycling_kind.MATRIX_PATHS, (0, 2, 5))
  adaptive = specjax.Adaptive(verify_costs=((2, 1.45), (5, 1.75)))  # budgets 0, 2 and 5 all win some rounds
  rows = 10_000
  prompts, lengths, batch_size, group = exactness.sampled_batch("refill", rows)
  sampling = exactness.samplings()["t1"]
  out = specjax.speculative_generate(cfgs.models().target, drafter, prompts, lengths, gamma=cfgs.GAMMA,
                                     max_new_tokens=cfgs.GAMMA + 1, sampling=sampling, adaptive=adaptive,
                                     batch_size=batch_size, rng=jax.random.PRNGKey(5))
  assert all(h > 0 for h in out.stats["width_histogram"]), out.stats["width_histogram"]
  counts, joints = [], []
  for name in sorted(set(group)):
    toks = np.asarray(out.tokens)[group == name]
    c = np.zeros((cfgs.V,) * (cfgs.GAMMA + 1))
    np.add.at(c, tuple(toks.T), 1)
    counts.append(c)
    joints.append(exactness.exact_joint(cfgs.PROMPTS[name], "t1") * len(toks) / rows)
  p = exactness.chi2_pvalue(np.stack(counts), np.stack(joints))
  assert p > exactness.ALPHA, p
  assert out.stats["accepted_per_position"][-1] > 0
