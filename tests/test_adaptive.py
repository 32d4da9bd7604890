"""Variable draft length (specjax.adaptive): still exact, greedy and sampled; and the power checks.

A stopping rule may read the drafter's own distribution and the rows' past, never the target's
distribution at the positions being verified, nor the token the drafter drew there. Two wrong rules
show that the chi-squared check here can tell: one stops where the *target* gives the draft a low
probability, one stops on the drawn token's own q.
"""
import dataclasses

import flax
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import specjax
from specjax import adaptive as adaptive_lib
from specjax import testing
from specjax.models import kv_cache
from stats_util import N, PROMPT, chi2_pvalue, exact_joint, token_counts

V = 6
GAMMA = 2
T1 = specjax.Sampling(temperature=1.0)


@pytest.fixture(scope="module")
def target():
  return testing.tiny_decoder(vocab_size=V, seed=3, weight_scale=1.5)


@pytest.fixture(scope="module")
def draft_model(target):
  return testing.perturbed(target, 0.6, seed=1)


@flax.struct.dataclass
class StopOn(specjax.drafters.DraftModel):
  """A draft model whose confidence is a WRONG signal: the target's p of each draft ("peek"), or the
  drafter's own q of the token it drew ("drawn")."""
  peek_target: specjax.Model | None = None
  signal: str = flax.struct.field(pytree_node=False, default="peek")

  def stopping_below(self, confidence):  # every position drafted: the wrong signal alone cuts the chain
    del confidence
    return self

  def propose(self, cache, tokens_BxS, seq_len_B, gamma, sampling, rng):
    cache, draft = super().propose(cache, tokens_BxS, seq_len_B, gamma, sampling, rng)
    idx_BxG = seq_len_B[:, None] - 1 + jnp.arange(gamma)[None]
    if self.signal == "peek":
      buf = kv_cache.write_rows(tokens_BxS, draft.tokens_BxG, seq_len_B)
      logits = self.peek_target.module.apply({"params": self.peek_target.params}, buf)[0]
      probs_BxGxV = sampling.probs(jnp.take_along_axis(logits, idx_BxG[..., None], 1))
    else:
      probs_BxGxV = draft.q_BxGxV
    own_BxG = jnp.take_along_axis(probs_BxGxV, draft.tokens_BxG[..., None], -1)[..., 0]
    return cache, draft.replace(confidence_BxG=own_BxG)


def _sampled(target, drafter, adaptive, n=N, seed=0):
  prompts = np.repeat(PROMPT, n, 0)
  out = specjax.speculative_generate(target, drafter, prompts, np.full((n,), PROMPT.shape[1]), gamma=GAMMA,
                                     max_new_tokens=GAMMA + 1, sampling=T1, rng=jax.random.PRNGKey(seed),
                                     adaptive=adaptive)
  return token_counts(out.tokens[:, :GAMMA + 1], V), out.stats


@pytest.mark.parametrize("adaptive", [
    specjax.Adaptive(confidence=0.5, verify_slope=0.0, scale_confidence=False),
    specjax.Adaptive(confidence=0.5, verify_slope=0.0, prior=0.5, memory=0.9)], ids=["fixed_cut", "row_cut"])
def test_adaptive_chain_is_exact_at_t1(target, draft_model, adaptive):
  """Confidence stopping (verify_slope 0: the width always holds every offered draft): the 3-token
  joint matches the target's, and rows really submitted 0, 1 and 2 drafts. ``row_cut``: each row's
  cut follows its estimate, which moves far after one round (memory 0.9), so a second round's cut
  depends on the first round's tokens."""
  counts, st = _sampled(target, specjax.drafters.DraftModel(draft_model), adaptive)
  p = chi2_pvalue(counts, exact_joint(target, T1, tokens=GAMMA + 1))
  assert p > 1e-4, p
  assert min(st["submitted_histogram"]) > 0, st  # rows stopped after 0, 1 and 2 drafts
  assert st["accepted_per_position"][-1] > 0  # full chains: the bonus token is in the joint


