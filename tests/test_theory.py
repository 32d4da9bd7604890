"""specjax.theory against hand-computed values and Leviathan et al. 2022 (arXiv 2211.17192).

The paper's numbers: Table 2 (measured speedups of T5-XXL with T5-small/base/large drafters) and
Table 4 / App. A.3 (the same rows with c from profiler traces and the formula's "Exp" column).
Each check names a specific way a wrong formula fails (off-by-one in gamma, c not multiplied by
gamma, conditional vs unconditional acceptance, ...).
"""
import numpy as np
import pytest

from specjax import theory

# Leviathan et al. Table 4 (App. A.3): task, drafter, temp, gamma, alpha, c, Exp (formula), Emp (measured).
PAPER_TABLE4 = [
    ("EnDe", "T5-small", 0, 7, 0.75, 0.02, 3.2, 3.4),
    ("EnDe", "T5-base", 0, 7, 0.80, 0.04, 3.3, 2.8),
    ("EnDe", "T5-large", 0, 7, 0.82, 0.11, 2.5, 1.7),
    ("EnDe", "T5-small", 1, 7, 0.62, 0.02, 2.3, 2.6),
    ("EnDe", "T5-base", 1, 5, 0.68, 0.04, 2.4, 2.4),
    ("EnDe", "T5-large", 1, 3, 0.71, 0.11, 2.0, 1.4),
    ("CNNDM", "T5-small", 0, 5, 0.65, 0.02, 2.4, 3.1),
    ("CNNDM", "T5-base", 0, 5, 0.73, 0.04, 2.6, 3.0),
    ("CNNDM", "T5-large", 0, 3, 0.74, 0.11, 2.0, 2.2),
    ("CNNDM", "T5-small", 1, 5, 0.53, 0.02, 1.9, 2.3),
    ("CNNDM", "T5-base", 1, 3, 0.55, 0.04, 1.8, 2.2),
    ("CNNDM", "T5-large", 1, 3, 0.56, 0.11, 1.6, 1.7),
]


# ----------------------------------------------------------------------------- expected tokens (Eq. 1)
@pytest.mark.parametrize("alpha, gamma, want", [
    (0.6, 3, 2.176),          # (1 - 0.6^4) / 0.4 = 0.8704 / 0.4
    (0.5, 1, 1.5),            # 1 + 0.5
    (0.8, 4, 3.3616),         # 1 + .8 + .64 + .512 + .4096
    (0.75, 7, 3.5995483398),  # (1 - 0.75^8) / 0.25, 0.75^8 = 0.1001129
    (0.0, 5, 1.0),            # nothing accepted: the target's own token only
    (1.0, 5, 6.0),            # everything accepted: gamma + 1 (the 0/0 limit)
])
def test_expected_tokens_hand_values(alpha, gamma, want):
  assert float(theory.expected_tokens(alpha, gamma)) == pytest.approx(want, abs=1e-9)


def test_expected_tokens_is_a_geometric_sum_and_vectorised():
  alphas = np.linspace(0.0, 0.99, 23)
  for gamma in (1, 3, 8):
    want = sum(alphas ** i for i in range(gamma + 1))
    np.testing.assert_allclose(theory.expected_tokens(alphas, gamma), want, rtol=1e-12)


def test_expected_tokens_matches_simulated_iid_acceptance():
  """Monte Carlo of Leviathan's model: each draft accepted w.p. alpha until the first rejection."""
  rs = np.random.RandomState(0)
  alpha, gamma, n = 0.7, 4, 200_000
  accepted = (rs.rand(n, gamma) < alpha).cumprod(1).sum(1)  # drafts kept before the first rejection
  assert (accepted + 1).mean() == pytest.approx(float(theory.expected_tokens(alpha, gamma)), rel=0.01)


# ----------------------------------------------------------------------------- walltime improvement (Thm 3.8)
def test_walltime_hand_values():
  # alpha 0.75, gamma 7, c 0.008: 3.5996 / (7 * 0.008 + 1) = 3.5996 / 1.056
  assert float(theory.walltime_improvement(0.75, 7, 0.008)) == pytest.approx(3.40872, abs=1e-4)
  assert round(float(theory.walltime_improvement(0.75, 7, 0.008)), 1) == 3.4
  # alpha 0.6, gamma 3, c 0.1: 2.176 / 1.3
  assert float(theory.walltime_improvement(0.6, 3, 0.1)) == pytest.approx(2.176 / 1.3, abs=1e-9)
  # v: the verify pass costs v target steps instead of 1: 2.176 / (0.3 + 1.5)
  assert float(theory.walltime_improvement(0.6, 3, 0.1, v=1.5)) == pytest.approx(2.176 / 1.8, abs=1e-9)
  # c = 0, v = 1: the speedup is exactly the expected tokens per iteration
  assert float(theory.walltime_improvement(0.9, 5, 0.0)) == pytest.approx(float(theory.expected_tokens(0.9, 5)))
  # alpha = 0: one token per iteration at a cost of gamma*c + 1: always a slowdown
  assert float(theory.walltime_improvement(0.0, 4, 0.25)) == pytest.approx(0.5)


def _table4_max_error(improvement_fn):
  return max(abs(float(improvement_fn(a, g, c)) - exp) for _, _, _, g, a, c, exp, _ in PAPER_TABLE4)


def test_walltime_reproduces_paper_table4_expected_column():
  """Every 'Exp' value of Leviathan Table 4 is the formula at the row's (alpha, gamma, c).

  9 of 12 agree to the printed decimal; 3 are off by < 0.07 (EnDe T5-base/T5-large at temp 1,
  CNNDM T5-large at temp 1: the paper printed alpha and c rounded, and computed from finer ones).
  """
  assert _table4_max_error(theory.walltime_improvement) < 0.07


