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

from specjax import refill as refill_lib
from specjax import sharding, validate
from specjax import tree as tree_lib
from specjax.models import api, kv_cache
from specjax.sampling import Sampling


@dataclasses.dataclass(frozen=True)
class GenerateOutput:
  tokens: np.ndarray   # int32 [batch, max_new_tokens]; pad_id past each row's end
  lengths: np.ndarray  # int32 [batch]: generated tokens per row, EOS included
  stats: dict[str, Any]


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


@functools.partial(jax.jit, static_argnames=("max_new_tokens", "sampling", "eos_id", "pad_id", "max_len",
                                             "batch_size"))
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
    tokens, lengths, steps = _generate(model, prompts, prompt_lengths, rng, max_new_tokens=max_new_tokens,
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
class Stats:
  iterations: jax.Array
  row_iterations: jax.Array            # sum over iterations of active rows
  drafted_per_position: jax.Array      # [G]
  accepted_per_position: jax.Array     # [G]
  overlap_sum: jax.Array               # sum over verified positions of sum_x min(p, q)
  verified_positions: jax.Array

  @classmethod
  def zeros(cls, gamma):
    z = jnp.zeros((), jnp.float32)
    return cls(jnp.zeros((), jnp.int32), z, jnp.zeros((gamma,)), jnp.zeros((gamma,)), z, z)


@functools.partial(jax.jit, static_argnames=("gamma", "max_new_tokens", "sampling", "eos_id", "pad_id",
                                             "max_len", "lenience", "batch_size"))
def _speculative(target, drafter, prompts_BxP, prompt_lengths_B, rng, *, gamma, max_new_tokens, sampling,
                 eos_id, pad_id, max_len, lenience, batch_size=None):
  start_fns = (lambda pr, ln: api.start(target, pr, ln, max_len),
               lambda pr, ln: (drafter.init(target, pr, ln, max_len),))
  cache, rows, start_B, queue = _start_queue(prompts_BxP, prompt_lengths_B, batch_size, max_new_tokens, pad_id,
                                             start_fns[0])
  b = rows.seq_len_B.shape[0]
  drafter_state = drafter.init(target, prompts_BxP[:b], prompt_lengths_B[:b], max_len)
  output_fn = lambda rows, start_B: _output(rows, start_B, max_new_tokens, pad_id)

  def body(carry):
    rows, cache, drafter_state, rng, stats, queue = carry
    rng, draft_rng, accept_rng = jax.random.split(rng, 3)
    drafter_state, draft = drafter.propose(drafter_state, rows.tokens_BxS, rows.seq_len_B, gamma, sampling,
                                           draft_rng)
    # one target pass over [last token, drafts] with the tree mask (a chain is the tree chain(gamma))
    cache, hidden, new_BxG1, n_B, overlap_BxG = tree_lib.verify_and_accept(
        target, cache, _last_tokens(rows)[:, 0], draft, sampling, accept_rng, lenience,
        getattr(drafter, "feature_layers", ()))
    active_B = (~rows.done_B).astype(jnp.float32)
    pos_G = jnp.arange(gamma)
    verified_BxG = (pos_G[None] <= n_B[:, None]) * active_B[:, None]  # accepted ones + first rejected
    stats = Stats(stats.iterations + 1, stats.row_iterations + active_B.sum(),
                  stats.drafted_per_position + active_B.sum(),
                  stats.accepted_per_position + ((pos_G[None] < n_B[:, None]) * active_B[:, None]).sum(0),
                  stats.overlap_sum + (overlap_BxG * verified_BxG).sum(), stats.verified_positions + verified_BxG.sum())
    drafter_state = drafter.commit(drafter_state, rows.tokens_BxS, rows.seq_len_B, n_B, hidden)
    rows, _ = _append(rows, new_BxG1, n_B + 1, max_new_tokens, eos_id)
    cache = cache.with_length(rows.seq_len_B - 1)
    if queue is not None:  # continuous refill: finished rows take the next queued prompts
      queue, rows, (cache, drafter_state) = refill_lib.refill(queue, rows, (cache, drafter_state), start_fns,
                                                              output_fn)
    return rows, cache, drafter_state, rng, stats, queue

  carry = (rows, cache, drafter_state, rng, Stats.zeros(gamma), queue)
  rows, _, _, _, stats, queue = jax.lax.while_loop(lambda c: ~jnp.all(c[0].done_B), body, carry)
  if queue is not None:
    return queue.out_QxN, queue.out_len_Q, stats
  tokens, lengths = output_fn(rows, start_B)
  return tokens, lengths, stats


def speculative_generate(target, drafter, prompts, prompt_lengths, *, gamma: int, max_new_tokens: int,
                         sampling: Sampling = Sampling(), rng=None, eos_id: int | None = None, pad_id: int = 0,
                         max_len: int | None = None, lenience: float = 1.0, mesh=None,
                         batch_size: int | None = None) -> GenerateOutput:
  """Speculative decoding: ``drafter`` proposes ``gamma`` tokens, ``target`` verifies them in one pass.

  Greedy (``sampling.temperature == 0``) output equals :func:`generate`'s token for token;
  sampled output is distributed exactly as the target's. ``lenience < 1`` (Leviathan's l) is
  lossy and reported as such in ``stats["lossy"]``. ``batch_size`` smaller than the number of
  prompts: continuous refill (:mod:`specjax.refill`), exact per prompt.
  """
  validate.drafter(target, drafter, gamma)
  tree = getattr(drafter, "tree", None)  # token-tree drafters: gamma must be the tree's depth
  if tree is not None and gamma != tree.max_depth:
    raise ValueError(f"gamma={gamma} but the drafter's token tree has depth {tree.max_depth}; "
                     f"pass gamma={tree.max_depth}")
  if not 0.0 < lenience <= 1.0:
    raise ValueError(f"lenience must be in (0, 1], got {lenience}")
  prompts, prompt_lengths, max_len = validate.inputs(target, prompts, prompt_lengths, max_new_tokens,
                                                     extra=gamma + 1 if tree is None else tree.num_nodes,
                                                     max_len=max_len)
  batch_size = _refill_batch(batch_size, prompts.shape[0], mesh)
  rng = jax.random.PRNGKey(0) if rng is None else rng
  target, drafter, prompts, prompt_lengths, rng = sharding.prepare(mesh, target, drafter, prompts, prompt_lengths,
                                                                   rng)  # mesh: shard weights, split batch
  with sharding.decode_context(mesh):
    tokens, lengths, stats = _speculative(target, drafter, prompts, prompt_lengths, rng, gamma=gamma,
                                          max_new_tokens=max_new_tokens, sampling=sampling, eos_id=eos_id,
                                          pad_id=pad_id, max_len=max_len, lenience=float(lenience),
                                          batch_size=batch_size)
  tokens, lengths = sharding.to_host(tokens), sharding.to_host(lengths)  # gathers when the mesh spans hosts
  stats = summarize(stats, lengths, gamma, lenience, rows=batch_size)
  stats["lossy"] = stats["lossy"] or bool(getattr(drafter, "is_lossy", lambda s: False)(sampling))  # e.g. typical
  return GenerateOutput(tokens, lengths, stats)


def summarize(stats: Stats, lengths, gamma: int, lenience: float = 1.0, rows: int | None = None) -> dict[str, Any]:
  rows = rows or len(lengths)
  s = jax.device_get(stats)
  row_iters = max(float(s.row_iterations), 1.0)
  accepted = np.asarray(s.accepted_per_position, np.float64)
  drafted = np.asarray(s.drafted_per_position, np.float64)
  mean_accepted = float(accepted.sum() / row_iters)
  return {
      "iterations": int(s.iterations),
      "target_calls": int(s.iterations),
      "row_iterations": int(s.row_iterations),
      # share of row slots doing work: a static batch runs until its slowest row is done
      "batch_size": rows,
      "batch_utilization": round(float(s.row_iterations) / max(int(s.iterations) * rows, 1), 4),
      "generated_tokens": int(np.sum(lengths)),
      "gamma": gamma,
      "drafted_per_position": drafted.astype(int).tolist(),
      "accepted_per_position": accepted.astype(int).tolist(),
      # P(draft i kept) per iteration: falls like alpha^(i+1); the conditional rate is
      # accepted[i] / accepted[i-1] (theory.alpha_from_acceptance)
      "acceptance_per_position": (accepted / np.maximum(drafted, 1)).round(4).tolist(),
      "conditional_acceptance_per_position": (
          accepted / np.maximum(np.concatenate([drafted[:1], accepted[:-1]]), 1)).round(4).tolist(),
      "mean_accepted": round(mean_accepted, 4),          # drafts kept per row-iteration
      "tokens_per_iteration": round(mean_accepted + 1, 4),  # plus the target's own token
      "alpha": round(float(s.overlap_sum / max(float(s.verified_positions), 1.0)), 4),
      "lossy": lenience < 1.0,
  }
