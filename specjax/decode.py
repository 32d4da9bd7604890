"""The decoding loops: autoregressive baseline and speculative. Each is one ``jax.jit`` around a
``lax.while_loop`` over explicit state, with static shapes and no host round-trip per token.

Row bookkeeping (both loops): ``tokens_BxS`` holds each row's prompt then its generated tokens;
``seq_len_B`` counts them; the target cache has committed ``seq_len - 1`` slots (the last token
is fed next). Rows advance by their own counts and stop at EOS or ``max_new_tokens``; finished
rows stay in the batch (static shapes) but are masked and stop counting in the statistics.
"""
from __future__ import annotations

import dataclasses
import functools
from typing import Any

import flax
import jax
import jax.numpy as jnp
import numpy as np

from specjax import adaptive as adaptive_lib
from specjax import refill as refill_lib
from specjax import precision, sharding, theory, validate
from specjax import tree as tree_lib
from specjax.loop_stats import Stats, summarize
from specjax.drafters.base import Prefill, Verified, features
from specjax.models import api, kv_cache
from specjax.sampling import Sampling


@dataclasses.dataclass(frozen=True)
class GenerateOutput:
  tokens: np.ndarray   # int32 [batch, max_new_tokens]; pad_id past each row's end
  lengths: np.ndarray  # int32 [batch]: generated tokens per row, EOS included
  stats: dict[str, Any]
  # speculative_generate: the drafter it ran, carrying what it learned (Drafter.memory); pass it to
  # the next call to go on from there
  drafter: Any = None


@flax.struct.dataclass
class Rows:
  tokens_BxS: jax.Array
  seq_len_B: jax.Array
  new_B: jax.Array     # generated so far
  done_B: jax.Array


def _append(rows: Rows, new_BxN, count_B, max_new_tokens, eos_id):
  """Appends the first ``count`` of ``new`` to each active row, cut at EOS and max_new_tokens."""
  n = new_BxN.shape[1]
  count_B = jnp.minimum(count_B, max_new_tokens - rows.new_B)
  if eos_id is not None:
    is_eos = (new_BxN == eos_id) & (jnp.arange(n)[None] < count_B[:, None])
    first_eos = jnp.argmax(is_eos, axis=1)
    count_B = jnp.where(is_eos.any(1), first_eos + 1, count_B)
    hit_eos = is_eos.any(1)
  else:
    hit_eos = jnp.zeros_like(rows.done_B)
  count_B = jnp.where(rows.done_B, 0, count_B)
  tokens = kv_cache.write_rows(rows.tokens_BxS, new_BxN, rows.seq_len_B)
  new_B = rows.new_B + count_B
  done_B = rows.done_B | (new_B >= max_new_tokens) | (hit_eos & ~rows.done_B)
  return Rows(tokens, rows.seq_len_B + count_B, new_B, done_B), count_B


def _output(rows: Rows, start_B, max_new_tokens, pad_id):
  idx = start_B[:, None] + jnp.arange(max_new_tokens)[None]
  out = kv_cache.gather_rows(rows.tokens_BxS, idx)
  return jnp.where(jnp.arange(max_new_tokens)[None] < rows.new_B[:, None], out, pad_id), rows.new_B


def _last_tokens(rows: Rows):
  return jnp.take_along_axis(rows.tokens_BxS, (rows.seq_len_B - 1)[:, None], 1)


# ----------------------------------------------------------------------------- autoregressive
def _start_queue(prompts_QxP, prompt_lengths_Q, batch_size, max_new_tokens, pad_id, start_fn):
  """The first ``batch_size`` prompts' rows, and the queue of the rest (None: no refill)."""
  b = prompts_QxP.shape[0] if batch_size is None else batch_size
  state, tokens, seq_len = start_fn(prompts_QxP[:b], prompt_lengths_Q[:b])
  rows = Rows(tokens, seq_len, jnp.zeros_like(seq_len), jnp.zeros_like(seq_len, bool))
  queue = None if batch_size is None else refill_lib.Queue.create(prompts_QxP, prompt_lengths_Q, b, seq_len,
                                                                  max_new_tokens, pad_id)
  return state, rows, seq_len, queue


