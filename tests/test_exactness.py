"""Proof obligation 2: sampled speculative output is distributed exactly as the target's.

20k rows (stats_util.N) share one prompt; each generates a 2-token continuation. A chi-squared test compares
the 64 joint counts with the exact distribution computed from ``specjax.logits`` (with the same
temperature/top-k/top-p). The same check must reject deliberately wrong rules, which shows it
has the power to catch a subtle bug.
"""
import jax
import numpy as np
import pytest
import stats_util  # tests/ is on sys.path under pytest

import specjax
from specjax import accept, testing
from specjax import tree as tree_lib

V = 8
N = stats_util.N
PROMPT = np.array([[1, 2, 3, 1, 2]])


@pytest.fixture(scope="module")
def pair():
  target = testing.tiny_decoder(V, seed=0, weight_scale=1.0)
  drafter = testing.tiny_decoder(V, seed=3, weight_scale=1.0, num_layers=1)
  return target, drafter


def exact_joint(target, sampling):
  return stats_util.exact_joint(target, sampling, PROMPT)


def sampled_counts(target, drafter, sampling, gamma=2, lenience=1.0, seed=0):
  return stats_util.sampled_counts(target, drafter, sampling, N, gamma, lenience, seed, PROMPT)


chi2_pvalue = stats_util.chi2_pvalue


SETTINGS = {
    "t1": specjax.Sampling(temperature=1.0),
    "t0.7_topk5": specjax.Sampling(temperature=0.7, top_k=5),
    "t1_topp0.8": specjax.Sampling(temperature=1.0, top_p=0.8),
}


@pytest.mark.parametrize("name", list(SETTINGS))
def test_draft_model_is_exact(pair, name):
  target, drafter = pair
  sampling = SETTINGS[name]
  counts, st = sampled_counts(target, specjax.drafters.DraftModel(drafter), sampling)
  assert 0.05 < st["acceptance_per_position"][0] < 0.95, "both accept and reject paths must be exercised"
  assert chi2_pvalue(counts, exact_joint(target, sampling)) > 1e-3


def test_ngram_one_hot_q_is_exact(pair):
  target, _ = pair
  sampling = SETTINGS["t1"]
  counts, st = sampled_counts(target, specjax.drafters.NGram(2), sampling, gamma=2)
  assert st["accepted_per_position"][0] > 0
  assert chi2_pvalue(counts, exact_joint(target, sampling)) > 1e-3


def test_check_rejects_accepting_without_the_test(pair):
  """lenience -> 0 accepts every draft: output follows q, not p; the check must say so."""
  target, drafter = pair
  sampling = SETTINGS["t1"]
  counts, _ = sampled_counts(target, specjax.drafters.DraftModel(drafter), sampling, lenience=1e-9)
  assert chi2_pvalue(counts, exact_joint(target, sampling)) < 1e-6


def test_check_detects_lenience(pair):
  """Leviathan's lenience l < 1 is lossy, and the run says so."""
  target, drafter = pair
  sampling = SETTINGS["t1"]
  counts, st = sampled_counts(target, specjax.drafters.DraftModel(drafter), sampling, lenience=0.5)
  assert st["lossy"] is True
  assert chi2_pvalue(counts, exact_joint(target, sampling)) < 1e-6


def test_check_rejects_resampling_from_p(pair, monkeypatch):
  """A plausible bug: on rejection, draw from p instead of norm(max(0, p - q))."""
  target, drafter = pair
  sampling = SETTINGS["t1"]
  monkeypatch.setattr(accept, "residual", lambda r_BxV, q_BxV: r_BxV)
  jax.clear_caches()  # the loop was traced with the real rule
  try:
    counts, _ = sampled_counts(target, specjax.drafters.DraftModel(drafter), sampling)
  finally:
    monkeypatch.undo()
    jax.clear_caches()
  assert chi2_pvalue(counts, exact_joint(target, sampling)) < 1e-6


def test_residual_guard_falls_back_to_p():
  """p == q gives an all-zero residual; the rule must then draw from p, never NaN."""
  chain1 = tree_lib.chain(1)
  p = jax.numpy.array([[[0.5, 0.5, 0.0], [0.2, 0.3, 0.5]]])
  q = jax.numpy.concatenate([jax.numpy.zeros_like(p[:, :1]), p[:, :1]], axis=1)  # q of node 1 == p at root
  leaf, tok = accept.multi_round(jax.random.PRNGKey(0), p, q, jax.numpy.array([[7, 0]]), chain1, False)
  assert int(leaf[0]) == 1  # p == q: always accepted
  # force the rejection branch on a p == q position: the residual is empty, fall back to p
  leaf, tok = accept.multi_round(jax.random.PRNGKey(0), p, q, jax.numpy.array([[7, 2]]), chain1, False)
  assert int(leaf[0]) == 0 and int(tok[0]) in (0, 1)
  np.testing.assert_allclose(accept.residual(p[:, 0], p[:, 0]), p[:, 0])
