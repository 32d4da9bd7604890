"""Proof obligation 2: sampled speculative output is distributed exactly as the target's.

10k rows share one prompt; each generates gamma + 1 = 3 tokens, so a row that accepts
both drafts of its first round also emits the bonus token (drawn from p after the chain) inside the
tested joint. A chi-squared test compares the 512 joint counts with the exact distribution,
computed in float64 numpy from ``specjax.logits`` by the definitions of temperature, top-k and top-p
(``stats_util.reference_probs``), independently of ``specjax.sampling``.

The same check must reject deliberately wrong rules, which shows it has the power to catch a subtle
bug: in the accept rule (no test, lenience, the residual, the bonus token) and in the sampler
itself (a top-k or top-p boundary off by one token), at T = 1, with top-k and with top-p.
"""
import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import stats_util  # tests/ is on sys.path under pytest

import specjax
from specjax import accept, sampling as sampling_lib, testing
from specjax import tree as tree_lib

V = 8
# rows per run: half of stats_util.N. The loop's run time is proportional to it, and every power check
# below still fails by a wide margin (its p-value, printed, is 3e-213 or 0)
N = 10_000
PROMPT = np.array([[1, 2, 3, 1, 2]])
GAMMA = 2
TOKENS = GAMMA + 1


@pytest.fixture(scope="module")
def pair():
  target = testing.tiny_decoder(V, seed=0, weight_scale=1.0)
  drafter = testing.tiny_decoder(V, seed=3, weight_scale=1.0, num_layers=1)
  return target, drafter


def exact_joint(target, sampling, tokens=TOKENS):
  return stats_util.exact_joint(target, sampling, PROMPT, tokens)


def sampled_counts(target, drafter, sampling, gamma=GAMMA, lenience=1.0, seed=0):
  return stats_util.sampled_counts(target, drafter, sampling, N, gamma, lenience, seed, PROMPT)


chi2_pvalue = stats_util.chi2_pvalue


def power_pvalue(counts, joint):
  """A power check's p-value, printed (``pytest -s``) so its margin below 1e-6 can be read off."""
  pvalue = chi2_pvalue(counts, joint)
  print("wrong-rule p-value", pvalue)
  return pvalue


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
  stats_util.assert_full_paths(st)
  assert chi2_pvalue(counts, exact_joint(target, sampling)) > 1e-3


def test_ngram_one_hot_q_is_exact(pair):
  target, _ = pair
  sampling = SETTINGS["t1"]
  counts, st = sampled_counts(target, specjax.drafters.NGram(2), sampling)
  stats_util.assert_full_paths(st, at_least=0.005)  # one-hot q: a full path has probability p(3) p(1 | 3)
  assert chi2_pvalue(counts, exact_joint(target, sampling)) > 1e-3


def test_check_rejects_accepting_without_the_test(pair):
  """lenience -> 0 accepts every draft: output follows q, not p; the check must say so."""
  target, drafter = pair
  sampling = SETTINGS["t1"]
  counts, _ = sampled_counts(target, specjax.drafters.DraftModel(drafter), sampling, lenience=1e-9)
  assert power_pvalue(counts, exact_joint(target, sampling)) < 1e-6


def test_check_detects_lenience(pair):
  """Leviathan's lenience l < 1 is lossy, and the run says so."""
  target, drafter = pair
  sampling = SETTINGS["t1"]
  counts, st = sampled_counts(target, specjax.drafters.DraftModel(drafter), sampling, lenience=0.5)
  assert st["lossy"] is True
  assert power_pvalue(counts, exact_joint(target, sampling)) < 1e-6


def test_check_rejects_resampling_from_p_under_top_p(pair, monkeypatch):
  """A plausible bug: on rejection, draw from p instead of norm(max(0, p - q)); with top-p on."""
  target, drafter = pair
  sampling = SETTINGS["t1_topp0.8"]
  counts, _ = stats_util.run_patched(monkeypatch, accept, "residual", lambda r_BxV, q_BxV: r_BxV,
                                     lambda: sampled_counts(target, specjax.drafters.DraftModel(drafter), sampling))
  assert power_pvalue(counts, exact_joint(target, sampling)) < 1e-6


@pytest.mark.parametrize("name,kind", [("t1", "zero"), ("t0.7_topk5", "q")])
def test_check_rejects_a_wrong_bonus_token(pair, monkeypatch, name, kind):
  """After a fully accepted chain the bonus token must come from p after it: always emitting token 0,
  or drawing it from the drafter's q at the last draft, must fail the same test."""
  target, drafter = pair
  sampling = SETTINGS[name]
  wrong = stats_util.bonus_rule_patch(accept.multi_round, kind)
  counts, st = stats_util.run_patched(monkeypatch, accept, "multi_round", wrong,
                                      lambda: sampled_counts(target, specjax.drafters.DraftModel(drafter), sampling))
  stats_util.assert_full_paths(st)
  joint = exact_joint(target, sampling)
  print("2-token marginal (what a 2-token test would see):", chi2_pvalue(counts, joint.sum(-1)))
  assert power_pvalue(counts, joint) < 1e-6


def test_check_rejects_a_top_k_off_by_one(pair, monkeypatch):
  """The sampler keeping k - 1 tokens: the loop is then exact for a wrong distribution, on both sides
  of its own rule; only a reference built without ``specjax.sampling`` can tell."""
  target, drafter = pair
  sampling = SETTINGS["t0.7_topk5"]
  real = specjax.Sampling.probs
  wrong = lambda self, logits: real(dataclasses.replace(self, top_k=self.top_k - 1), logits)
  counts, _ = stats_util.run_patched(monkeypatch, specjax.Sampling, "probs", wrong,
                                     lambda: sampled_counts(target, specjax.drafters.DraftModel(drafter), sampling))
  assert power_pvalue(counts, exact_joint(target, sampling)) < 1e-6


