"""Token trees keep the target's distribution: multi-round verification with i.i.d. siblings and
with siblings drawn without replacement (recursive rejection sampling), on width-3 trees.

Same design as test_exactness.py: 10k rows share one prompt, each generates depth + 1 = 3 tokens
(a row whose first round accepts a whole root-to-leaf path also emits its bonus token), and a
chi-squared test compares the 512 joint counts with the exact target distribution, computed
without specjax.sampling. Plausible wrong variants (forgetting to update q after a
without-replacement rejection; drawing the bonus token after a full path from q instead of p)
must fail it.
"""
import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import specjax
import stats_util
from specjax import accept, testing
from specjax import tree as tree_lib
from specjax.drafters.medusa import Medusa, init_heads
from specjax.drafters.specinfer import SpecInfer

from test_exactness import N, PROMPT, V, chi2_pvalue, exact_joint

CHILDREN = (3, 3)  # width 3 at depth 1, 9 nodes at depth 2
T1 = specjax.Sampling(temperature=1.0)


@pytest.fixture(scope="module")
def pair():
  target = testing.tiny_decoder(V, seed=0, weight_scale=1.0)
  # a sharper drafter than the target: q is peaked, so removing a rejected token changes q a lot
  drafter = testing.tiny_decoder(V, seed=3, weight_scale=1.6, num_layers=1)
  return target, drafter


def tree_counts(target, drafter, sampling, seed=0):
  prompts = np.repeat(PROMPT, N, 0)
  lengths = np.full((N,), PROMPT.shape[1])
  depth = drafter.tree.max_depth
  out = specjax.speculative_generate(target, drafter, prompts, lengths, gamma=depth, max_new_tokens=depth + 1,
                                     sampling=sampling, rng=jax.random.PRNGKey(seed))
  return stats_util.token_counts(out.tokens, V), out.stats


@pytest.mark.parametrize("siblings", ["iid", "without_replacement"])
def test_specinfer_multi_round_is_exact(pair, siblings):
  target, small = pair
  counts, st = tree_counts(target, SpecInfer(small, children=CHILDREN, siblings=siblings), T1)
  assert 0.2 < st["acceptance_per_position"][0] < 0.98, "both accept and reject paths must be exercised"
  stats_util.assert_full_paths(st)
  assert not st["lossy"]
  assert chi2_pvalue(counts, exact_joint(target, T1)) > 1e-3


def test_without_replacement_with_top_k_sampling_is_exact(pair):
  """top_k=3 < width 3 + rejected ones: q's support runs out, exhausted siblings must be skipped."""
  target, small = pair
  sampling = specjax.Sampling(temperature=0.8, top_k=3)
  counts, st = tree_counts(target, SpecInfer(small, children=(4, 2), siblings="without_replacement"), sampling)
  stats_util.assert_full_paths(st)
  assert chi2_pvalue(counts, exact_joint(target, sampling)) > 1e-3


def test_medusa_sampled_tree_is_exact(pair):
  target, _ = pair
  heads = init_heads(None, 2, target.config.d_model)
  heads["w_KxExE"] = 0.5 * jax.random.normal(jax.random.PRNGKey(1), heads["w_KxExE"].shape) / 6
  medusa = Medusa.create(target, heads, paths=tree_lib.full_paths((3, 2)))
  counts, st = tree_counts(target, medusa, T1)
  stats_util.assert_full_paths(st)
  assert chi2_pvalue(counts, exact_joint(target, T1)) > 1e-3


def test_check_rejects_stale_q_after_without_replacement_rejection(pair, monkeypatch):
  """The wrong variant keeps testing later siblings against the full q: it must fail the check."""
  target, small = pair
  monkeypatch.setattr(accept, "multi_round", functools.partial(accept.multi_round, update_q=False))
  jax.clear_caches()
  try:
    counts, _ = tree_counts(target, SpecInfer(small, children=CHILDREN, siblings="without_replacement"), T1)
  finally:
    monkeypatch.undo()
    jax.clear_caches()
  pvalue = chi2_pvalue(counts, exact_joint(target, T1))
  print("stale-q p-value", pvalue, "2-token marginal", chi2_pvalue(counts, exact_joint(target, T1, tokens=2)))
  assert pvalue < 1e-6


def test_check_rejects_a_bonus_token_drawn_from_q_after_a_full_path(pair, monkeypatch):
  """After a whole root-to-leaf path is accepted the next token comes from p at the leaf; drawing it
  from the drafter's q there (the distribution the leaf itself was drawn from) must fail the check."""
  target, small = pair
  wrong = stats_util.bonus_rule_patch(accept.multi_round, "q")
  counts, st = stats_util.run_patched(monkeypatch, accept, "multi_round", wrong, lambda: tree_counts(
      target, SpecInfer(small, children=CHILDREN, siblings="without_replacement"), T1))
  stats_util.assert_full_paths(st)
  pvalue = chi2_pvalue(counts, exact_joint(target, T1))
  print("wrong bonus rule p-value", pvalue)
  assert pvalue < 1e-6


def test_deterministic_top_k_siblings_need_greedy_or_an_explicit_lossy_rule(pair):
  target, small = pair
  for siblings in ("topk", "topk_lossy"):
    with pytest.raises(ValueError, match="exact only for greedy"):
      tree_counts(target, SpecInfer(small, children=CHILDREN, siblings=siblings), T1)
    st = specjax.speculative_generate(target, SpecInfer(small, children=CHILDREN, siblings=siblings),
                                      PROMPT, [PROMPT.shape[1]], gamma=2, max_new_tokens=4, sampling=T1,
                                      allow_lossy=True).stats
    assert st["lossy"] is True and "top-k" in st["lossy_reason"]


def test_multi_round_unit_residual_and_exhausted_support():
  """One node, two children with the same token: the second try sees the residual, never NaN."""
  tree = tree_lib.from_children((2,))
  p = jnp.array([[[0.5, 0.5, 0.0], [1, 0, 0], [1, 0, 0]]], jnp.float32)
  q = jnp.array([[[0, 0, 0], [0.5, 0.5, 0.0], [0.5, 0.5, 0.0]]], jnp.float32)  # p == q: always accepted
  toks = jnp.array([[0, 1, 1]])
  for wr in (False, True):
    leaf, nxt = accept.multi_round(jax.random.PRNGKey(0), p, q, toks, tree, wr)
    assert int(leaf[0]) == 1 and int(nxt[0]) == 0  # a leaf accepted: the bonus from p there, one-hot on 0
  q_peak = jnp.array([[[0, 0, 0], [0, 0, 1.0], [0, 0, 1.0]]], jnp.float32)  # drafts a token p never emits
  toks = jnp.array([[0, 2, 2]])
  for wr in (False, True):
    leaf, nxt = accept.multi_round(jax.random.PRNGKey(0), p, q_peak, toks, tree, wr)
    assert int(leaf[0]) == 0 and int(nxt[0]) in (0, 1)