_GENERATE_STATIC = ("max_new_tokens", "sampling", "eos_id", "pad_id", "max_len", "batch_size")


@functools.partial(jax.jit, static_argnames=_GENERATE_STATIC)
def _generate(model, prompts_BxP, prompt_lengths_B, rng, *, max_new_tokens, sampling, eos_id, pad_id, max_len,
              batch_size=None):
  start_fn = lambda pr, ln: api.start(model, pr, ln, max_len)
  cache, rows, start_B, queue = _start_queue(prompts_BxP, prompt_lengths_B, batch_size, max_new_tokens, pad_id,
                                             start_fn)
  output_fn = lambda rows, start_B: _output(rows, start_B, max_new_tokens, pad_id)

  def body(carry):
    rows, cache, rng, steps, queue = carry
    rng, step_rng = jax.random.split(rng)
    logits_Bx1xV, _, cache = api.forward(model, _last_tokens(rows), cache)
    next_B = sampling.sample(step_rng, logits_Bx1xV[:, 0])
    rows, _ = _append(rows, next_B[:, None], jnp.ones_like(rows.seq_len_B), max_new_tokens, eos_id)
    cache = cache.with_length(rows.seq_len_B - 1)
    if queue is not None:  # continuous refill: finished rows take the next queued prompts
      queue, rows, (cache,) = refill_lib.refill(queue, rows, (cache,), (start_fn,), output_fn)
    return rows, cache, rng, steps + 1, queue

  rows, _, _, steps, queue = jax.lax.while_loop(lambda c: ~jnp.all(c[0].done_B), body,
                                                (rows, cache, rng, jnp.zeros((), jnp.int32), queue))
  if queue is not None:
    return queue.out_QxN, queue.out_len_Q, steps
  tokens, lengths = output_fn(rows, start_B)
  return tokens, lengths, steps


def generate(model, prompts, prompt_lengths, *, max_new_tokens: int, sampling: Sampling = Sampling(),
             rng=None, eos_id: int | None = None, pad_id: int = 0, max_len: int | None = None,
             mesh=None, batch_size: int | None = None) -> GenerateOutput:
  """Autoregressive baseline: one target call per token. ``mesh``: see :mod:`specjax.sharding`.

  ``batch_size`` smaller than the number of prompts: continuous refill (:mod:`specjax.refill`),
  that many rows decode at once and each finished row takes the next prompt.
  """
  prompts, prompt_lengths, max_len = validate.inputs(model, prompts, prompt_lengths, max_new_tokens,
                                                     extra=1, max_len=max_len)
  batch_size = _refill_batch(batch_size, prompts.shape[0], mesh)
  rng = jax.random.PRNGKey(0) if rng is None else rng
  model, _, prompts, prompt_lengths, rng = sharding.prepare(mesh, model, None, prompts, prompt_lengths, rng)
  with sharding.decode_context(mesh):
    run = precision.jit_for_weights(_generate, _GENERATE_STATIC, model)  # bf16 on CPU: no resident upcast
    tokens, lengths, steps = run(model, prompts, prompt_lengths, rng, max_new_tokens=max_new_tokens,
                                 sampling=sampling, eos_id=eos_id, pad_id=pad_id, max_len=max_len,
                                 batch_size=batch_size)
  steps, tokens, lengths = int(steps), sharding.to_host(tokens), sharding.to_host(lengths)  # to_host: multi-host
  rows = batch_size or len(lengths)
  return GenerateOutput(tokens, lengths,
                        {"iterations": steps, "target_calls": steps, "generated_tokens": int(np.sum(lengths)),
                         "batch_size": rows, "batch_utilization": round(float(np.sum(lengths)) / max(steps * rows, 1), 4)})


