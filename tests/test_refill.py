"""Continuous refill (specjax.refill): a queue longer than the batch, exact per prompt.

Greedy: every prompt's tokens equal decoding the whole queue as one static batch (ragged prompts,
EOS on, every drafter state kind: a draft model's cache, n-gram's none, MTP's shared leaves, a
token tree, and T5's encoder cache), with drafters that accept at every draft depth: the demo
target (trained on Python) on held-out Python prompts, drafted by the demo's own draft model and
MTP head. Sampled: the 3-token joint of refilled rows passes the chi-squared test against the exact
target distribution, and the same check fails a lossy rule.
"""
import numpy as np
import pytest
import stats_util  # tests/ is on sys.path under pytest

import specjax
from specjax import testing

Q, P, N = 7, 24, 32
EOS = ord("\n")  # the demo target writes code: rows end at different line ends


@pytest.fixture(scope="module")
def target():
  return stats_util.demo_target()


@pytest.fixture(scope="module")
def queue():
  return stats_util.demo_prompts(Q, width=P, seed=12)


@pytest.fixture(scope="module")
def reference(target, queue):
  return specjax.generate(target, *queue, max_new_tokens=N, eos_id=EOS)


@pytest.mark.parametrize("batch_size", [1, 3])
def test_autoregressive_refill_equals_one_batch(target, queue, reference, batch_size):
  out = specjax.generate(target, *queue, max_new_tokens=N, eos_id=EOS, batch_size=batch_size)
  assert reference.lengths.min() < N  # an EOS row finishes early, so refill really interleaves
  np.testing.assert_array_equal(out.tokens, reference.tokens)
  np.testing.assert_array_equal(out.lengths, reference.lengths)
  assert out.stats["batch_size"] == batch_size and 0 < out.stats["batch_utilization"] <= 1


def _drafter(name):
  if name == "draft_model":
    return specjax.drafters.DraftModel(stats_util.demo_drafter_model())
  if name == "ngram":
    return specjax.drafters.NGram(2)
  if name == "specinfer_tree":
    return specjax.drafters.SpecInfer(stats_util.demo_drafter_model(), children=(2, 1, 1))
  return stats_util.demo_mtp()  # state with shared (batch-free) leaves


@pytest.mark.parametrize("name", ["draft_model", "ngram", "specinfer_tree", "mtp"])
def test_speculative_refill_equals_autoregressive(target, queue, reference, name):
  out = specjax.speculative_generate(target, _drafter(name), *queue, gamma=3, max_new_tokens=N, eos_id=EOS,
                                     batch_size=3)
  np.testing.assert_array_equal(out.tokens, reference.tokens)
  np.testing.assert_array_equal(out.lengths, reference.lengths)
  assert out.stats["batch_size"] == 3
  stats_util.assert_accepts_at_every_depth(out.stats)


def test_t5_refill_equals_one_batch():
  t5 = testing.tiny_t5(vocab_size=64)
  rng = np.random.default_rng(3)
  prompts, lengths = rng.integers(2, 64, (5, 7)).astype(np.int32), rng.integers(3, 8, 5).astype(np.int32)
  ref = specjax.generate(t5, prompts, lengths, max_new_tokens=6)
  out = specjax.generate(t5, prompts, lengths, max_new_tokens=6, batch_size=2)
  np.testing.assert_array_equal(out.tokens, ref.tokens)
  spec = specjax.speculative_generate(t5, specjax.drafters.DraftModel(testing.perturbed(t5, 0.2)), prompts, lengths,
                                      gamma=2, max_new_tokens=6, batch_size=2)
  np.testing.assert_array_equal(spec.tokens, ref.tokens)
  stats_util.assert_accepts_at_every_depth(spec.stats)


V, N_SAMPLES, ROWS = 8, 10_000, 512  # as test_exactness's rows; the power check still fails far below 1e-3


@pytest.fixture(scope="module")
def small_pair():
  return (testing.tiny_decoder(V, seed=0, weight_scale=1.0),
          specjax.drafters.DraftModel(testing.tiny_decoder(V, seed=3, weight_scale=1.0, num_layers=1)))


def _refill_counts(target, drafter, lenience):
  sampling = specjax.Sampling(temperature=1.0)
  counts, st = stats_util.sampled_counts(target, drafter, sampling, N_SAMPLES, gamma=2, lenience=lenience,
                                         batch_size=ROWS)  # gamma + 1 = 3 tokens: the bonus is in the joint
  return counts, st, stats_util.exact_joint(target, sampling, tokens=3)


def test_refill_sampling_is_exact(small_pair):
  counts, st, joint = _refill_counts(*small_pair, lenience=1.0)
  assert counts.sum() == N_SAMPLES
  stats_util.assert_full_paths(st)
  assert stats_util.chi2_pvalue(counts, joint) > 1e-3


def test_refill_check_has_power(small_pair):
  counts, _, joint = _refill_counts(*small_pair, lenience=0.3)
  pvalue = stats_util.chi2_pvalue(counts, joint)
  print("lossy-rule p-value", pvalue)
  assert pvalue < 1e-3


def test_bad_batch_size_is_an_error(target, queue):
  with pytest.raises(ValueError, match="batch_size must be a positive int"):
    specjax.generate(target, *queue, max_new_tokens=N, batch_size=0)
  with pytest.raises(ValueError, match="does not support mesh"):
    specjax.generate(target, *queue, max_new_tokens=N, batch_size=2, mesh=specjax.sharding.make_mesh("1x1"))