@pytest.mark.parametrize("signal", ["peek", "drawn"])
def test_wrong_stopping_rules_fail(target, draft_model, signal):
  """Power check: stopping on the target's p (or on the drawn token's own q) biases the output."""
  drafter = StopOn(draft_model, peek_target=target, signal=signal)
  counts, st = _sampled(target, drafter, specjax.Adaptive(confidence=0.5, verify_slope=0.0))
  p = chi2_pvalue(counts, exact_joint(target, T1, tokens=GAMMA + 1))
  assert st["submitted_histogram"][0] > 0 and st["submitted_histogram"][GAMMA] > 0
  assert p < 1e-6, p


@pytest.mark.parametrize("sampling", [specjax.Sampling(), T1], ids=["greedy", "t1"])
def test_draft_model_stops_drafting_where_nothing_more_is_submitted(target, draft_model, sampling):
  """A draft model told the loop's confidence stops its round once every row has been unsure; what it
  drafted up to there equals the full round (same keys), and the loop offers the same drafts."""
  G = 4
  full = specjax.drafters.DraftModel(draft_model)
  stopping = full.stopping_below(0.7)
  prompts = np.repeat(PROMPT, 3, 0).astype(np.int32)
  lengths = np.array([PROMPT.shape[1], PROMPT.shape[1] - 1, 2], np.int32)
  max_len = PROMPT.shape[1] + 8
  tokens = np.zeros((3, max_len), np.int32)
  tokens[:, :PROMPT.shape[1]] = prompts
  drafts = []
  for drafter in (full, stopping):
    state = drafter.init(None, prompts, lengths, max_len)
    propose = jax.jit(lambda d, *a: d.propose(*a, G, sampling, jax.random.PRNGKey(7)))  # weights as arguments
    drafts.append(propose(drafter, state, tokens, lengths)[1])
  ad = specjax.Adaptive(confidence=0.7)
  offered = [np.asarray(adaptive_lib.offered(d, G, ad)) for d in drafts]
  np.testing.assert_array_equal(offered[0], offered[1])
  conf_full, conf_stop = np.asarray(drafts[0].confidence_BxG), np.asarray(drafts[1].confidence_BxG)
  for b, n in enumerate(offered[0]):  # up to the first unsure position, everything agrees
    np.testing.assert_array_equal(np.asarray(drafts[1].tokens_BxG)[b, :n + 1],
                                  np.asarray(drafts[0].tokens_BxG)[b, :n + 1])
    np.testing.assert_allclose(conf_stop[b, :n + 1], conf_full[b, :n + 1], rtol=1e-6)
    if not sampling.greedy:
      np.testing.assert_allclose(np.asarray(drafts[1].q_BxGxV)[b, :n + 1], np.asarray(drafts[0].q_BxGxV)[b, :n + 1],
                                 rtol=1e-6)
  # every row was unsure by position 2 (offered 2, 0, 0): position 3 was never drafted
  assert offered[0].max() + 1 < G, offered
  assert (conf_stop[:, offered[0].max() + 1:] == 0).all() and (conf_full[:, offered[0].max() + 1:] > 0).all()
  # a cut per row (the loop's, from each row's estimate): row 1, cut at 0, drafts every position,
  # as the full round does; rows 0 and 2 keep the 0.7 cut
  cut_B = jnp.array([0.7, 0.0, 0.7])
  state = full.init(None, prompts, lengths, max_len)
  per_row = jax.jit(lambda d, *a: d.propose(*a, G, sampling, jax.random.PRNGKey(7)))(
      full.stopping_below(cut_B), state, tokens, lengths)[1]
  np.testing.assert_array_equal(np.asarray(per_row.tokens_BxG)[1], np.asarray(drafts[0].tokens_BxG)[1])
  np.testing.assert_allclose(np.asarray(per_row.confidence_BxG)[1], conf_full[1], rtol=1e-6)
  np.testing.assert_array_equal(np.asarray(adaptive_lib.offered(per_row, G, ad, threshold_B=cut_B)),
                                [offered[0][0], G, offered[0][2]])


