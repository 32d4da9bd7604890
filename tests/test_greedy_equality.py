"""Proof obligation 1: greedy speculative output == greedy autoregressive output, token for token."""
import numpy as np
import pytest

import specjax
from specjax import testing

V = 64
MAX_NEW = 20


def _prompts(batch, width=9, seed=0, vocab=V):
  rs = np.random.RandomState(seed)
  lengths = rs.randint(1, width + 1, size=batch)
  lengths[0] = width  # at least one full-width row; the rest are ragged
  prompts = rs.randint(2, vocab, size=(batch, width))
  prompts[np.arange(width)[None] >= lengths[:, None]] = 0  # right padding
  return prompts, lengths


@pytest.fixture(scope="module", params=["decoder", "t5"])
def family(request):
  if request.param == "decoder":
    target = testing.tiny_decoder(V, seed=0)
    small = testing.tiny_decoder(V, seed=1, num_layers=1, d_model=16, head_dim=4, mlp_dim=32)
  else:
    target = testing.tiny_t5(V, seed=0)
    small = testing.tiny_t5(V, seed=1, num_encoder_layers=1, num_decoder_layers=1)
  return request.param, target, {"draft_model": specjax.drafters.DraftModel(testing.perturbed(target, 0.3)),
                                 "small_model": specjax.drafters.DraftModel(small),
                                 "ngram": specjax.drafters.NGram(3)}


@pytest.mark.parametrize("drafter_name", ["draft_model", "small_model", "ngram"])
@pytest.mark.parametrize("batch,gamma", [(1, 1), (3, 2), (8, 4), (3, 7), (1, 7)])
def test_greedy_equality(family, drafter_name, batch, gamma):
  _, target, drafters = family
  prompts, lengths = _prompts(batch, seed=batch * 10 + gamma)
  base = specjax.generate(target, prompts, lengths, max_new_tokens=MAX_NEW)
  out = specjax.speculative_generate(target, drafters[drafter_name], prompts, lengths, gamma=gamma,
                                     max_new_tokens=MAX_NEW)
  np.testing.assert_array_equal(out.tokens, base.tokens)
  np.testing.assert_array_equal(out.lengths, base.lengths)
  assert out.stats["target_calls"] <= base.stats["target_calls"]


def test_outputs_are_not_trivial(family):
  """Guards the test's power: a repeating-token target would make equality nearly free."""
  _, target, _ = family
  prompts, lengths = _prompts(3)
  base = specjax.generate(target, prompts, lengths, max_new_tokens=MAX_NEW)
  assert min(len(set(row.tolist())) for row in base.tokens) >= 5


@pytest.mark.parametrize("batch", [1, 3])
def test_drafter_equal_to_target_accepts_everything(family, batch):
  _, target, _ = family
  prompts, lengths = _prompts(batch, seed=5)
  gamma = 7  # (1, 7) and (3, 7) are test_greedy_equality settings: its draft_model loop, compiled once
  out = specjax.speculative_generate(target, specjax.drafters.DraftModel(target), prompts, lengths,
                                     gamma=gamma, max_new_tokens=MAX_NEW)
  base = specjax.generate(target, prompts, lengths, max_new_tokens=MAX_NEW)
  np.testing.assert_array_equal(out.tokens, base.tokens)
  assert out.stats["acceptance_per_position"] == [1.0] * gamma
  assert out.stats["iterations"] == -(-MAX_NEW // (gamma + 1))
  assert out.stats["alpha"] == pytest.approx(1.0)
  assert out.stats["batch_utilization"] == 1.0  # every row advances gamma + 1 per iteration


def test_adversarial_drafter_accepts_nothing(family):
  _, target, _ = family
  prompts, lengths = _prompts(3, seed=6)
  base = specjax.generate(target, prompts, lengths, max_new_tokens=MAX_NEW)
  unused = next(t for t in range(V) if t not in base.tokens)
  out = specjax.speculative_generate(target, testing.ConstantDrafter(unused), prompts, lengths, gamma=3,
                                     max_new_tokens=MAX_NEW)
  np.testing.assert_array_equal(out.tokens, base.tokens)
  assert sum(out.stats["accepted_per_position"]) == 0
  assert out.stats["iterations"] == MAX_NEW


def test_eos_in_the_middle(family):
  _, target, drafters = family
  prompts, lengths = _prompts(8, seed=7)
  free = specjax.generate(target, prompts, lengths, max_new_tokens=MAX_NEW)
  eos = int(free.tokens[0, MAX_NEW // 2])  # a token some rows emit mid-way
  base = specjax.generate(target, prompts, lengths, max_new_tokens=MAX_NEW, eos_id=eos, pad_id=-1)
  assert base.lengths.min() < MAX_NEW, "the chosen EOS should end at least one row early"
  for name in ("draft_model", "ngram"):
    out = specjax.speculative_generate(target, drafters[name], prompts, lengths, gamma=4,
                                       max_new_tokens=MAX_NEW, eos_id=eos, pad_id=-1)
    np.testing.assert_array_equal(out.tokens, base.tokens)
    np.testing.assert_array_equal(out.lengths, base.lengths)
    assert 0 < out.stats["batch_utilization"] < 1  # rows that hit EOS idle while the others finish
  for row in range(8):  # the EOS is the row's last token and everything after it is padding
    n = base.lengths[row]
    assert (base.tokens[row, n:] == -1).all()
    if n < MAX_NEW:
      assert base.tokens[row, n - 1] == eos


def test_ragged_rows_advance_by_their_own_counts():
  """Ragged rows (prompt lengths 9, 5, 2) and a drafter equal to the target: each row advances by its
  own count (gamma + 1 per iteration here), whatever its prompt length."""
  target = testing.tiny_decoder(V, seed=0)  # the decoder family's target: batch 3 at gamma 7 is compiled
  base = specjax.generate(target, *_prompts(3, seed=8), max_new_tokens=MAX_NEW)
  out = specjax.speculative_generate(target, specjax.drafters.DraftModel(target), *_prompts(3, seed=8),
                                     gamma=7, max_new_tokens=MAX_NEW)
  np.testing.assert_array_equal(out.tokens, base.tokens)
  assert len(set(_prompts(3, seed=8)[1].tolist())) > 1  # ragged
  # with everything accepted, every row finishes in ceil(20 / 8) iterations, not one per token
  assert out.stats["iterations"] == 3
