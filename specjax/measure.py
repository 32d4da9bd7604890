"""Cost measurements for the walltime formula, for any drafter behind the protocol.

* ``c``: one drafting round (``drafter.propose`` for ``gamma``) / ``gamma`` / one cached one-token
  target step. For a draft model that is Leviathan's c; for heads and block drafters (MTP, DFlash,
  Medusa) it is what their round really costs, spread over the drafted depth.
* ``v``: one cached target pass over the verify input (``gamma + 1`` tokens for a chain, every
  node of a token tree) / one over a single token; ``loop_costs``: v at each verify width the
  adaptive loop compiles, measured as rounds of that loop.
* ``paired_times``: the baseline and the speculative run timed alternately, so load drifts on a
  shared machine hit both; ``round_robin_times`` the same for any number of methods.

Every timing is a median after one untimed compile-and-warm-up call.
"""
from __future__ import annotations

import dataclasses
import functools
import math
import time

import jax
import jax.numpy as jnp
import numpy as np

from specjax.models import api


SAMPLE_SECONDS = 0.05  # a timed sample this long is well above timer and dispatch noise


def median_time(fn, repeats: int, inner: int = 1) -> tuple:
  """(last output, median seconds per call); up to ``inner`` calls per sample tame timer noise.

  A call that alone takes ``SAMPLE_SECONDS`` or more needs no company: the sample then holds only
  as many calls as reach that length."""
  out = jax.block_until_ready(fn())
  if inner > 1:
    t0 = time.perf_counter()
    out = jax.block_until_ready(fn())
    inner = min(inner, max(1, math.ceil(SAMPLE_SECONDS / max(time.perf_counter() - t0, 1e-9))))
  times = []
  for _ in range(max(repeats, 1)):
    t0 = time.perf_counter()
    for _ in range(inner):
      out = fn()
    jax.block_until_ready(out)
    times.append((time.perf_counter() - t0) / inner)
  return out, float(np.median(times))


def paired_times(fn_a, fn_b, repeats: int, warm_up: bool = True) -> tuple:
  """(out_a, out_b, median seconds a, median seconds b), a and b timed alternately."""
  outs, medians, _ = round_robin_times({"a": fn_a, "b": fn_b}, repeats, warm_up)
  return outs["a"], outs["b"], medians["a"], medians["b"]


def round_robin_times(fns: dict, repeats: int, warm_up: bool = True) -> tuple:
  """(last outputs, median seconds, every timed seconds), each a dict by name: one untimed call of
  each fn (``warm_up=False``: none, every fn compiled and run already), then ``repeats`` rounds
  calling every fn once, in order, so load drifts hit all of them."""
  outs = {name: jax.block_until_ready(fn()) if warm_up else None for name, fn in fns.items()}
  times = {name: [] for name in fns}
  for _ in range(max(repeats, 1)):
    for name, fn in fns.items():
      t0 = time.perf_counter()
      outs[name] = jax.block_until_ready(fn())
      times[name].append(time.perf_counter() - t0)
  return outs, {name: float(np.median(t)) for name, t in times.items()}, times


@jax.jit
def _forward_logits(model, tokens_BxT, cache):
  return api.forward(model, tokens_BxT, cache)[0]


_start = jax.jit(api.start, static_argnums=3)


def _start_cache(target, prompts_BxP, lengths_B, max_len):
  return _start(target, jnp.asarray(prompts_BxP, jnp.int32), jnp.asarray(lengths_B, jnp.int32), max_len)[0]


def target_step_seconds(target, prompts_BxP, lengths_B, num_tokens: int, max_len: int, repeats: int = 5,
                        inner: int = 10) -> float:
  """Seconds of one cached target forward over ``num_tokens`` new tokens per row."""
  cache = _start_cache(target, prompts_BxP, lengths_B, max_len)
  tokens = jnp.ones((prompts_BxP.shape[0], num_tokens), jnp.int32)
  return median_time(lambda: _forward_logits(target, tokens, cache), repeats, inner)[1]


def verify_cost(target, prompts_BxP, lengths_B, num_nodes: int, max_len: int, repeats: int = 5) -> float:
  """v: a target pass over ``num_nodes`` tokens / a pass over one token (same cache and length)."""
  one = target_step_seconds(target, prompts_BxP, lengths_B, 1, max_len, repeats)
  return target_step_seconds(target, prompts_BxP, lengths_B, num_nodes, max_len, repeats) / one