def _refill_batch(batch_size, num_prompts: int, mesh):
  """None (one static batch) or the refill batch size, checked."""
  if batch_size is None or batch_size >= num_prompts:
    return None
  if isinstance(batch_size, bool) or not isinstance(batch_size, (int, np.integer)) or batch_size < 1:
    raise ValueError(f"batch_size must be a positive int (rows decoded at once), got {batch_size!r}")
  if mesh is not None:
    raise ValueError(f"continuous refill (batch_size={batch_size} < {num_prompts} prompts) does not support "
                     "mesh= yet; pass all prompts as one batch, or decode on one device")
  return int(batch_size)


# ----------------------------------------------------------------------------- speculative
@flax.struct.dataclass
class Plan:
  """A round's decisions, made before the target's verify pass: the draft, the drafts each row
  submits (None: every drafted node, trees), the index of the verify width, the accept rule's key,
  and whether the drafter sat the round out (None: it cannot, ``Drafter.idle``)."""
  draft: Any
  num_B: jax.Array | None
  pick: jax.Array
  rng: jax.Array
  idle: jax.Array | None = None


@flax.struct.dataclass
class LoopState:
  """The speculative loop's carry: the rows, the target's cache, the drafter's per-row state and
  what it learns across rows (``Drafter.memory``, None if nothing), the adaptive loop's per-row
  acceptance estimate, the key, the statistics, and the prompt queue (None: no refill)."""
  rows: Rows
  cache: Any
  drafter_state: Any
  memory: Any
  estimate: adaptive_lib.Estimate
  rng: jax.Array
  stats: Stats
  queue: refill_lib.Queue | None


def _start_speculative(target, drafter, max_len):
  """One batch-B start: the target's prefill feeds its cache and the drafter's init."""
  def start(prompts_BxP, lengths_B):
    cache, tokens, seq_len, (hidden, layers) = api.start(target, prompts_BxP, lengths_B, max_len,
                                                          return_prefill=True)
    prefill = None
    if hidden is not None:
      feats = features(layers, drafter.feature_layers) if drafter.feature_layers else None
      prefill = Prefill(hidden, feats)
    return (cache, drafter.init(target, prompts_BxP, lengths_B, max_len, prefill)), tokens, seq_len
  return start


def _verify(target, cache, last_B, draft, sampling, rng, lenience, feature_layers, num_B=None, topk: int = 0,
            topk_nodes: bool = False):
  """:func:`tree.verify_and_accept` with the top-k ids along the path and at every scored node as a sixth
  and seventh output, None where not asked for (``topk``, ``topk_nodes``)."""
  out = tree_lib.verify_and_accept(target, cache, last_B, draft, sampling, rng, lenience, feature_layers, num_B,
                                   topk=topk, topk_nodes=topk_nodes)
  return (*out, *(None,) * (7 - len(out)))