@flax.struct.dataclass
class Budgeted(specjax.drafters.DraftModel):
  """A draft model that reports each budget the loop gives it."""
  record: object = flax.struct.field(pytree_node=False, default=None)

  def drafting_at_most(self, limit):
    jax.debug.callback(lambda k: self.record(int(k)), limit)
    return super().drafting_at_most(limit)


def test_draft_budget_drafts_no_more_and_submits_the_same(target, draft_model):
  """``drafting_at_most(k)``: the draft model runs k passes (later positions never drafted: confidence
  0), offers k drafts, and those k are the full round's; the loop gives it the width the rows' past
  picks, and greedy output stays the target's."""
  G = 4
  full = specjax.drafters.DraftModel(draft_model)
  prompts = np.repeat(PROMPT, 2, 0).astype(np.int32)
  lengths = np.array([PROMPT.shape[1], 2], np.int32)
  max_len = PROMPT.shape[1] + 8
  tokens = np.zeros((2, max_len), np.int32)
  tokens[:, :PROMPT.shape[1]] = prompts
  propose = jax.jit(lambda d, *a: d.propose(*a, G, T1, jax.random.PRNGKey(7)))
  drafts = [propose(d, d.init(None, prompts, lengths, max_len), tokens, lengths)[1]
            for d in (full, full.drafting_at_most(2))]
  np.testing.assert_array_equal(np.asarray(drafts[1].num_B), [2, 2])
  np.testing.assert_array_equal(np.asarray(drafts[1].tokens_BxG)[:, :2], np.asarray(drafts[0].tokens_BxG)[:, :2])
  np.testing.assert_allclose(np.asarray(drafts[1].q_BxGxV)[:, :2], np.asarray(drafts[0].q_BxGxV)[:, :2], rtol=1e-6)
  assert (np.asarray(drafts[1].confidence_BxG)[:, 2:] == 0).all()
  assert (np.asarray(drafts[0].confidence_BxG)[:, 2:] > 0).all()
  assert drafts[0].num_B is None
  # in the loop: costs that make width 2 the cheapest per expected token at any alpha (as loop_costs
  # forces a width), so every round's budget is 2
  budgets = []
  two = specjax.Adaptive(prior=0.9, verify_costs=((0, 1e6), (1, 1e6), (2, 1.0), (4, 1e6)))
  drafter = Budgeted(draft_model, record=lambda k: budgets.append(k))
  out = specjax.speculative_generate(target, drafter, prompts, lengths, gamma=G, max_new_tokens=12, adaptive=two)
  assert budgets and set(budgets) == {2}, budgets
  assert out.stats["submitted_histogram"][3:] == [0] * (G - 2) and out.stats["submitted_histogram"][2] > 0
  np.testing.assert_array_equal(out.tokens, specjax.generate(target, prompts, lengths, max_new_tokens=12).tokens)


@flax.struct.dataclass
class AlwaysDrafts(specjax.drafters.DraftModel):
  """The same draft model without ``idle``: it drafts in every round, used or not."""
  idle = None


