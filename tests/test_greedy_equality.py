"""Proof obligation 1: greedy speculative output == greedy autoregressive output, token for token.

Equality is only evidence when drafts are accepted: a drafter that is always rejected makes the loop
an autoregressive decoder with extra steps, and a broken accept or commit step would go unseen. So
every drafter here accepts at every draft depth (asserted), and a batch also sees rejections:
  decoder: the demo target (trained on Python) on held-out Python prompts, drafted by a noisy copy
           of itself, by the demo's own small draft model (1 layer, d_model 192; distilled), and by
           n-grams (code repeats itself);
  t5:      a tiny random T5 (its greedy text is periodic, so n-grams accept), a noisy copy, and a
           1+1-layer T5 fitted in this module to the target's greedy text for these prompts
           (tests/head_fit.py).
N-gram lookup is left out where its text never repeats deeply enough (NGRAM_SHALLOW, below).
"""
import functools

import head_fit
import numpy as np
import pytest
import stats_util  # tests/ is on sys.path under pytest

import specjax
from specjax import testing
from specjax.train import seq2seq

V = 64
MAX_NEW = 32
SETTINGS = [(1, 1), (3, 2), (8, 4), (3, 7), (1, 7)]  # (batch, gamma)


def _random_prompts(batch, width=9, seed=0, vocab=V):
  rs = np.random.RandomState(seed)
  lengths = rs.randint(1, width + 1, size=batch)
  lengths[0] = width  # at least one full-width row; the rest are ragged
  prompts = rs.randint(2, vocab, size=(batch, width))
  prompts[np.arange(width)[None] >= lengths[:, None]] = 0  # right padding
  return prompts, lengths


def _fitted_small_t5(target, prompt_fn):
  """A 1+1-layer T5 fitted (cross-entropy, 300 Adam steps) to the target's greedy text for this module's
  prompts, first 12 of MAX_NEW tokens only: later drafts are its own guesses, so some are rejected."""
  small = testing.tiny_t5(V, seed=1, num_encoder_layers=1, num_decoder_layers=1)
  enc, enc_len, labels = [], [], []
  for batch, gamma in SETTINGS:
    prompts, lengths = prompt_fn(batch, batch * 10 + gamma)
    enc.append(prompts), enc_len.append(lengths)
    labels.append(np.asarray(_baseline("t5", batch, batch * 10 + gamma).tokens)[:, :12])
  labels = np.concatenate(labels).astype(np.int32)
  start = np.full((len(labels), 1), target.config.decoder_start_id, np.int32)
  batch = {"enc": np.concatenate(enc).astype(np.int32), "enc_len": np.concatenate(enc_len).astype(np.int32),
           "dec_in": np.concatenate([start, labels[:, :-1]], 1), "labels": labels}
  params, losses = head_fit.fit(small.params, seq2seq.ce_loss(small.module), batch, steps=300, learning_rate=1e-2)
  assert losses[-1] < 0.2 * losses[0], losses[[0, -1]]
  return small.replace(params=params)


@pytest.fixture(scope="module", params=["decoder", "t5"])
def family(request):
  return _family(request.param)


@functools.lru_cache(maxsize=None)
def _target(name):
  """The family's target and its prompts: ``prompt_fn(batch, seed) -> (prompts, lengths)``."""
  if name == "decoder":
    return stats_util.demo_target(), lambda batch, seed: stats_util.demo_prompts(batch, seed=seed)
  return testing.tiny_t5(V, seed=0), lambda batch, seed: _random_prompts(batch, seed=100 + seed)


@functools.lru_cache(maxsize=None)
def _baseline(name, batch, seed, eos_id=None):
  """Greedy autoregressive output for ``prompt_fn(batch, seed)``, decoded once: the drafters of a
  setting, the T5 fit and several tests compare against the same prompts (the demo target's 32 steps
  take about a second)."""
  target, prompt_fn = _target(name)
  kw = {} if eos_id is None else dict(eos_id=eos_id, pad_id=-1)
  return specjax.generate(target, *prompt_fn(batch, seed), max_new_tokens=MAX_NEW, **kw)


@functools.lru_cache(maxsize=None)  # pytest may set a family up twice (the indirect cases come first)
def _family(name):
  target, prompt_fn = _target(name)
  if name == "decoder":
    small, noise = stats_util.demo_drafter_model(), 0.3
  else:
    small, noise = _fitted_small_t5(target, prompt_fn), 0.1
  return name, target, prompt_fn, {"draft_model": specjax.drafters.DraftModel(testing.perturbed(target, noise)),
                                   "small_model": specjax.drafters.DraftModel(small),
                                   "ngram": specjax.drafters.NGram(3)}


# n-gram lookup offers only what followed the latest earlier match of the row's last tokens: the tiny
# T5's text repeats with periods of 1 to 4 tokens and one demo row's held-out code is a run of spaces,
# so at gamma 7 these never accept deep drafts; equality there would say little, so they are not run.
NGRAM_SHALLOW = {("decoder", 1, 7), ("t5", 3, 7), ("t5", 1, 7)}
# The noisy copy is a DraftModel as the small model is (the same loop, other weights), at the target's
# size (its loops compile 2-3x slower): it runs only at the settings whose loops other tests here
# compile anyway (gamma 7 at batch 1 and 3: test_drafter_equal_to_target_accepts_everything); the
# small model runs at all of them, batch 8 included.
NOISY_COPY_SETTINGS = {(1, 7), (3, 7)}
CASES = [(fam, name, batch, gamma) for fam in ("decoder", "t5") for batch, gamma in SETTINGS
         for name in ("draft_model", "small_model", "ngram")
         if not (name == "ngram" and (fam, batch, gamma) in NGRAM_SHALLOW)
         and not (name == "draft_model" and (batch, gamma) not in NOISY_COPY_SETTINGS)]


