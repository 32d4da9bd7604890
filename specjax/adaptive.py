"""Variable draft length: how many drafts each row submits, and how wide the verify pass runs.

Each round a row may submit 0..gamma drafts of a chain: no more than its drafter offers
(``Draft.num_B``: n-gram's match length), and none past its drafter's first position whose
confidence (the largest probability of its distribution there) is below the row's cut
(:func:`thresholds`: ``confidence``, lowered for a row whose drafts have been accepted more often
than ``prior``; a draft model stops drafting there, :meth:`Drafter.stopping_below`). The
verify pass is compiled for a few draft counts (``widths``); the loop runs the one that maximises
the expected tokens per cost,

    sum over active rows of E[tokens | alpha_r, min(offered_r, w)]  /  v(w),

with ``E[tokens | a, k] = 1 + a + ... + a^k`` (Leviathan et al.'s chain formula) and ``alpha_r`` a
running estimate of the row's acceptance rate. That is the rule with continuous refill, where
every token counts. A fixed batch runs until its slowest row is done, so there the loop minimises
``v(w) * max_r remaining_r / E[tokens | alpha_r, min(offered_r, w)]`` instead (drafts of a row
that would wait for the others anyway do not pay for a wider pass). Width 0 is an ordinary decode
step, run in a loop of its own outside the width switch, so a round in which drafting does not
pay costs what the autoregressive loop does. Where the rows' past alone already picks width 0
(the choice with every row offering ``gamma`` drafts; fewer never choose wider), a drafter with
:meth:`Drafter.idle <specjax.drafters.Drafter>` (a draft model) does not draft at all that round
(a draft model feeds the committed tokens later, in one pass). Whatever width that choice picks
is the round's draft budget (:meth:`Drafter.drafting_at_most`): a draft model drafts no more, so
the loop-measured cost of a round at width 1 holds one pass of the draft model, not ``gamma``.
Rows submit ``min(offered_r, w)``. ``v(w)``, the verify pass over ``w + 1`` tokens in one-token
target steps, comes from ``verify_costs`` (a round of this loop at each width over one at width 0,
measured in the loop: :func:`specjax.measure.loop_costs`) or else the line ``1 + verify_slope * w``.
Measured in the loop is what counts: a wide round also runs the width switch and the accept rule,
so it costs more than its verify pass timed alone, and a short pass timed alone is easily thrown
off by load; costs that are too low make the loop draft where drafting does not pay.

Why the cut follows the row: a fixed cut gives away drafts that would have been accepted. A draft
model is often unsure of a token its target also picks, so on rows whose submitted drafts are
nearly all accepted a fixed cut submits fewer drafts per round than fixed gamma and runs slower.
A row's miss rate says how much an unsure draft risks; a row that misses as often as the prior
expects keeps the full cut.

Exactness: every decision reads only the drafter's own outputs (never the token drawn at a
position, only its distribution) and the rows' past acceptance, never the target's distribution
for the positions being verified; the accept rule on the shortened chain is then the plain rule
on a shorter draft (the bonus token comes from p after the last submitted draft). When sampling,
one more rule: whether draft ``i`` is verified may depend only on what was known before it was
drawn. The confidence at position ``i + 1`` is read off a distribution conditioned on draft
``i``, so the sampled loop chooses the width from what precedes every draw of the round (the
drafter's ``num_B`` and its confidence at the first position, :func:`offered_before_drawing`);
the per-position cut then only shortens a row's chain. (A width chosen from every position's
confidence decides whether draft 1 is verified by looking at a function of draft 1, which
biases the output at batch 1: tests/test_adaptive.py.) Greedy decoding may read everything: its
output is the target's argmax whatever is submitted.

``alpha_r`` starts at ``prior``, moves toward each round's accept rate (weight
``1 - (1 - memory)^trials``) and, in rounds where the row submits nothing, back toward ``prior`` by
the row's relax rate: a row that stopped drafting tries again now and then. The prior is optimistic
(0.9) because a row learns its rate only from rounds that draft: from a prior below the rate at
which the cheapest width pays, a row never drafts and never learns that its drafter is good (a
draft model's rate can sit just above the one at which drafting pays). The price is a few rejected rounds at the start where drafts are poor. So
that poor drafts are not probed at that rate all along, a round whose drafts did not pay for it
(the row's accepted drafts + 1 under the round's cost ``v(w)``, or none accepted) multiplies the
row's relax rate by ``backoff``, and a round that paid resets it to ``relax``: a row whose probes
keep failing probes ever less often. (Counting any accepted draft as a success kept a row whose
drafter got one or two drafts accepted per probe, where a round cost several idle rounds, probing
every few rounds.) A round in which a drafter that could have sat out (:meth:`Drafter.idle`) ran
but submitted nothing, unsure from its first position, is such a probe too: the row keeps its
estimate (it would otherwise move toward the optimistic prior and draft again next round) and
backs off.
"""
from __future__ import annotations