@pytest.mark.parametrize("sampling", [specjax.Sampling(), T1], ids=["greedy", "t1"])
def test_idle_rounds_skip_drafting_and_change_nothing_else(target, sampling):
  """Where the rows' past alone picks width 0, the draft model only feeds the committed tokens
  (``Drafter.idle``). Everything else is what drafting and then verifying nothing gives: the same
  tokens (same keys), the same drafts afterwards (the same acceptance per position, so its cache
  kept step) and the same width choices; and greedy output is the target's."""
  draft = testing.perturbed(target, 0.5, seed=5)
  rng = np.random.default_rng(1)
  prompts = rng.integers(1, V, (3, 6)).astype(np.int32)
  lengths = np.array([6, 3, 5], np.int32)
  # width 1 pays above alpha 0.3, width 2 above 0.37; rows that missed idle for a few rounds (idle
  # rounds feed nothing, the next drafting round feeds what they committed: test below)
  adaptive = specjax.Adaptive(prior=0.6, memory=0.6, relax=0.2, backoff=1.0,
                              verify_costs=((0, 1.0), (1, 1.3), (2, 1.5)))
  kw = dict(gamma=GAMMA, max_new_tokens=20, sampling=sampling, rng=jax.random.PRNGKey(3), adaptive=adaptive)
  outs = [specjax.speculative_generate(target, cls(draft), prompts, lengths, **kw)
          for cls in (specjax.drafters.DraftModel, AlwaysDrafts)]
  idle, busy = outs[0].stats, outs[1].stats
  assert idle["idle_rounds"] > 0 and busy["idle_rounds"] == 0, (idle, busy)
  assert sum(idle["width_histogram"][1:]) > idle["idle_rounds"] / 4, idle  # drafting resumed after idling
  np.testing.assert_array_equal(outs[0].tokens, outs[1].tokens)
  for key in ("accepted_per_position", "drafted_per_position", "width_histogram", "submitted_histogram", "alpha"):
    assert idle[key] == busy[key], key
  if sampling.greedy:
    np.testing.assert_array_equal(outs[0].tokens, specjax.generate(target, prompts, lengths,
                                                                   max_new_tokens=20).tokens)


def test_idle_draft_model_feeds_the_committed_tokens_when_it_next_drafts(target, draft_model):
  """Idle rounds feed the draft model nothing; the next drafting round feeds what they committed,
  CATCH_UP tokens per pass. Its logits after any run of idle rounds are those of a drafter that saw
  the whole text from the start."""
  drafter = specjax.drafters.DraftModel(draft_model)
  rng = np.random.default_rng(4)
  text = rng.integers(1, V, (2, 40)).astype(np.int32)
  lengths = np.array([5, 3], np.int32)
  idle = jax.jit(drafter.idle)
  catch_up = jax.jit(drafter._catch_up)  # pylint: disable=protected-access
  state = drafter.init(target, text[:, :5], lengths, 48)
  for rounds in range(1, 21):  # each idle round commits one token per row
    state = idle(state, text, lengths + rounds - 1)
    np.testing.assert_array_equal(state.length_B, lengths - 2)  # nothing fed
    if rounds in (1, 2, 3, 9, 20):
      caught_up, logits = catch_up(state, text, lengths + rounds)
      np.testing.assert_array_equal(caught_up.length_B, lengths + rounds)
      fresh = drafter.init(target, text[:, :5 + rounds], lengths + rounds, 48)
      _, want = catch_up(fresh, text, lengths + rounds)
      np.testing.assert_allclose(np.asarray(logits), np.asarray(want), atol=1e-5, err_msg=str(rounds))


def test_greedy_equality_ragged_batch_and_refill():
  """Adaptive on: greedy tokens equal autoregressive ones for a ragged batch, for a draft model
  (accepting at every depth) and for n-gram (which submits nothing without a match), and with refill."""
  target = testing.tiny_decoder(vocab_size=64, seed=0)
  rng = np.random.default_rng(0)
  prompts = rng.integers(1, 64, (5, 9)).astype(np.int32)
  lengths = np.array([9, 4, 7, 2, 9], np.int32)
  base = specjax.generate(target, prompts, lengths, max_new_tokens=24)
  adaptive = specjax.Adaptive(confidence=0.1, verify_slope=0.05)
  draft_model = specjax.drafters.DraftModel(testing.perturbed(target, 0.02, seed=2))
  # a draft model with refill: the exactness matrix's greedy cell draft_model/adaptive-refill
  ngram = specjax.drafters.NGram(3)
  for drafter, batch_size in ((draft_model, None), (ngram, None), (ngram, 2)):
    out = specjax.speculative_generate(target, drafter, prompts, lengths, gamma=4, max_new_tokens=24,
                                       adaptive=adaptive, batch_size=batch_size)
    np.testing.assert_array_equal(out.tokens, base.tokens)
    np.testing.assert_array_equal(out.lengths, base.lengths)
    st = out.stats
    assert sum(st["submitted_histogram"]) == st["row_iterations"]
    if drafter is draft_model:
      assert min(st["accepted_per_position"]) > 0, st
    else:
      assert st["submitted_histogram"][0] > 0 and st["width_histogram"][0] > 0, st  # no match: plain steps