def _verify_at_width(target, cache, last_B, draft, width: int, num_B, sampling, rng, lenience, feature_layers,
                     pending: bool = False, topk: int = 0, depth: int | None = None, topk_nodes: bool = False):
  """The verify pass over the first ``width`` drafts, outputs padded to the full chain's shapes.

  A static tree (``draft.tree``, a node budget): its first ``width`` drafted nodes, a tree of their
  own since parents come first; outputs padded to the full tree's ``depth``.

  ``pending`` (a width switch, decoder-only targets): the pass only reads ``cache`` and returns the
  new keys/values (``kv_cache.PendingKV``, padded to ``gamma + 1`` tokens) for one write after the
  switch; a branch that wrote the loop's cache made XLA:CPU copy it every round. Without a switch
  the pass writes the cache layer by layer as usual (a write after the whole pass, with nothing
  ordering it after the pass's reads, made XLA copy the cache instead).
  """
  g = draft.tokens_BxG.shape[1] if depth is None else depth
  nodes = draft.tokens_BxG.shape[1] + 1  # the full draft's scored nodes, root included
  cut = draft.replace(tokens_BxG=draft.tokens_BxG[:, :width],
                      q_BxGxV=None if draft.q_BxGxV is None else draft.q_BxGxV[:, :width],
                      tree=None if draft.tree is None else tree_lib.Tree(draft.tree.parents[:width + 1]))
  if pending:
    cache = kv_cache.PendingKV.start(cache, width + 1)
  cache, hidden, new, n_B, overlap, top, top_nodes = _verify(target, cache, last_B, cut, sampling, rng, lenience,
                                                             feature_layers, num_B, topk, topk_nodes)
  pad = lambda x, to, axis=1: jnp.pad(x, [(0, 0)] * axis + [(0, to - x.shape[axis])] + [(0, 0)] * (x.ndim - axis - 1))
  if isinstance(cache, kv_cache.PendingKV):
    cache = (pad(cache.k_new_LxBxTxAxD, g + 1, 2), pad(cache.v_new_LxBxTxAxD, g + 1, 2))
  return (cache, pad(hidden, g + 1), pad(new, g + 1), n_B, pad(overlap, g),
          None if top is None else pad(top, g + 1), None if top_nodes is None else pad(top_nodes, nodes))


_SPECULATIVE_STATIC = ("gamma", "max_new_tokens", "sampling", "eos_id", "pad_id", "max_len", "lenience", "batch_size",
                       "adaptive", "drafter_class")