import dataclasses
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np


@dataclasses.dataclass(frozen=True)
class Adaptive:
  confidence: float = 0.0     # stop a row at its first draft the drafter is less sure of (0: off)
  widths: tuple = ()          # draft counts the verify pass is compiled for; (): 0, 1, 2, 4, ..., gamma
  verify_slope: float = 0.2   # cost of each verified draft in target steps: v(w) = 1 + slope * w
  prior: float = 0.9          # acceptance estimate a row starts from and returns to while idle
  memory: float = 0.3         # weight of one observed draft in the running estimate
  relax: float = 0.1          # per round without drafts, the estimate moves this far back to prior
  backoff: float = 0.5        # a round whose drafts are all rejected multiplies the row's relax by this
  verify_costs: tuple = ()    # ((w, v(w)), ...): measured verify cost per width; others use the slope
  scale_confidence: bool = True  # a row's cut is confidence * its miss rate over the prior's (at most confidence)

  def __post_init__(self):
    for name in ("confidence", "prior", "memory", "relax", "backoff"):
      v = getattr(self, name)
      if not 0.0 <= v <= 1.0:
        raise ValueError(f"Adaptive.{name} must be in [0, 1], got {v!r}")
    if not self.verify_slope >= 0:
      raise ValueError(f"Adaptive.verify_slope must be >= 0, got {self.verify_slope!r}")
    if any(isinstance(w, bool) or int(w) != w or w < 0 for w in self.widths):
      raise ValueError(f"Adaptive.widths must be non-negative integers, got {self.widths!r}")
    costs = tuple((int(w), float(v)) for w, v in self.verify_costs)
    if any(w < 0 or not v > 0 for w, v in costs):
      raise ValueError(f"Adaptive.verify_costs must be (width >= 0, cost > 0) pairs, got {self.verify_costs!r}")
    object.__setattr__(self, "verify_costs", costs)

  def cost(self, width: int) -> float:
    """v(width): the verify pass over ``width`` drafts + 1 token, in one-token target steps."""
    return dict(self.verify_costs).get(int(width), 1.0 + self.verify_slope * width)

  def widths_for(self, gamma: int) -> tuple[int, ...]:
    """The compiled draft counts, ascending, always including 0 and gamma."""
    base = self.widths or tuple(2 ** i for i in range(int(np.log2(max(gamma, 1))) + 1))
    return tuple(sorted({0, int(gamma)} | {int(w) for w in base if w <= gamma}))


def thresholds(adaptive: Adaptive, alpha_B):
  """float32 [B]: each row's confidence cut this round. With ``scale_confidence``, ``confidence``
  times the row's estimated miss rate over the prior's, ``(1 - alpha_r) / (1 - prior)``, capped at
  1: a row whose drafts have been accepted more often than the prior says stops at less sure
  positions (at alpha_r 0.98 and prior 0.9, a cut of 0.4 becomes 0.08), one accepted less often
  keeps ``confidence``. It reads the rows' past only, so the chain it cuts stays exact."""
  alpha_B = jnp.asarray(alpha_B, jnp.float32)
  if not adaptive.scale_confidence or adaptive.prior >= 1.0:
    return jnp.full(alpha_B.shape, adaptive.confidence, jnp.float32)
  miss_B = jnp.clip((1.0 - alpha_B) / (1.0 - adaptive.prior), 0.0, 1.0)
  return adaptive.confidence * miss_B