def test_width_choice_and_update_rules():
  ad = specjax.Adaptive(verify_slope=0.5)
  widths = ad.widths_for(4)
  assert widths == (0, 1, 2, 4)
  active = jnp.array([True, True])
  # low acceptance: drafting costs more than it brings -> width 0; high acceptance -> the full chain
  assert widths[int(adaptive_lib.choose_width(ad, widths, jnp.array([0.1, 0.1]), jnp.array([4, 4]), active))] == 0
  assert widths[int(adaptive_lib.choose_width(ad, widths, jnp.array([0.95, 0.95]), jnp.array([4, 4]), active))] == 4
  # nothing offered: no width beyond 0 can gain anything
  assert widths[int(adaptive_lib.choose_width(ad, widths, jnp.array([0.95, 0.95]), jnp.array([0, 0]), active))] == 0
  ad = specjax.Adaptive(prior=0.5, relax=0.1, backoff=0.5)
  before = adaptive_lib.Estimate(jnp.array([0.5, 0.3, 0.5, 0.5]), jnp.array([0.1, 0.1, 0.1, 0.025]))
  alpha, relax = adaptive_lib.update(ad, before, jnp.array([4, 0, 3, 3]), jnp.array([4, 0, 0, 1]),
                                     jnp.array([True, True, True, True]))
  assert alpha[0] > 0.5 and alpha[2] < 0.5 and alpha[1] == pytest.approx(0.3 + 0.1 * 0.2)
  # all rejected: the row returns to the prior more slowly; an accepted draft restores the rate
  np.testing.assert_allclose(relax, [0.1, 0.1, 0.05, 0.1])
  # a drafter that ran for nothing (row 1): no move toward the prior, and it backs off; only costed,
  # one accepted draft in a round that cost 2.6 did not pay (row 3)
  alpha, relax = adaptive_lib.update(ad, before, jnp.array([4, 0, 3, 3]), jnp.array([4, 0, 0, 1]),
                                     jnp.array([True, True, True, True]), 2.6, jnp.array([False, True, False, False]))
  assert alpha[1] == pytest.approx(0.3)
  np.testing.assert_allclose(relax, [0.1, 0.05, 0.05, 0.0125])
  with pytest.raises(ValueError, match="confidence"):
    specjax.Adaptive(confidence=1.5)


def test_cut_follows_the_rows_miss_rate():
  """confidence * (1 - alpha) / (1 - prior), at most confidence; off: confidence for every row."""
  ad = specjax.Adaptive(confidence=0.4, prior=0.9)
  np.testing.assert_allclose(adaptive_lib.thresholds(ad, jnp.array([0.98, 0.95, 0.9, 0.5, 1.0])),
                             [0.08, 0.2, 0.4, 0.4, 0.0], atol=1e-6)
  fixed = dataclasses.replace(ad, scale_confidence=False)
  np.testing.assert_allclose(adaptive_lib.thresholds(fixed, jnp.array([0.98, 0.5])), [0.4, 0.4])
  np.testing.assert_allclose(adaptive_lib.thresholds(dataclasses.replace(ad, prior=1.0), jnp.array([0.98])), [0.4])