def test_table4_check_catches_wrong_formulas():
  """The check above has power: plausible mistakes miss the paper's column."""
  off_by_one = lambda a, g, c: theory.expected_tokens(a, g - 1) / (g * c + 1)  # gamma tokens, not gamma+1
  c_once = lambda a, g, c: theory.expected_tokens(a, g) / (c + 1)               # forgets c is per draft
  no_bonus = lambda a, g, c: (theory.expected_tokens(a, g) - 1) / (g * c + 1)    # forgets the target's token
  for wrong in (off_by_one, c_once, no_bonus):
    assert _table4_max_error(wrong) > 0.15


def test_paper_lenience_argmax_numbers():
  """App. A.5: c = 0.015, gamma = 8, alpha 0.75 / 0.8 / 0.87 -> 3.3X, 3.9X, 4.9X."""
  got = [round(float(theory.walltime_improvement(a, 8, 0.015)), 1) for a in (0.75, 0.8, 0.87)]
  assert got == [3.3, 3.9, 4.9]


def test_walltime_monotone_in_alpha_and_c():
  alphas = np.linspace(0.05, 0.95, 19)
  for gamma in (1, 4, 7):
    s = theory.walltime_improvement(alphas, gamma, 0.05)
    assert np.all(np.diff(s) > 0)
    cs = np.linspace(0.0, 1.0, 11)
    s_c = np.array([float(theory.walltime_improvement(0.7, gamma, c)) for c in cs])
    assert np.all(np.diff(s_c) < 0)


# ----------------------------------------------------------------------------- optimal gamma (§3.5)
def test_optimal_gamma_is_the_argmax():
  for alpha in (0.5, 0.75, 0.9):
    for c in (0.01, 0.05, 0.2):
      g = theory.optimal_gamma(alpha, c)
      s = lambda k: float(theory.walltime_improvement(alpha, k, c))
      assert all(s(g) >= s(k) for k in range(1, 33)), (alpha, c, g)


def test_optimal_gamma_hand_values():
  # alpha 0.8, c 0.05: f(g) = (1 - .8^(g+1)) / (.2 (1 + .05 g)); f(7) = 3.0823, f(8) = 3.0921, f(9) = 3.0780
  assert theory.optimal_gamma(0.8, 0.05) == 8
  # a costly drafter with poor acceptance: one draft is already too many to gain, but 1 is the floor
  assert theory.optimal_gamma(0.1, 0.9) == 1
  # free drafter: more drafts never hurt, so the search bound wins
  assert theory.optimal_gamma(0.5, 0.0, max_gamma=12) == 12


def test_optimal_gamma_monotone():
  """More acceptance -> longer drafts pay; costlier drafter or verify -> shorter drafts."""
  alphas = np.linspace(0.3, 0.95, 14)
  for c in (0.01, 0.05, 0.2):
    gs = [theory.optimal_gamma(a, c) for a in alphas]
    assert all(np.diff(gs) >= 0), (c, gs)
    assert gs[-1] > gs[0]
  for alpha in (0.6, 0.8, 0.9):
    gs = [theory.optimal_gamma(alpha, c) for c in (0.005, 0.01, 0.02, 0.05, 0.1, 0.3)]
    assert all(np.diff(gs) <= 0), (alpha, gs)
    assert gs[0] > gs[-1]
  gv = [theory.optimal_gamma(0.8, 0.05, v) for v in (1.0, 1.5, 3.0)]
  assert all(np.diff(gv) >= 0)  # a costly fixed verify pass is amortised over more drafts


# ----------------------------------------------------------------------------- alpha from statistics
def _iid_counts(alpha, gamma, iterations, seed):
  """Run statistics as specjax.decode reports them: per position, drafted and accepted counts."""
  rs = np.random.RandomState(seed)
  n = (rs.rand(iterations, gamma) < alpha).cumprod(1).sum(1)  # accepted drafts per iteration
  accepted = np.array([(n > i).sum() for i in range(gamma)])
  return accepted, np.full(gamma, iterations)


@pytest.mark.parametrize("alpha, gamma", [(0.3, 3), (0.6, 5), (0.75, 7), (0.9, 4)])
def test_alpha_from_acceptance_recovers_iid_alpha(alpha, gamma):
  accepted, drafted = _iid_counts(alpha, gamma, 50_000, seed=gamma)
  est, per_position = theory.alpha_from_acceptance(accepted, drafted)
  assert est == pytest.approx(alpha, abs=0.01)
  np.testing.assert_allclose(per_position, alpha, atol=0.03)  # conditional rate at every position


def test_alpha_from_acceptance_exact_counts():
  # 100 iterations at alpha 0.5, gamma 3, expected counts exactly: 50, 25, 12.5 accepted
  est, per_position = theory.alpha_from_acceptance([50, 25, 12.5], [100, 100, 100])
  assert est == pytest.approx(0.5, abs=1e-9)
  np.testing.assert_allclose(per_position, [0.5, 0.5, 0.5])
  assert theory.alpha_from_acceptance([0, 0], [10, 10])[0] == pytest.approx(0.0, abs=1e-9)
  assert theory.alpha_from_acceptance([10, 10], [10, 10])[0] == pytest.approx(1.0, abs=1e-9)


def test_alpha_from_acceptance_is_not_the_unconditional_rate():
  """At alpha 0.8 the unconditional rate at position 3 is 0.8^4 = 0.41; the estimate stays 0.8."""
  accepted, drafted = _iid_counts(0.8, 4, 50_000, seed=1)
  assert accepted[-1] / drafted[-1] == pytest.approx(0.8 ** 4, abs=0.02)
  assert theory.alpha_from_acceptance(accepted, drafted)[0] == pytest.approx(0.8, abs=0.01)