def loop_costs(target, drafter, prompts_BxP, lengths_B, *, gamma: int, adaptive, repeats: int = 3,
               min_slope: float = 0.02, **generate_kw) -> tuple:
  """``((w, v(w)), ...)`` measured inside the adaptive loop: seconds per round with every round run
  at width ``w`` / seconds per round with every round at width 0 (a plain decode step).

  A wide round costs more in the loop than its target pass alone: the width switch, the pending
  keys and values and the accept rule come with it, and a short pass timed alone is easily thrown
  off by load. Each width is forced through the loop's own
  cost argument, so every run reuses the program the real run compiles (same shapes, same
  ``generate_kw``). The target's prefill, timed alone, is taken off each run before dividing by
  its rounds (runs at wider widths have fewer rounds). Costs are made non-decreasing in ``w`` and
  at least ``1 + min_slope * w``, so noise never makes a width look cheaper than a narrower one.

  Where the rows reach ``eos_id`` before ``max_new_tokens``, the runs are timed again without it (one
  more compile): a run of a few rounds is mostly its fixed per-call cost (dispatch, prefill timing
  error), which would make every width look about as cheap as a plain round."""
  from specjax import decode  # pylint: disable=import-outside-toplevel  (decode sits above this module)
  widths = decode.verify_widths(drafter, adaptive, gamma)  # a chain's draft counts or a tree's node budgets
  def forced(w, kw):
    only_w = dataclasses.replace(adaptive, verify_costs=tuple((x, 1.0 if x == w else 1e6) for x in widths))
    return lambda: decode.speculative_generate(target, drafter, prompts_BxP, lengths_B, gamma=gamma,
                                               adaptive=only_w, **kw)
  runs = {w: forced(w, generate_kw) for w in widths}
  verified = gamma + 1 if drafter.tree is None else drafter.tree.num_nodes
  max_len = generate_kw.get("max_len") or prompts_BxP.shape[1] + generate_kw["max_new_tokens"] + verified
  rows = generate_kw.get("batch_size") or prompts_BxP.shape[0]  # refill: the first rows' prefill
  prefill = median_time(lambda: _start_cache(target, prompts_BxP[:rows], lengths_B[:rows], max_len), repeats)[1]
  plain = jax.block_until_ready(runs[0]())  # compiles the loop: every width runs this one program
  if generate_kw.get("eos_id") is not None and plain.stats["target_calls"] < generate_kw["max_new_tokens"]:
    runs = {w: forced(w, {**generate_kw, "eos_id": None}) for w in widths}  # stopped early at EOS
    jax.block_until_ready(runs[0]())
  outs, seconds, _ = round_robin_times(runs, repeats, warm_up=False)  # alternating: load drifts hit every width
  per_round = {w: max(seconds[w] - prefill, 1e-9) / max(int(outs[w].stats["target_calls"]), 1) for w in widths}
  out, floor = [], 1.0
  for w in widths:
    floor = max(floor, per_round[w] / per_round[0], 1.0 + min_slope * w)
    out.append((w, round(floor, 4)))
  return tuple(out)


def initial_state(target, drafter, prompts_BxP, lengths_B, *, max_len):
  """``(drafter state after the prompt, tokens_BxS)``; the drafter is an argument, not compiled-in constants."""
  return _initial_state(target, drafter, prompts_BxP, lengths_B, max_len=max_len, drafter_class=type(drafter))


def propose_tokens(drafter, state, tokens_BxS, lengths_B, rng, *, gamma, sampling):
  """One ``drafter.propose`` round: its ``tokens_BxG``."""
  return _propose_tokens(drafter, state, tokens_BxS, lengths_B, rng, gamma=gamma, sampling=sampling,
                         drafter_class=type(drafter))


# drafter_class: a compile key only, as in decode._speculative (tree structures ignore the class)
@functools.partial(jax.jit, static_argnames=("max_len", "drafter_class"))
def _initial_state(target, drafter, prompts_BxP, lengths_B, *, max_len, drafter_class):
  del drafter_class
  tokens_BxS = jnp.zeros((prompts_BxP.shape[0], max_len), jnp.int32).at[:, :prompts_BxP.shape[1]].set(prompts_BxP)
  return drafter.init(target, prompts_BxP, lengths_B, max_len), tokens_BxS


@functools.partial(jax.jit, static_argnames=("gamma", "sampling", "drafter_class"))
def _propose_tokens(drafter, state, tokens_BxS, lengths_B, rng, *, gamma, sampling, drafter_class):
  del drafter_class
  return drafter.propose(state, tokens_BxS, lengths_B, gamma, sampling, rng)[1].tokens_BxG


def drafter_round_seconds(target, drafter, prompts_BxP, lengths_B, gamma: int, sampling, max_len: int,
                          repeats: int = 5) -> float:
  """Seconds of one ``drafter.propose`` round of ``gamma`` drafts, from the state after the prompt."""
  prompts_BxP, lengths_B = jnp.asarray(prompts_BxP, jnp.int32), jnp.asarray(lengths_B, jnp.int32)
  state, tokens_BxS = initial_state(target, drafter, prompts_BxP, lengths_B, max_len=max_len)
  rng = jax.random.PRNGKey(0)
  return median_time(lambda: propose_tokens(drafter, state, tokens_BxS, lengths_B, rng, gamma=gamma, sampling=sampling),
                     repeats, inner=10)[1]


def costs(target, drafter, prompts_BxP, lengths_B, gamma: int, num_nodes: int, sampling, max_len: int,
          repeats: int = 5) -> tuple:
  """``(c, v)`` in one-token target steps, the step timed once: c = one ``propose`` round / gamma
  (0-ish for a free lookup), v = a pass over ``num_nodes`` tokens (every drafted node + the root)."""
  step = target_step_seconds(target, prompts_BxP, lengths_B, 1, max_len, repeats)
  c = drafter_round_seconds(target, drafter, prompts_BxP, lengths_B, gamma, sampling, max_len, repeats) / gamma / step
  return c, target_step_seconds(target, prompts_BxP, lengths_B, num_nodes, max_len, repeats) / step