def _probe_rounds(ad, accepts, rounds=120, costed=True):
  """Rounds in which one row drafts, run through choose_width and update (``accepts``: the row's
  drafts are always accepted (True), always rejected (False), or the first ``accepts`` of them;
  ``costed``: update knows the round's cost, as the loop's does)."""
  widths, estimate, drafted = ad.widths_for(4), adaptive_lib.start(ad, 1), []
  for r in range(rounds):
    w = widths[int(adaptive_lib.choose_width(ad, widths, estimate.alpha_B, jnp.array([4]), jnp.array([True])))]
    if w:
      drafted.append(r)
    accepted = w if accepts is True else min(w, int(accepts))
    estimate = adaptive_lib.update(ad, estimate, jnp.array([w]), jnp.array([accepted]), jnp.array([True]),
                                   ad.cost(w) if costed else None)
  return drafted


def test_default_prior_escapes_the_trap_and_failed_probes_back_off():
  """Costs at which a draft pays only above alpha ~0.69 (Qwen2.5-Coder 0.5B for 1.5B on a 2-core
  CPU): a good drafter drafts from the first round with the default prior, where a prior of 0.5 never
  drafts and so never learns; a drafter that is always rejected probes again after idle rounds,
  ever less often."""
  costs = ((0, 1.0), (1, 2.19), (2, 2.34), (4, 2.72))
  assert _probe_rounds(specjax.Adaptive(verify_costs=costs), accepts=True) == list(range(120))
  assert _probe_rounds(specjax.Adaptive(verify_costs=costs, prior=0.5), accepts=True) == []
  probes = _probe_rounds(specjax.Adaptive(verify_costs=costs), accepts=False)
  gaps = np.diff(probes)
  assert probes[0] == 0 and len(probes) >= 4 and np.all(gaps[1:] > gaps[:-1]), probes
  no_backoff = _probe_rounds(specjax.Adaptive(verify_costs=costs, backoff=1.0), accepts=False)
  assert len(no_backoff) > len(probes) and len(set(np.diff(no_backoff)[1:])) == 1, no_backoff
  # one draft accepted per probe: 2 tokens for a round that costs 2.72, so the probes back off too;
  # counting any accepted draft as paid, they would come at a fixed rate
  one = _probe_rounds(specjax.Adaptive(verify_costs=costs), accepts=1)
  assert len(one) >= 4 and np.all(np.diff(one)[1:] > np.diff(one)[:-1]), one
  uncosted = _probe_rounds(specjax.Adaptive(verify_costs=costs), accepts=1, costed=False)
  assert len(uncosted) > len(one) and len(set(np.diff(uncosted)[1:])) == 1, uncosted


def test_fixed_batch_width_follows_the_row_that_finishes_last():
  """Row 0 drafts well but is nearly done; row 1, which decides when the batch ends, has no draft:
  summed tokens pick the full chain, the finishing time picks width 0. When the slow row drafts
  well too, both pick it; equal finishing times fall back to tokens per cost."""
  ad = specjax.Adaptive(verify_costs=((0, 1.0), (1, 1.2), (2, 1.3), (4, 1.5)))
  widths, active = ad.widths_for(4), jnp.array([True, True])
  pick = lambda alpha, offered, remaining=None: widths[int(adaptive_lib.choose_width(
      ad, widths, jnp.array(alpha), jnp.array(offered), active,
      remaining_B=None if remaining is None else jnp.array(remaining)))]
  assert pick([0.9, 0.9], [4, 0]) == 4
  assert pick([0.9, 0.9], [4, 0], [10, 60]) == 0
  assert pick([0.9, 0.9], [4, 4], [10, 60]) == 4
  assert pick([0.9, 0.9], [4, 0], [10, 0]) == 4  # a row with nothing left holds nothing back
  flat = specjax.Adaptive(verify_slope=0.0)  # every width costs one step: the finishing times tie
  assert widths[int(adaptive_lib.choose_width(flat, widths, jnp.array([0.9, 0.9]), jnp.array([4, 0]), active,
                                              remaining_B=jnp.array([10, 60])))] == 4