def run_cut(confidence: float, sampled_confidence: float, temperature: float) -> float:
  """A run's confidence cut: ``confidence`` when greedy, ``sampled_confidence`` when
  sampling. A drafter's largest probability says how likely its draft is the target's argmax, not
  how likely a sampled draft is kept (the sum of min(p, q), often high where both are flat), so a
  cut tuned for greedy decoding drops sampled drafts that would have been kept."""
  return confidence if temperature == 0 else sampled_confidence


def offered(draft, gamma: int, adaptive: Adaptive | None, read: int | None = None, threshold_B=None):
  """int32 [B]: drafts each row offers: the drafter's ``num_B``, cut at its first unconfident one
  (below ``threshold_B``, default ``adaptive.confidence`` for every row).

  ``read``: look only at the first ``read`` positions' confidences (the rest count as sure)."""
  b = draft.tokens_BxG.shape[0]
  num_B = jnp.full((b,), gamma, jnp.int32) if draft.num_B is None else jnp.minimum(draft.num_B, gamma)
  if adaptive is not None and adaptive.confidence > 0 and draft.confidence_BxG is not None:
    cut = adaptive.confidence if threshold_B is None else jnp.asarray(threshold_B, jnp.float32)[:, None]
    sure_BxG = draft.confidence_BxG >= cut
    if read is not None:
      sure_BxG = sure_BxG | (jnp.arange(sure_BxG.shape[1]) >= read)[None]
    num_B = jnp.minimum(num_B, jnp.sum(jnp.cumprod(sure_BxG.astype(jnp.int32), axis=1), axis=1))
  return num_B.astype(jnp.int32)


def offered_before_drawing(draft, gamma: int, adaptive: Adaptive | None, threshold_B=None):
  """int32 [B]: what the width choice may read when sampling: the drafter's ``num_B`` (fixed before
  the round's draws, e.g. n-gram's match length) cut to 0 where the first position is unconfident
  (its distribution depends on no token drawn this round); later positions' confidences are not
  read, since each depends on the drafts before it."""
  return offered(draft, gamma, adaptive, read=1, threshold_B=threshold_B)


def expected_tokens(alpha_B, k_B):
  """1 + a + ... + a^k per row (k may be 0)."""
  alpha_B = jnp.clip(alpha_B, 0.0, 0.999)
  return (1.0 - alpha_B ** (k_B + 1)) / (1.0 - alpha_B)


def tree_expected_tokens(alpha_B, depth_N, rank_sum_N):
  """float32 ``[B]``: expected tokens of a round verifying a static tree (nodes ``1..N-1``; node 0
  the root), each sibling tried in turn and accepted with probability ``alpha`` independently:
  ``1 + sum_i alpha^depth_i (1 - alpha)^rank_sum_i`` with ``rank_sum_i`` the sibling ranks (0: first
  child) along node i's path. A chain (every rank 0) gives :func:`expected_tokens`;
  :func:`specjax.theory.expected_tokens_tree` is the same formula from a tree's parents."""
  alpha_Bx1 = jnp.clip(jnp.asarray(alpha_B, jnp.float32), 0.0, 0.999)[:, None]
  depth_1xN = jnp.asarray(depth_N, jnp.float32)[None, 1:]
  rank_1xN = jnp.asarray(rank_sum_N, jnp.float32)[None, 1:]
  return 1.0 + jnp.sum(alpha_Bx1 ** depth_1xN * (1.0 - alpha_Bx1) ** rank_1xN, axis=1)


def costs_for(adaptive: Adaptive, widths):
  """float32 ``[W]``: v at each width (a traced argument of the loop, so that measured costs,
  which differ from run to run, do not change the compiled program)."""
  return jnp.asarray([adaptive.cost(w) for w in widths], jnp.float32)


def compile_key(adaptive: Adaptive) -> Adaptive:
  """``adaptive`` without its costs: what the compiled loop depends on (costs come as an array)."""
  return dataclasses.replace(adaptive, verify_costs=(), verify_slope=Adaptive.verify_slope)