@functools.partial(jax.jit, static_argnames=_SPECULATIVE_STATIC)
def _speculative(target, drafter, prompts_BxP, prompt_lengths_B, rng, verify_costs_W=None, *, gamma, max_new_tokens,
                 sampling, eos_id, pad_id, max_len, lenience, batch_size=None, adaptive=None, drafter_class=None):
  # drafter_class: only a compile key. jax's tree structures of two dataclasses with the same fields
  # compare equal whatever their classes, so a subclass that changes only methods could otherwise
  # run a program traced with its parent's (now and then: where their hashes meet in jit's cache).
  del drafter_class
  start = _start_speculative(target, drafter, max_len)
  (cache, drafter_state), rows, start_B, queue = _start_queue(prompts_BxP, prompt_lengths_B, batch_size,
                                                              max_new_tokens, pad_id, start)
  output_fn = lambda rows, start_B: _output(rows, start_B, max_new_tokens, pad_id)
  is_chain = drafter.tree is None
  widths = verify_widths(drafter, adaptive, gamma)
  budgeted = not is_chain and len(widths) > 1  # a static tree cut to a node budget per round
  feature_layers, topk = drafter.feature_layers, drafter.verify_topk
  topk_nodes = bool(topk) and drafter.verify_topk_nodes
  memory = drafter.memory  # learned across rows and calls: carried beside, never inside, the per-row state
  estimate = adaptive_lib.start(adaptive, rows.seq_len_B.shape[0])
  if adaptive is not None and verify_costs_W is None:
    verify_costs_W = adaptive_lib.costs_for(adaptive, widths)

  def plan(state: LoopState):
    """The round's draft and its verify width: everything decided before the target runs."""
    rows, estimate, drafter_state = state.rows, state.estimate, state.drafter_state
    current = drafter.with_memory(state.memory)
    rng, draft_rng, accept_rng = jax.random.split(state.rng, 3)
    cut_B = None if adaptive is None or not is_chain else adaptive_lib.thresholds(adaptive, estimate.alpha_B)
    drafting = current if cut_B is None or adaptive.confidence <= 0 else current.stopping_below(cut_B)
    propose = lambda d: d.propose(drafter_state, rows.tokens_BxS, rows.seq_len_B, gamma, sampling, draft_rng)
    # a fixed batch ends with its slowest row; with refill every row's tokens count
    remaining_B = None if state.queue is not None else max_new_tokens - rows.new_B
    if not is_chain:  # token trees verify every node, or the first nodes within the budget chosen
      drafter_state, draft = propose(drafting)
      pick = jnp.zeros((), jnp.int32)
      if budgeted:  # from the rows' past alone (their estimates), like a chain's width
        tokens_WxB = jnp.stack([adaptive_lib.tree_expected_tokens(estimate.alpha_B, *theory.tree_path_sums(
            drafter.tree.parents[:w + 1])) for w in widths])
        pick = adaptive_lib.choose_width(adaptive, widths, estimate.alpha_B, None, ~rows.done_B, verify_costs_W,
                                         remaining_B, tokens_WxB)
      return state.replace(drafter_state=drafter_state, rng=rng), Plan(draft, None, pick, accept_rng)
    choose = lambda offered_B: adaptive_lib.choose_width(adaptive, widths, estimate.alpha_B, offered_B, ~rows.done_B,
                                                         verify_costs_W, remaining_B)
    idle = None
    if len(widths) > 1:
      # The width chosen as if every row offered gamma drafts is the round's draft budget: the rows'
      # past alone says no wider pass pays (fewer offered drafts never choose a wider one).
      budget = choose(jnp.full(estimate.alpha_B.shape, gamma, jnp.int32))
      drafting = drafting.drafting_at_most(jnp.asarray(widths, jnp.int32)[budget])
      if drafter.idle is not None:  # budget 0: the drafter does not draft at all
        idle = budget == 0
    if idle is not None:
      empty = jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), jax.eval_shape(lambda: propose(drafting))[1])
      drafter_state, draft = jax.lax.cond(
          idle, lambda: (current.idle(drafter_state, rows.tokens_BxS, rows.seq_len_B), empty),
          lambda: propose(drafting))
    else:
      drafter_state, draft = propose(drafting)
    offered_B = adaptive_lib.offered(draft, gamma, adaptive, threshold_B=cut_B)
    pick = jnp.zeros((), jnp.int32)
    if len(widths) > 1:
      # sampled: the width reads nothing that depends on this round's draws (adaptive.py, Exactness)
      seen_B = (offered_B if sampling.greedy
                else adaptive_lib.offered_before_drawing(draft, gamma, adaptive, threshold_B=cut_B))
      pick = choose(seen_B)
    if idle is not None:
      offered_B, pick = jnp.where(idle, 0, offered_B), jnp.where(idle, 0, pick)
    num_B = jnp.minimum(offered_B, jnp.asarray(widths, jnp.int32)[pick])
    return state.replace(drafter_state=drafter_state, rng=rng), Plan(draft, num_B, pick, accept_rng, idle)

  def verify_plain(cache, last_B, p):  # trees, one compiled width, or width 0: the cache written in place
    if not is_chain and not budgeted:
      return _verify(target, cache, last_B, p.draft, sampling, p.rng, lenience, feature_layers, topk=topk,
                     topk_nodes=topk_nodes)
    return _verify_at_width(target, cache, last_B, p.draft, widths[0], p.num_B, sampling, p.rng, lenience,
                            feature_layers, topk=topk, depth=gamma,  # widths[0]: 0 when adaptive, else gamma
                            topk_nodes=topk_nodes)

  def verify_wide(cache, last_B, p):  # one target pass at the smallest compiled width that holds the drafts
    wide = widths[1:]
    pending = len(wide) > 1 and not target.is_encoder_decoder
    written, *out = jax.lax.switch(
        jnp.maximum(p.pick - 1, 0),
        [lambda c, w=w: _verify_at_width(target, c, last_B, p.draft, w, p.num_B, sampling, p.rng, lenience,
                                         feature_layers, pending, topk, gamma, topk_nodes) for w in wide], cache)
    return (kv_cache.write_pending(cache, *written) if pending else written, *out)

  def run(state: LoopState, p, verify):
    """One round: the planned verify pass, the accept rule's tokens appended, stats, refill."""
    rows, stats, estimate, memory, queue = state.rows, state.stats, state.estimate, state.memory, state.queue
    current = drafter.with_memory(memory)
    active = ~rows.done_B
    last_B = _last_tokens(rows)[:, 0]
    cache, hidden, new_BxG1, n_B, overlap_BxG, topk_BxG1xK, topk_BxNxK = verify(state.cache, last_B, p)
    num_B = jnp.full(n_B.shape, gamma, jnp.int32) if p.num_B is None else p.num_B
    scored = {}  # Verified's scored_* fields, when the drafter asks (verify_topk_nodes)
    if topk_nodes:  # every node the pass scored: a chain's submitted drafts, the tree's nodes within the budget
      if is_chain:
        drafted_B = num_B
      elif budgeted:
        drafted_B = jnp.full(n_B.shape, jnp.asarray(widths, jnp.int32)[p.pick])
      else:
        drafted_B = jnp.full(n_B.shape, p.draft.tokens_BxG.shape[1])
      nodes_B = drafted_B + 1
      scored = dict(scored_BxN=jnp.concatenate([last_B[:, None], p.draft.tokens_BxG], axis=1),
                    scored_topk_BxNxK=topk_BxNxK, scored_count_B=jnp.where(active, nodes_B, 0))
    if budgeted:  # the depth of the round's tree: positions offered, for the statistics
      num_B = jnp.broadcast_to(jnp.asarray([tree_lib.Tree(drafter.tree.parents[:w + 1]).max_depth for w in widths],
                                           jnp.int32)[p.pick], n_B.shape)
    active_B = active.astype(jnp.float32)
    pos_G = jnp.arange(gamma)
    verified_BxG = (pos_G[None] <= n_B[:, None]) * (pos_G[None] < num_B[:, None]) * active_B[:, None]
    stats = Stats(stats.iterations + 1, stats.row_iterations + active_B.sum(),
                  stats.drafted_per_position + ((pos_G[None] < num_B[:, None]) * active_B[:, None]).sum(0),
                  stats.accepted_per_position + ((pos_G[None] < n_B[:, None]) * active_B[:, None]).sum(0),
                  stats.overlap_sum + (overlap_BxG * verified_BxG).sum(), stats.verified_positions + verified_BxG.sum(),
                  stats.submitted_hist.at[num_B].add(active_B),
                  stats.width_hist.at[p.pick].add(1.0),
                  stats.idle_rounds + (0 if p.idle is None else p.idle.astype(jnp.int32)))
    if adaptive is not None:
      unused_B = None if p.idle is None else ~p.idle & (num_B == 0)  # drafted for nothing
      trials_B = None
      if budgeted:  # every sibling tried counts, each accepted with the row's rate (adaptive.tree_expected_tokens)
        nodes_B = jnp.full(n_B.shape, jnp.asarray(widths, jnp.int32)[p.pick] + 1)
        tokens_BxN = jnp.concatenate([last_B[:, None], p.draft.tokens_BxG], axis=1)
        trials_B = tree_lib.tried_along_path(drafter.tree, tokens_BxN, new_BxG1, n_B, nodes_B)
      estimate = adaptive_lib.update(adaptive, estimate, num_B, n_B, active, verify_costs_W[p.pick], unused_B,
                                     trials_B)
    fed_BxG1 = jnp.concatenate([last_B[:, None], new_BxG1[:, :-1]], axis=1)
    if topk:  # declared by the drafter: only then does commit take verified=
      drafter_state = current.commit(state.drafter_state, rows.tokens_BxS, rows.seq_len_B, n_B, hidden,
                                     verified=Verified(fed_BxG1, new_BxG1, jnp.where(active, n_B + 1, 0), topk_BxG1xK,
                                                       **scored))
    else:
      drafter_state = current.commit(state.drafter_state, rows.tokens_BxS, rows.seq_len_B, n_B, hidden)
    rows, count_B = _append(rows, new_BxG1, n_B + 1, max_new_tokens, eos_id)
    if memory is not None:  # what the rows' appended tokens taught the drafter (cut at EOS / the budget)
      memory = drafter.learn(memory, Verified(fed_BxG1, new_BxG1, count_B, topk_BxG1xK, **scored))
    cache = cache.with_length(rows.seq_len_B - 1)
    if queue is not None:  # continuous refill: finished rows take the next queued prompts
      queue, rows, ((cache, drafter_state),) = refill_lib.refill(queue, rows, ((cache, drafter_state),), (start,),
                                                                 output_fn)
    return state.replace(rows=rows, cache=cache, drafter_state=drafter_state, memory=memory, estimate=estimate,
                         stats=stats, queue=queue)

  def round_if(picked, verify):
    """The round at this width, as a while loop run at most once: a guard without lax.cond, whose
    branches made XLA:CPU copy the cache they write every round."""
    step = lambda c: (run(c[0], c[1], verify), c[1], jnp.ones((), bool))
    return lambda state, p: jax.lax.while_loop(lambda c: ~c[2] & picked(c[1].pick), step,
                                               (state, p, jnp.zeros((), bool)))[0]

  if len(widths) == 1:
    body = lambda state: run(*plan(state), verify_plain)
  else:
    # Width-0 rounds are plain decode steps writing the cache in place; inside lax.switch beside the
    # wider widths they would cost more than a step of the autoregressive loop (the conditional and
    # the pending-KV pass). The drafter and each pass are compiled in once.
    plain, wide = round_if(lambda pick: pick == 0, verify_plain), round_if(lambda pick: pick != 0, verify_wide)

    def body(state):
      state, p = plan(state)
      return wide(plain(state, p), p)
  state = LoopState(rows, cache, drafter_state, memory, estimate, rng, Stats.zeros(gamma, len(widths)), queue)
  state = jax.lax.while_loop(lambda s: ~jnp.all(s.rows.done_B), body, state)
  if state.queue is not None:
    return state.queue.out_QxN, state.queue.out_len_Q, state.stats, state.memory
  tokens, lengths = output_fn(state.rows, start_B)
  return tokens, lengths, state.stats, state.memory


