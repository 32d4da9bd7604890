"""Cost measurements for the walltime formula, for any drafter behind the protocol.

* ``c``: one drafting round (``drafter.propose`` for ``gamma``) / ``gamma`` / one cached one-token
  target step. For a draft model that is Leviathan's c; for heads and block drafters (MTP, DFlash,
  Medusa) it is what their round really costs, spread over the drafted depth.
* ``v``: one cached target pass over the verify input (``gamma + 1`` tokens for a chain, every
  node of a token tree) / one over a single token; ``verify_costs``: v at each verify width the
  adaptive loop compiles.
* ``paired_times``: the baseline and the speculative run timed alternately, so load drifts on a
  shared machine hit both; ``round_robin_times`` the same for any number of methods.

Every timing is a median after one untimed compile-and-warm-up call.
"""
from __future__ import annotations

import functools
import time

import jax
import jax.numpy as jnp
import numpy as np

from specjax.models import api


def median_time(fn, repeats: int, inner: int = 1) -> tuple:
  """(last output, median seconds per call); ``inner`` calls per sample tame timer noise."""
  out = jax.block_until_ready(fn())
  times = []
  for _ in range(max(repeats, 1)):
    t0 = time.perf_counter()
    for _ in range(inner):
      out = fn()
    jax.block_until_ready(out)
    times.append((time.perf_counter() - t0) / inner)
  return out, float(np.median(times))


def paired_times(fn_a, fn_b, repeats: int) -> tuple:
  """(out_a, out_b, median seconds a, median seconds b), a and b timed alternately."""
  outs, medians, _ = round_robin_times({"a": fn_a, "b": fn_b}, repeats)
  return outs["a"], outs["b"], medians["a"], medians["b"]


def round_robin_times(fns: dict, repeats: int) -> tuple:
  """(last outputs, median seconds, every timed seconds), each a dict by name: one untimed call of
  each fn, then ``repeats`` rounds calling every fn once, in order, so load drifts hit all of them."""
  outs = {name: jax.block_until_ready(fn()) for name, fn in fns.items()}
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


def verify_costs(target, prompts_BxP, lengths_B, widths, max_len: int, repeats: int = 7,
                 min_slope: float = 0.02) -> tuple:
  """``((w, v(w)), ...)``: a cached target pass over ``w + 1`` tokens per row / one over 1 token, for
  each draft count ``w`` in ``widths`` (the adaptive loop's compiled verify widths).

  The passes are timed alternately (one sample of each per repeat, median over repeats), so load
  drifts hit every width alike. Noise must not make a wider pass look cheaper: the costs are made
  non-decreasing in ``w`` and at least ``1 + min_slope * w``.
  """
  cache = _start_cache(target, prompts_BxP, lengths_B, max_len)
  b, widths = prompts_BxP.shape[0], sorted({0, *map(int, widths)})
  fns = {w: functools.partial(_forward_logits, target, jnp.ones((b, w + 1), jnp.int32), cache) for w in widths}
  for fn in fns.values():
    jax.block_until_ready(fn())
  samples = {w: [] for w in widths}
  for _ in range(max(repeats, 1)):
    for w, fn in fns.items():
      t0 = time.perf_counter()
      jax.block_until_ready(fn())
      samples[w].append(time.perf_counter() - t0)
  step = float(np.median(samples[0]))
  out, floor = [], 1.0
  for w in widths:
    floor = max(floor, float(np.median(samples[w])) / step, 1.0 + min_slope * w)
    out.append((w, round(floor, 4)))
  return tuple(out)


@functools.partial(jax.jit, static_argnames=("max_len",))
def _init_state(target, drafter, prompts_BxP, lengths_B, *, max_len):
  tokens_BxS = jnp.zeros((prompts_BxP.shape[0], max_len), jnp.int32).at[:, :prompts_BxP.shape[1]].set(prompts_BxP)
  return drafter.init(target, prompts_BxP, lengths_B, max_len), tokens_BxS


@functools.partial(jax.jit, static_argnames=("gamma", "sampling"))
def _propose(drafter, state, tokens_BxS, lengths_B, rng, *, gamma, sampling):
  return drafter.propose(state, tokens_BxS, lengths_B, gamma, sampling, rng)[1].tokens_BxG


def drafter_round_seconds(target, drafter, prompts_BxP, lengths_B, gamma: int, sampling, max_len: int,
                          repeats: int = 5) -> float:
  """Seconds of one ``drafter.propose`` round of ``gamma`` drafts, from the state after the prompt."""
  prompts_BxP, lengths_B = jnp.asarray(prompts_BxP, jnp.int32), jnp.asarray(lengths_B, jnp.int32)
  state, tokens_BxS = _init_state(target, drafter, prompts_BxP, lengths_B, max_len=max_len)
  rng = jax.random.PRNGKey(0)
  return median_time(lambda: _propose(drafter, state, tokens_BxS, lengths_B, rng, gamma=gamma, sampling=sampling),
                     repeats, inner=10)[1]


def costs(target, drafter, prompts_BxP, lengths_B, gamma: int, num_nodes: int, sampling, max_len: int,
          repeats: int = 5) -> tuple:
  """``(c, v)`` in one-token target steps, the step timed once: c = one ``propose`` round / gamma
  (0-ish for a free lookup), v = a pass over ``num_nodes`` tokens (every drafted node + the root)."""
  step = target_step_seconds(target, prompts_BxP, lengths_B, 1, max_len, repeats)
  c = drafter_round_seconds(target, drafter, prompts_BxP, lengths_B, gamma, sampling, max_len, repeats) / gamma / step
  return c, target_step_seconds(target, prompts_BxP, lengths_B, num_nodes, max_len, repeats) / step