@pytest.mark.parametrize("family,drafter_name,batch,gamma", CASES, indirect=["family"])
def test_greedy_equality(family, drafter_name, batch, gamma):
  _, target, prompt_fn, drafters = family
  prompts, lengths = prompt_fn(batch, batch * 10 + gamma)
  base = _baseline(family[0], batch, batch * 10 + gamma)
  out = specjax.speculative_generate(target, drafters[drafter_name], prompts, lengths, gamma=gamma,
                                     max_new_tokens=MAX_NEW)
  np.testing.assert_array_equal(out.tokens, base.tokens)
  np.testing.assert_array_equal(out.lengths, base.lengths)
  assert out.stats["target_calls"] <= base.stats["target_calls"]
  # one row may accept every draft of its few rounds; a batch must also see rejections
  stats_util.assert_accepts_at_every_depth(out.stats, rejected=batch > 1)


def test_outputs_are_not_trivial(family):
  """Guards the test's power: a repeating-token target would make equality nearly free."""
  base = _baseline(family[0], 8, 84)  # test_greedy_equality's (8, 4) prompts
  distinct = [len(set(row.tolist())) for row in base.tokens]  # code has runs of spaces: judge the batch
  assert np.mean(distinct) >= 5 and len(np.unique(base.tokens)) >= 10, distinct


@pytest.mark.parametrize("batch", [1, 3])
def test_drafter_equal_to_target_accepts_everything(family, batch):
  _, target, prompt_fn, _ = family
  prompts, lengths = prompt_fn(batch, 5)
  gamma = 7  # (1, 7) and (3, 7) are test_greedy_equality settings: its draft_model loop, compiled once
  out = specjax.speculative_generate(target, specjax.drafters.DraftModel(target), prompts, lengths,
                                     gamma=gamma, max_new_tokens=MAX_NEW)
  base = _baseline(family[0], batch, 5)
  np.testing.assert_array_equal(out.tokens, base.tokens)
  assert out.stats["acceptance_per_position"] == [1.0] * gamma
  assert out.stats["iterations"] == -(-MAX_NEW // (gamma + 1))
  assert out.stats["alpha"] == pytest.approx(1.0)
  assert out.stats["batch_utilization"] == 1.0  # every row advances gamma + 1 per iteration


def test_adversarial_drafter_accepts_nothing(family):
  _, target, prompt_fn, _ = family
  prompts, lengths = prompt_fn(3, 6)
  base = _baseline(family[0], 3, 6)
  unused = next(t for t in range(V) if t not in base.tokens)
  out = specjax.speculative_generate(target, testing.ConstantDrafter(unused), prompts, lengths, gamma=3,
                                     max_new_tokens=MAX_NEW)
  np.testing.assert_array_equal(out.tokens, base.tokens)
  assert sum(out.stats["accepted_per_position"]) == 0
  assert out.stats["iterations"] == MAX_NEW


def test_eos_in_the_middle(family):
  name, target, prompt_fn, drafters = family
  prompts, lengths = prompt_fn(8, 7)
  # a token some rows emit mid-way: for code the line end (a space would end every row at once)
  eos = ord("\n") if name == "decoder" else int(_baseline(name, 8, 7).tokens[0, MAX_NEW // 2])
  base = _baseline(name, 8, 7, eos_id=eos)
  assert base.lengths.min() < MAX_NEW, "the chosen EOS should end at least one row early"
  for drafter_name in ("small_model", "ngram"):  # a DraftModel (the small one compiles faster) and n-grams
    out = specjax.speculative_generate(target, drafters[drafter_name], prompts, lengths, gamma=4,
                                       max_new_tokens=MAX_NEW, eos_id=eos, pad_id=-1)
    np.testing.assert_array_equal(out.tokens, base.tokens)
    np.testing.assert_array_equal(out.lengths, base.lengths)
    assert 0 < out.stats["batch_utilization"] < 1  # rows that hit EOS idle while the others finish
    stats_util.assert_accepts_at_every_depth(out.stats)
  for row in range(8):  # the EOS is the row's last token and everything after it is padding
    n = base.lengths[row]
    assert (base.tokens[row, n:] == -1).all()
    if n < MAX_NEW:
      assert base.tokens[row, n - 1] == eos


def test_ragged_rows_advance_by_their_own_counts(family):
  """Ragged rows and a drafter equal to the target: each row advances by its own count (gamma + 1 per
  iteration here), whatever its prompt length."""
  _, target, prompt_fn, _ = family
  prompts, lengths = prompt_fn(3, 8)
  base = _baseline(family[0], 3, 8)
  out = specjax.speculative_generate(target, specjax.drafters.DraftModel(target), prompts, lengths,
                                     gamma=7, max_new_tokens=MAX_NEW)  # compiled by the test above
  np.testing.assert_array_equal(out.tokens, base.tokens)
  assert len(set(lengths.tolist())) > 1  # ragged
  # with everything accepted, every row finishes in ceil(MAX_NEW / 8) iterations, not one per token
  assert out.stats["iterations"] == -(-MAX_NEW // 8)