def choose_width(adaptive: Adaptive, widths, alpha_B, offered_B, active_B, costs_W=None, remaining_B=None,
                 tokens_WxB=None):
  """Index into ``widths`` of the verify width with the most expected tokens per cost
  (``costs_W``: v at each width; default from ``adaptive``).

  ``remaining_B`` (a fixed batch, no refill): tokens each row still has to generate. The batch then
  runs until its slowest row is done, so the width that finishes soonest is chosen: the fewest
  ``v(w) * max_b remaining_b / E_b(w)`` (the walltime formula for the row that finishes last),
  rather than the most tokens summed over rows, which counts drafts of rows that would wait for the
  others anyway; among widths that finish equally soon, the one with the most tokens per cost.
  Without it (refill: a finished row takes the next prompt) every token counts. ``tokens_WxB``:
  each row's expected tokens at each width when not the chain's (a tree budget's,
  :func:`tree_expected_tokens`); ``offered_B`` is then unused."""
  costs_W = costs_for(adaptive, widths) if costs_W is None else costs_W
  per_cost, finish = [], []
  for i, w in enumerate(widths):
    tokens_B = expected_tokens(alpha_B, jnp.minimum(offered_B, w)) if tokens_WxB is None else tokens_WxB[i]
    per_cost.append(jnp.sum(jnp.where(active_B, tokens_B, 0.0)) / costs_W[i])
    if remaining_B is not None:  # cost until the last row is done
      finish.append(costs_W[i] * jnp.max(jnp.where(active_B, remaining_B.astype(jnp.float32) / tokens_B, 0.0)))
  per_cost_W = jnp.stack(per_cost)
  if remaining_B is None:
    return jnp.argmax(per_cost_W).astype(jnp.int32)
  finish_W = jnp.stack(finish)
  soonest_W = finish_W <= jnp.min(finish_W) * (1.0 + 1e-6)
  return jnp.argmax(jnp.where(soonest_W, per_cost_W, -jnp.inf)).astype(jnp.int32)


class Estimate(NamedTuple):
  """Per row: the running acceptance estimate, and how fast it returns to the prior while idle."""
  alpha_B: jax.Array
  relax_B: jax.Array


def start(adaptive: Adaptive | None, batch: int) -> Estimate:
  prior, relax = (adaptive.prior, adaptive.relax) if adaptive is not None else (0.0, 0.0)
  return Estimate(jnp.full((batch,), prior, jnp.float32), jnp.full((batch,), relax, jnp.float32))


def update(adaptive: Adaptive, estimate: Estimate, submitted_B, accepted_B, active_B, round_cost=None,
           unused_B=None, trials_B=None) -> Estimate:
  """The estimate after a round: rows that submitted drafts move toward the round's accept rate,
  rows that submitted nothing relax toward the prior; a round whose drafts did not pay slows the
  relaxing. ``round_cost``: v of the round's width; a row's drafts paid when its tokens (accepted
  + 1) reach it (without it: when any draft was accepted). ``unused_B``: rows whose drafter ran
  this round (it could have sat it out, ``Drafter.idle``) but submitted nothing (unsure from its
  first position): a probe that did not pay, so the row keeps its estimate and backs off.
  ``trials_B`` (trees): drafts the accept rule tried (accepted or rejected) this round, where a
  chain's are its accepted drafts plus the one rejected, if any."""
  alpha_B, relax_B = estimate
  if trials_B is None:
    rejected_B = (accepted_B < submitted_B).astype(jnp.float32)
    trials_B = accepted_B.astype(jnp.float32) + rejected_B
  trials_B = jnp.asarray(trials_B, jnp.float32)
  rate_B = accepted_B / jnp.maximum(trials_B, 1.0)
  weight_B = 1.0 - (1.0 - adaptive.memory) ** trials_B
  observed_B = alpha_B + weight_B * (rate_B - alpha_B)
  relaxed_B = alpha_B + relax_B * (adaptive.prior - alpha_B)
  paid_B = accepted_B > 0
  if round_cost is not None:
    paid_B = paid_B & (accepted_B + 1.0 >= round_cost)
  backed_off_B = jnp.where(paid_B, adaptive.relax, relax_B * adaptive.backoff)
  drafted_B = submitted_B > 0
  if unused_B is not None:
    unused_B = unused_B & ~drafted_B
    relaxed_B = jnp.where(unused_B, alpha_B, relaxed_B)
    relax_B = jnp.where(unused_B, relax_B * adaptive.backoff, relax_B)
  new = Estimate(jnp.where(drafted_B, observed_B, relaxed_B), jnp.where(drafted_B, backed_off_B, relax_B))
  return jax.tree.map(lambda n, o: jnp.where(active_B, n, o), new, estimate)