def test_measured_costs_per_width_steer_the_choice():
  """A step from width 0 to 1 then flat (XLA:CPU: matrix-vector vs matrix product): at alpha 0.35 one
  draft does not pay (1.35 tokens for 1.5 steps) but four do (1.54 for 1.5); a line through the same
  v(4) would pick width 1 (1.35 for 1.125)."""
  measured = specjax.Adaptive(verify_costs=((0, 1.0), (1, 1.5), (2, 1.5), (4, 1.5)))
  line = specjax.Adaptive(verify_slope=0.125)
  widths, active = measured.widths_for(4), jnp.array([True])
  pick = lambda ad, offered: widths[int(adaptive_lib.choose_width(ad, widths, jnp.array([0.35]),
                                                                  jnp.array([offered]), active))]
  assert pick(measured, 1) == 0 and pick(line, 1) == 1
  assert pick(measured, 4) == 4
  assert measured.cost(1) == 1.5 and measured.cost(3) == pytest.approx(1.0 + 0.2 * 3)  # unmeasured: the line
  with pytest.raises(ValueError, match="verify_costs"):
    specjax.Adaptive(verify_costs=((1, 0.0),))


def test_loop_costs_are_measured_per_width_in_the_loop_the_run_compiles():
  """Rounds forced to each width run the one program the measured run then reuses; the costs are
  per width, start at 1 and never decrease."""
  target = testing.tiny_decoder(vocab_size=32, num_layers=1)
  prompts, lengths = np.array([[1, 2, 3, 1, 2, 3]], np.int32), np.array([6], np.int32)
  adaptive, kw = specjax.Adaptive(), dict(max_new_tokens=8, max_len=32)
  drafter = specjax.drafters.NGram(2)
  before = specjax.decode._speculative._cache_size()  # pylint: disable=protected-access
  costs = specjax.measure.loop_costs(target, drafter, prompts, lengths, gamma=4, adaptive=adaptive, repeats=2, **kw)
  widths, values = zip(*costs)
  assert widths == (0, 1, 2, 4) and values[0] == 1.0
  assert all(b >= a for a, b in zip(values, values[1:])) and all(v >= 1.0 + 0.02 * w for w, v in costs)
  out = specjax.speculative_generate(target, drafter, prompts, lengths, gamma=4,
                                     adaptive=dataclasses.replace(adaptive, verify_costs=costs), **kw)
  assert specjax.decode._speculative._cache_size() == before + 1  # pylint: disable=protected-access
  assert np.array_equal(out.tokens, specjax.generate(target, prompts, lengths, **kw).tokens)


def test_loop_costs_time_full_length_runs_when_eos_stops_them_early():
  """A run that ends at EOS after a few rounds is mostly its fixed per-call cost: the widths are
  then timed again without the EOS (a second program), over max_new_tokens rounds."""
  target = testing.tiny_decoder(vocab_size=32, num_layers=1)
  prompts, lengths = np.array([[1, 2, 3, 1, 2, 3]], np.int32), np.array([6], np.int32)
  kw = dict(max_new_tokens=10, max_len=32)  # not the other tests' program
  eos = int(specjax.generate(target, prompts, lengths, **kw).tokens[0, 1])  # greedy's second token
  before = specjax.decode._speculative._cache_size()  # pylint: disable=protected-access
  costs = specjax.measure.loop_costs(target, specjax.drafters.NGram(2), prompts, lengths, gamma=4,
                                     adaptive=specjax.Adaptive(), repeats=1, eos_id=eos, **kw)
  assert [w for w, _ in costs] == [0, 1, 2, 4] and costs[0][1] == 1.0
  assert specjax.decode._speculative._cache_size() == before + 2  # with the EOS, then without  # pylint: disable=protected-access


