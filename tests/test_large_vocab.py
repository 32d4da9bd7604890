"""Large vocabularies: top-p without a full sort keeps exactly the full-sort set; greedy paths
carry no ``[..., V]`` one-hots."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import specjax
from specjax import sampling as sampling_lib
from specjax import testing


def old_probs(logits, temperature, top_p):
  """specjax.Sampling.probs before the large-vocabulary change (a full sort), verbatim."""
  logits = logits.astype(jnp.float32) / temperature
  probs = jax.nn.softmax(logits, -1)
  sorted_desc = -jnp.sort(-probs, axis=-1)
  before = jnp.cumsum(sorted_desc, -1) - sorted_desc
  keep_sorted = before < top_p
  threshold = jnp.min(jnp.where(keep_sorted, sorted_desc, jnp.inf), -1, keepdims=True)
  probs = jnp.where(probs >= threshold, probs, 0.0)
  return probs / probs.sum(-1, keepdims=True)


def random_logits(seed, shape, kind):
  rng = np.random.default_rng(seed)
  if kind == "normal":
    x = rng.normal(size=shape) * rng.uniform(0.1, 6.0, size=shape[:-1] + (1,))
  elif kind == "ties":  # few distinct values: many ties, also at the threshold
    x = rng.integers(0, 4, size=shape).astype(np.float64)
  elif kind == "peaked":
    x = rng.normal(size=shape)
    x[..., rng.integers(shape[-1])] += 12.0
  elif kind == "flat":
    x = rng.normal(size=shape) * 0.05
  else:
    raise ValueError(kind)
  return jnp.asarray(x, jnp.float32)


CASES = [(kind, v) for kind in ("normal", "ties", "peaked", "flat") for v in (7, 64, 1000, 5000)]


@pytest.mark.parametrize("kind,v", CASES)
@pytest.mark.parametrize("top_p", [0.05, 0.5, 0.8, 0.9, 0.99])
def test_top_p_keeps_exactly_the_full_sort_set(kind, v, top_p):
  """The same kept set as the full sort, except where the two float32 summation orders straddle
  top_p: a token whose exact (float64) mass above it is within float32 rounding of top_p."""
  logits = random_logits(CASES.index((kind, v)), (6, 3, v), kind)  # a fixed seed per case
  want = np.asarray(old_probs(logits, 1.0, top_p))
  got = np.asarray(specjax.Sampling(temperature=1.0, top_p=top_p).probs(logits))
  x64 = np.asarray(logits, np.float64)
  p64 = np.exp(x64 - x64.max(-1, keepdims=True))
  p64 /= p64.sum(-1, keepdims=True)
  for idx in np.argwhere((got > 0) != (want > 0)):
    row = p64[tuple(idx[:-1])]
    mass_above = row[row > row[idx[-1]]].sum()
    assert abs(mass_above - top_p) < 1e-5, f"token {tuple(idx)} differs, mass above it {mass_above} vs {top_p}"
  same = ((got > 0) == (want > 0)).all(-1)
  assert same.mean() > 0.9  # boundary cases are rare
  np.testing.assert_allclose(got[same], want[same], rtol=1e-5, atol=1e-9)


@pytest.mark.parametrize("kind", ["normal", "ties", "flat"])
@pytest.mark.parametrize("slice_size", [1, 2, 16])
def test_slice_and_bisection_thresholds_equal_the_sort(kind, slice_size):
  """Small slices force the bisection fallback on some rows and not on others."""
  probs = jax.nn.softmax(random_logits(1, (16, 300), kind), -1)
  for top_p in (0.1, 0.5, 0.9):
    ref = sampling_lib.top_p_threshold_by_sort(probs, top_p)
    np.testing.assert_array_equal(sampling_lib.top_p_threshold(probs, top_p, slice_size), ref)
    np.testing.assert_array_equal(sampling_lib.top_p_threshold_by_bisection(probs, top_p), ref)


def test_ties_at_the_threshold_are_all_kept():
  # four tokens of 0.25: the prefix reaching 0.3 is two tokens, and both its tie partners stay
  probs = jnp.full((1, 4), 0.25)
  for fn in (sampling_lib.top_p_threshold_by_sort, sampling_lib.top_p_threshold_by_bisection,
             lambda p, t: sampling_lib.top_p_threshold(p, t, 2)):
    assert float(fn(probs, 0.3)[0, 0]) == 0.25
  probs = jnp.array([[0.5, 0.25, 0.125, 0.125]])
  for top_p, kept in ((0.5, 1), (0.5001, 2), (0.75, 2), (0.76, 4)):
    for fn in (sampling_lib.top_p_threshold_by_sort, sampling_lib.top_p_threshold_by_bisection,
               lambda p, t: sampling_lib.top_p_threshold(p, t, 2)):
      assert int(jnp.sum(probs >= fn(probs, top_p))) == kept, (top_p, fn)


def test_top_p_with_top_k_and_temperature_matches_the_definition():
  logits = random_logits(3, (4, 2000), "normal")
  s = specjax.Sampling(temperature=0.7, top_k=50, top_p=0.9)
  scaled = logits / 0.7
  kth = jax.lax.top_k(scaled, 50)[0][..., -1:]
  want = old_probs(jnp.where(scaled >= kth, scaled, -jnp.inf), 1.0, 0.9)
  np.testing.assert_allclose(s.probs(logits), want, rtol=1e-5, atol=1e-9)


def _sub_jaxprs(value):
  if hasattr(value, "eqns"):
    yield value
  elif hasattr(value, "jaxpr") and hasattr(value.jaxpr, "eqns"):  # ClosedJaxpr
    yield value.jaxpr
  elif isinstance(value, (tuple, list)):
    for v in value:
      yield from _sub_jaxprs(v)


def _ops_over_vocab(fn, *args, v):
  """Sorts and one-hots (a bool -> float cast, as in ``jax.nn.one_hot``) with a last axis of size v."""
  bad = []

  def walk(jp):
    for eqn in jp.eqns:
      big = any(getattr(o.aval, "shape", ())[-1:] == (v,) for o in eqn.outvars)
      cast = eqn.primitive.name == "convert_element_type" and eqn.invars[0].aval.dtype == jnp.bool_
      if big and (eqn.primitive.name == "sort" or cast):
        bad.append(eqn.primitive.name)
      for p in eqn.params.values():
        for sub in _sub_jaxprs(p):
          walk(sub)
  walk(jax.make_jaxpr(fn)(*args).jaxpr)
  return bad


@pytest.mark.parametrize("kind", ["chain", "tree"])
def test_greedy_speculative_iteration_builds_no_one_hot_over_the_vocabulary(kind):
  v = 1031  # a size no other axis has
  target = testing.tiny_decoder(v, seed=0)
  drafter_model = testing.tiny_decoder(v, seed=1, num_layers=1)
  if kind == "chain":
    drafter, gamma = specjax.drafters.DraftModel(drafter_model), 3
  else:
    drafter = specjax.drafters.SpecInfer(drafter_model, (1, 2, 1))
    gamma = drafter.tree.max_depth
  prompts = jnp.ones((2, 4), jnp.int32)
  lengths = jnp.full((2,), 4, jnp.int32)
  from specjax import decode  # pylint: disable=import-outside-toplevel
  fn = lambda t, d, p, l: decode._speculative(  # pylint: disable=protected-access
      t, d, p, l, jax.random.PRNGKey(0), gamma=gamma, max_new_tokens=4, sampling=specjax.Sampling(),
      eos_id=None, pad_id=0, max_len=32, lenience=1.0)
  assert _ops_over_vocab(fn, target, drafter, prompts, lengths, v=v) == []
  # the check can fail: a sampled iteration sorts nothing either, but a one-hot greedy probs would show
  one_hot = lambda x: specjax.Sampling().probs(x)
  assert _ops_over_vocab(one_hot, jnp.zeros((2, v)), v=v) != []


def test_argmax_matches_jnp_argmax_with_ties_and_nans():
  x = random_logits(5, (50, 37), "ties")
  x = x.at[3, 5].set(jnp.nan).at[3, 9].set(jnp.nan).at[7, 0].set(-jnp.inf)
  np.testing.assert_array_equal(sampling_lib.argmax(x), jnp.argmax(x, -1))
  np.testing.assert_array_equal(sampling_lib.argmax(jnp.full((2, 3, 5), -jnp.inf)), jnp.zeros((2, 3), int))


@pytest.mark.parametrize("v", [5, 700, 1500])
def test_sample_from_draws_the_distribution_and_never_a_zero(v):
  """Inverse-CDF sampling (two levels of blocks): frequencies match, zero-probability tokens never come."""
  rng = np.random.default_rng(v)
  p = rng.dirichlet(np.ones(v) * 0.3, size=2)
  p[:, ::3] = 0.0  # holes, and a tail of zeros over whole blocks
  p[1, v // 2:] = 0.0
  p = p / p.sum(-1, keepdims=True) * 0.7  # unnormalised is fine
  n = 60_000
  draws = jax.jit(jax.vmap(sampling_lib.sample_from, (0, None)))(
      jax.random.split(jax.random.PRNGKey(0), n // 10), jnp.asarray(np.repeat(p[None], 5, 0), jnp.float32))
  draws = np.asarray(draws).reshape(-1, 2)
  for row in range(2):
    counts = np.bincount(draws[:, row], minlength=v)
    assert counts[p[row] == 0].sum() == 0
    want = p[row] / p[row].sum() * len(draws)
    big = want > 20
    chi2 = ((counts[big] - want[big]) ** 2 / want[big]).sum()
    dof = big.sum() - 1
    assert chi2 < dof + 6 * np.sqrt(2 * dof) + 10, (chi2, dof)