def verify_widths(drafter, adaptive, gamma: int) -> tuple[int, ...]:
  """The verify widths the loop compiles: with ``adaptive``, a chain's draft counts
  (``Adaptive.widths_for``) or a static tree's node budgets (``Drafter.tree_budgets`` plus 0 and
  every node); else ``(gamma,)``, every draft (or node) each round."""
  if adaptive is None:
    return (gamma,)
  if drafter.tree is None:
    return adaptive.widths_for(gamma)
  if drafter.tree_budgets:
    nodes = drafter.tree.num_nodes - 1
    return tuple(sorted({0, nodes} | {int(b) for b in drafter.tree_budgets}))
  return (gamma,)


def lossy_reason(drafter, sampling: Sampling, lenience: float = 1.0) -> str | None:
  """Why this configuration's output is not exactly the target's distribution (None: it is)."""
  if lenience < 1.0 and not sampling.greedy:
    return f"lenience={lenience} < 1 accepts drafts the target would not draw (Leviathan's lossy l)"
  return drafter.lossy_reason(sampling)


def speculative_generate(target, drafter, prompts, prompt_lengths, *, gamma: int, max_new_tokens: int,
                         sampling: Sampling = Sampling(), rng=None, eos_id: int | None = None, pad_id: int = 0,
                         max_len: int | None = None, lenience: float = 1.0, mesh=None,
                         batch_size: int | None = None, adaptive: adaptive_lib.Adaptive | None = None,
                         allow_lossy: bool = False) -> GenerateOutput:
  """Speculative decoding: ``drafter`` proposes ``gamma`` tokens, ``target`` verifies them in one pass.

  Greedy (``sampling.temperature == 0``) output equals :func:`generate`'s token for token;
  sampled output is distributed exactly as the target's. A lossy configuration (``lenience < 1``,
  Medusa's typical acceptance, top-k siblings verified against a softmax q when sampling, ...) is refused unless
  ``allow_lossy=True``, and then reported in ``stats["lossy"]``. ``batch_size`` smaller than the
  number of prompts: continuous refill (:mod:`specjax.refill`), exact per prompt. ``adaptive``
  (:class:`specjax.adaptive.Adaptive`): each row of a chain submits 0..gamma drafts and the verify
  pass runs at the smallest compiled width that holds them; a static tree with
  ``Drafter.tree_budgets`` is verified up to the node budget chosen from the rows' past; still
  exact. ``GenerateOutput.drafter`` is ``drafter`` carrying what it learned (``Drafter.memory``).
  """
  validate.drafter(target, drafter, gamma)
  given = drafter
  tree = drafter.tree  # token-tree drafters: gamma must be the tree's depth
  if tree is not None and gamma != tree.max_depth:
    raise ValueError(f"gamma={gamma} but the drafter's token tree has depth {tree.max_depth}; "
                     f"pass gamma={tree.max_depth}")
  if not 0.0 < lenience <= 1.0:
    raise ValueError(f"lenience must be in (0, 1], got {lenience}")
  if adaptive is not None and not isinstance(adaptive, adaptive_lib.Adaptive):
    raise TypeError(f"adaptive must be a specjax.Adaptive or None, got {adaptive!r}")
  reason = lossy_reason(drafter, sampling, lenience)
  if reason is not None and not allow_lossy:
    raise ValueError(f"lossy configuration refused: {reason}. Pass allow_lossy=True (CLI: "
                     "--config.allow_lossy=True) to run it anyway; the output is then reported as lossy")
  prompts, prompt_lengths, max_len = validate.inputs(target, prompts, prompt_lengths, max_new_tokens,
                                                     extra=gamma + 1 if tree is None else tree.num_nodes,
                                                     max_len=max_len)
  batch_size = _refill_batch(batch_size, prompts.shape[0], mesh)
  rng = jax.random.PRNGKey(0) if rng is None else rng
  target, drafter, prompts, prompt_lengths, rng = sharding.prepare(mesh, target, drafter, prompts, prompt_lengths,
                                                                   rng)  # mesh: shard weights, split batch
  widths = verify_widths(drafter, adaptive, gamma)
  chain_adaptive = adaptive if tree is None or len(widths) > 1 else None  # trees: with node budgets only
  if tree is None and chain_adaptive is not None and chain_adaptive.confidence > 0:  # nothing past it is submitted
    drafter = drafter.stopping_below(chain_adaptive.confidence)
  costs_W = None if chain_adaptive is None else adaptive_lib.costs_for(adaptive, widths)
  with sharding.decode_context(mesh):
    run = precision.jit_for_weights(_speculative, _SPECULATIVE_STATIC, target, drafter)  # as in generate
    tokens, lengths, stats, memory = run(
        target, drafter, prompts, prompt_lengths, rng, costs_W, gamma=gamma, max_new_tokens=max_new_tokens,
        sampling=sampling, eos_id=eos_id, pad_id=pad_id, max_len=max_len, lenience=float(lenience),
        batch_size=batch_size, adaptive=None if chain_adaptive is None else adaptive_lib.compile_key(adaptive),
        drafter_class=type(drafter))
  tokens, lengths = sharding.to_host(tokens), sharding.to_host(lengths)  # gathers when the mesh spans hosts
  stats = summarize(stats, lengths, gamma, rows=batch_size)
  stats["lossy"] = reason is not None
  drafter = given  # the caller's drafter, not the loop's cut or sharded copy, carries the memory back
  stats["lossy_reason"] = reason
  if chain_adaptive is not None:
    stats["verify_widths" if tree is None else "verify_budgets"] = list(widths)
  if memory is not None:  # what the call's finished text teaches (a suffix pool: each prompt and its output)
    memory = drafter.learn_outputs(memory, prompts, prompt_lengths, tokens, lengths)
  return GenerateOutput(tokens, lengths, stats, drafter.with_memory(memory))