def test_check_rejects_a_top_p_boundary_off_by_one(pair, monkeypatch):
  """The sampler dropping the token whose mass makes the kept prefix reach top_p."""
  target, drafter = pair
  sampling = SETTINGS["t1_topp0.8"]

  def short_prefix(probs_xV, top_p, *args, **kwargs):
    del args, kwargs
    srt = -jnp.sort(-probs_xV, axis=-1)
    keep = (jnp.cumsum(srt, -1) < top_p).at[..., 0].set(True)  # mass strictly below top_p (and the top token)
    return jnp.min(jnp.where(keep, srt, jnp.inf), -1, keepdims=True)

  counts, _ = stats_util.run_patched(monkeypatch, sampling_lib, "top_p_threshold", short_prefix,
                                     lambda: sampled_counts(target, specjax.drafters.DraftModel(drafter), sampling))
  assert power_pvalue(counts, exact_joint(target, sampling)) < 1e-6


# ----------------------------------------------------------------------------- units
def test_reference_follows_the_definitions():
  """stats_util.reference_probs on hand-made cases, the conventions specjax.sampling documents."""
  logits = np.log(np.array([[0.4, 0.3, 0.2, 0.1]]))
  np.testing.assert_allclose(stats_util.reference_probs(logits, 1.0), [[0.4, 0.3, 0.2, 0.1]])
  t = stats_util.reference_probs(logits, 0.5)  # temperature 0.5 squares the odds
  np.testing.assert_allclose(t, [[0.16, 0.09, 0.04, 0.01]] / np.float64(0.30))
  np.testing.assert_allclose(stats_util.reference_probs(logits, 1.0, top_k=2), [[4 / 7, 3 / 7, 0, 0]])
  tie = np.log(np.array([[0.4, 0.2, 0.2, 0.2]]))  # the 2nd largest is tied three ways: all stay
  np.testing.assert_allclose(stats_util.reference_probs(tie, 1.0, top_k=2), [[0.4, 0.2, 0.2, 0.2]])
  # top-p: the mass before the 2nd token is 0.4 < 0.65, before the 3rd 0.7: two tokens reach 0.65
  np.testing.assert_allclose(stats_util.reference_probs(logits, 1.0, top_p=0.65), [[4 / 7, 3 / 7, 0, 0]])
  np.testing.assert_allclose(stats_util.reference_probs(logits, 1.0, top_p=0.35), [[1, 0, 0, 0]])
  with pytest.raises(AssertionError, match="top-p boundary"):
    stats_util.reference_probs(logits, 1.0, top_p=0.7)  # on the boundary: float32 could go either way
  # and the loop's sampler agrees with it away from boundaries (a disagreement is a sampler bug)
  x = np.asarray(jax.random.normal(jax.random.PRNGKey(0), (64, 16))) * 2
  for s in SETTINGS.values():
    np.testing.assert_allclose(s.probs(jnp.asarray(x, jnp.float32)), stats_util.sampling_probs(x, s), atol=2e-6)


def test_bonus_token_unit():
  """p == q on a 2-draft chain: every draft is accepted and the token after it is drawn from p at the
  leaf, with its frequencies (20k rows, one call)."""
  b = 20_000
  chain2 = tree_lib.chain(2)
  p_leaf = jnp.array([0.1, 0.6, 0.0, 0.3])
  p = jnp.broadcast_to(jnp.stack([jnp.array([0.5, 0.5, 0, 0]), jnp.array([0, 0.5, 0.5, 0]), p_leaf]), (b, 3, 4))
  q = jnp.concatenate([jnp.zeros_like(p[:, :1]), p[:, :2]], axis=1)  # q of node i == p at its parent
  toks = jnp.broadcast_to(jnp.array([7, 1, 2]), (b, 3))
  leaf, nxt = accept.multi_round(jax.random.PRNGKey(0), p, q, toks, chain2, False)
  assert (np.asarray(leaf) == 2).all()
  counts = np.bincount(np.asarray(nxt), minlength=4)
  assert counts[2] == 0
  assert stats_util.chi2_pvalue(counts, np.asarray(p_leaf, np.float64)) > 1e-3
  leaf, nxt = stats_util.bonus_rule_patch(accept.multi_round, "zero")(jax.random.PRNGKey(0), p, q, toks, chain2, False)
  assert (np.asarray(nxt) == 0).all()  # the wrong rule the power checks plant does what it says


def test_residual_guard_falls_back_to_p():
  """p == q gives an all-zero residual; the rule must then draw from p, never NaN."""
  chain1 = tree_lib.chain(1)
  p = jax.numpy.array([[[0.5, 0.5, 0.0], [0.0, 0.0, 1.0]]])
  q = jax.numpy.concatenate([jax.numpy.zeros_like(p[:, :1]), p[:, :1]], axis=1)  # q of node 1 == p at root
  leaf, tok = accept.multi_round(jax.random.PRNGKey(0), p, q, jax.numpy.array([[7, 0]]), chain1, False)
  assert int(leaf[0]) == 1 and int(tok[0]) == 2  # p == q: always accepted; the bonus from p at node 1
  # force the rejection branch on a p == q position: the residual is empty, fall back to p
  leaf, tok = accept.multi_round(jax.random.PRNGKey(0), p, q, jax.numpy.array([[7, 2]]), chain1, False)
  assert int(leaf[0]) == 0 and int(tok[0]) in (0, 1)
  np.testing.assert_allclose(accept.residual(p[:, 0], p[:, 0]), p[:, 0])