def test_measured_costs_do_not_recompile_the_loop():
  """The costs are a traced argument: runs with different measured costs share one compiled loop
  (the CLI measures them anew each run and reuses the persistent compilation cache)."""
  target = testing.tiny_decoder(vocab_size=32, num_layers=1)
  prompts, lengths = np.array([[1, 2, 3, 1, 2]], np.int32), np.array([5], np.int32)
  run = lambda costs: specjax.speculative_generate(
      target, specjax.drafters.NGram(2), prompts, lengths, gamma=3, max_new_tokens=6,
      adaptive=specjax.Adaptive(verify_costs=costs))
  run(((0, 1.0), (1, 1.41), (2, 1.5), (3, 1.6)))
  size = specjax.decode._speculative._cache_size()  # pylint: disable=protected-access
  never = run(((0, 1.0), (1, 9.0), (2, 9.0), (3, 9.0)))  # drafting never pays: width 0 every round
  assert specjax.decode._speculative._cache_size() == size  # pylint: disable=protected-access
  assert never.stats["width_histogram"][1:] == [0, 0, 0] and never.stats["width_histogram"][0] > 0


def _width_choice_run(target, draft_model, prior):
  """One prompt at a time (batch_size 1, refill): the width is then one row's own choice, so a width
  read off confidences that depend on this round's draws decides whether draft 1 is verified by
  looking at a function of draft 1. Measured costs flat from width 1 make width 0 or 2 the choice."""
  adaptive = specjax.Adaptive(confidence=0.5, prior=prior, memory=0.0, relax=0.0,
                              verify_costs=((0, 1.0), (1, 1.5), (2, 1.5)))
  n = N // 2  # one prompt at a time: run time grows with n; the old rule still gives p ~ 1e-62 here
  prompts = np.repeat(PROMPT, n, 0)
  out = specjax.speculative_generate(target, specjax.drafters.DraftModel(draft_model), prompts,
                                     np.full((n,), PROMPT.shape[1]), gamma=GAMMA, max_new_tokens=GAMMA + 1,
                                     sampling=T1, rng=jax.random.PRNGKey(0), adaptive=adaptive, batch_size=1)
  st = out.stats
  assert st["width_histogram"][0] > 0 and st["width_histogram"][-1] > 0, st  # both choices were made
  return chi2_pvalue(token_counts(out.tokens[:, :GAMMA + 1], V), exact_joint(target, T1, tokens=GAMMA + 1))


def test_sampled_width_choice_reads_nothing_drawn_this_round(target, draft_model):
  p = _width_choice_run(target, draft_model, prior=0.45)
  assert p > 1e-4, p


def test_width_choice_from_every_positions_confidence_fails(target, draft_model, monkeypatch):
  """Power check: the same run choosing the width from every position's confidence (what greedy
  may do) is biased. A different prior gives the loop a new trace that sees the patched rule."""
  monkeypatch.setattr(adaptive_lib, "offered_before_drawing", adaptive_lib.offered)
  p = _width_choice_run(target, draft_model, prior=0.4499)
  assert p < 1e-6, p


def test_the_run_cut_is_confidence_when_greedy_and_sampled_confidence_when_sampling():
  """The CLI's Adaptive: a drafter's largest probability predicts a greedy match, so sampled runs cut
  at ``sampled_confidence`` (0 by default: none)."""
  from specjax import experiment  # pylint: disable=import-outside-toplevel
  config = experiment.normalize({"target": {}, "drafter": {}})
  assert experiment._adaptive_settings(config).confidence == 0.4  # pylint: disable=protected-access
  config.temperature = 1.0
  assert experiment._adaptive_settings(config).confidence == 0.0  # pylint: disable=protected-access
  config.sampled_confidence = 0.25
  assert experiment._adaptive_settings(config).confidence == 0.25  # pylint: disable=protected-access
