"""specjax.measure's timing helpers (how many calls a sample holds), and the suite's guard against
weights compiled into programs as constants."""
import time

import jax
import jax.numpy as jnp
import pytest

from specjax import measure


def _counting(seconds):
  calls = []

  def fn():
    calls.append(1)
    time.sleep(seconds)
    return 0
  return fn, calls


def test_a_long_call_is_timed_alone_and_a_short_one_in_company():
  slow, slow_calls = _counting(measure.SAMPLE_SECONDS * 1.2)
  _, secs = measure.median_time(slow, repeats=3, inner=10)
  assert len(slow_calls) == 1 + 1 + 3 * 1  # warm-up, probe, one call per sample
  assert secs >= measure.SAMPLE_SECONDS
  fast, fast_calls = _counting(0.0)
  measure.median_time(fast, repeats=3, inner=10)
  assert len(fast_calls) == 1 + 1 + 3 * 10
  plain, plain_calls = _counting(0.0)
  measure.median_time(plain, repeats=2)  # inner=1: no probe call
  assert len(plain_calls) == 1 + 2


def test_weights_closed_over_by_a_jit_fail_the_suite():
  """tests/conftest.py + pyproject.toml: a jitted function that closes over more than 1 MB of arrays
  (compiled in as constants, slow to compile) is an error; the same arrays as an argument are fine."""
  weights = jnp.ones((2**19,), jnp.float32)  # 2 MB
  with pytest.raises(UserWarning, match="constants were captured"):
    jax.jit(lambda x: x * weights.sum())(jnp.ones(()))
  assert float(jax.jit(lambda x, w: x * w.sum())(jnp.ones(()), weights)) == 2**19


def test_round_robin_times_alternate_the_fns_after_an_optional_warm_up():
  calls = []
  fns = {name: (lambda name=name: calls.append(name) or len(calls)) for name in ("a", "b")}
  outs, medians, times = measure.round_robin_times(fns, repeats=3)
  assert calls == ["a", "b"] * 4  # one untimed call each, then three timed rounds
  assert outs == {"a": 7, "b": 8} and set(medians) == {"a", "b"} and all(len(t) == 3 for t in times.values())
  calls.clear()
  out_a, out_b, t_a, t_b = measure.paired_times(fns["a"], fns["b"], repeats=2, warm_up=False)
  assert calls == ["a", "b"] * 2 and (out_a, out_b) == (3, 4)  # compiled and run already: no warm-up
  assert t_a >= 0.0 and t_b >= 0.0
