"""Table (unigram / bigram) drafter: counts, greedy equality, exact sampling, clear errors."""
import numpy as np
import pytest

import specjax
from specjax import testing
import stats_util

V = 64
MAX_NEW = 20


@pytest.fixture(scope="module")
def target():
  return testing.tiny_decoder(V, seed=0)


@pytest.fixture(scope="module")
def table(target):
  """A bigram table of the target's own greedy text: it agrees with the target often enough."""
  p, l = stats_util.prompts(16, seed=99)
  text = specjax.generate(target, p, l, max_new_tokens=48).tokens
  return specjax.drafters.TableDrafter.from_corpus(list(text), V)


def test_from_corpus_counts():
  tokens = np.array([0, 1, 0, 1, 0, 2])
  bigram = specjax.drafters.TableDrafter.from_corpus(tokens, 3, order=2, smoothing=1e-6)
  probs = np.exp(np.asarray(bigram.log_probs))
  np.testing.assert_allclose(probs[0], [0, 2 / 3, 1 / 3], atol=1e-5)  # 0 -> 1 twice, 0 -> 2 once
  np.testing.assert_allclose(probs[1], [1, 0, 0], atol=1e-5)
  np.testing.assert_allclose(probs[2], [1 / 3] * 3, atol=1e-5)       # never seen: uniform (smoothing)
  unigram = specjax.drafters.TableDrafter.from_corpus(tokens, 3, order=1, smoothing=1e-6)
  np.testing.assert_allclose(np.exp(np.asarray(unigram.log_probs)), [0.5, 1 / 3, 1 / 6], atol=1e-5)
  assert bigram.order == 2 and unigram.order == 1


def test_errors(target):
  with pytest.raises(ValueError, match="order"):
    specjax.drafters.TableDrafter.from_corpus(np.arange(4), 4, order=3)
  with pytest.raises(ValueError, match="outside the vocabulary"):
    specjax.drafters.TableDrafter.from_corpus(np.array([0, 7]), 4)
  small = specjax.drafters.TableDrafter.from_corpus(np.arange(4), 4)
  with pytest.raises(ValueError, match="vocab_size=4"):
    specjax.speculative_generate(target, small, np.ones((1, 3), np.int32), [3], gamma=2, max_new_tokens=4)


@pytest.mark.parametrize("order,batch,gamma", [(2, 1, 1), (2, 3, 4), (2, 8, 7), (1, 3, 4)])
def test_greedy_equality(target, table, order, batch, gamma):
  drafter = table if order == 2 else specjax.drafters.TableDrafter.from_corpus(np.arange(V), V, order=1)
  prompts, lengths = stats_util.prompts(batch, seed=batch * 10 + gamma)
  base = specjax.generate(target, prompts, lengths, max_new_tokens=MAX_NEW)
  out = specjax.speculative_generate(target, drafter, prompts, lengths, gamma=gamma, max_new_tokens=MAX_NEW)
  np.testing.assert_array_equal(out.tokens, base.tokens)
  np.testing.assert_array_equal(out.lengths, base.lengths)
  if order == 2 and batch > 1:
    assert sum(out.stats["accepted_per_position"]) > 0, "the bigram table should be right sometimes"


def test_sampled_output_is_exact():
  target = testing.tiny_decoder(8, seed=0, weight_scale=1.0)
  drafter = specjax.drafters.TableDrafter.from_corpus(np.random.RandomState(0).randint(0, 8, 500), 8)
  sampling = specjax.Sampling(temperature=1.0)
  counts, st = stats_util.sampled_counts(target, drafter, sampling)
  assert 0.2 < st["acceptance_per_position"][0] < 0.95, "both accept and reject paths must be exercised"
  assert stats_util.chi2_pvalue(counts, stats_util.exact_joint(target, sampling)) > 1e-3
