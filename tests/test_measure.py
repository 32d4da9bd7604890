"""specjax.measure's timing helpers: how many calls a sample holds."""
import time

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
