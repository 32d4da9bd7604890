"""Logits -> probabilities: temperature, top-k, top-p. Applied to BOTH target and drafter.

Large vocabularies (V in the hundreds of thousands): nothing here sorts the vocabulary. Greedy
decoding needs only ``argmax`` (:meth:`Sampling.sample`; :meth:`Sampling.probs` materialises a
one-hot only for callers that ask for a dense distribution) -- and :func:`argmax` is two plain
reductions. Top-p finds its threshold by an exact bisection over float32 bit patterns (optionally
after a ``lax.top_k`` slice, see :func:`top_p_threshold`): the same kept set as the full-sort
definition (:func:`top_p_threshold_by_sort`), ties included. :func:`sample_from` is an inverse CDF
over blocks: one uniform per row, not a Gumbel per token.
"""
from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp

# > 0: top-p first reads the threshold off the TOP_P_SLICE largest probabilities (lax.top_k) when
# their mass suffices; 0: exact bisection only (cheaper on CPU, see top_p_threshold).
TOP_P_SLICE = 0


@dataclasses.dataclass(frozen=True)
class Sampling:
  """How tokens are chosen. ``temperature == 0`` means greedy (argmax)."""
  temperature: float = 0.0
  top_k: int = 0      # 0: off
  top_p: float = 1.0  # 1.0: off

  def __post_init__(self):
    if not self.temperature >= 0:
      raise ValueError(f"temperature must be >= 0, got {self.temperature}")
    if int(self.top_k) != self.top_k or self.top_k < 0:
      raise ValueError(f"top_k must be a non-negative integer, got {self.top_k}")
    if not 0.0 < self.top_p <= 1.0:
      raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")

  @property
  def greedy(self) -> bool:
    return self.temperature == 0

  def probs(self, logits_xV: jax.Array) -> jax.Array:
    """The distribution tokens are drawn from, float32; one-hot argmax when greedy.

    Greedy code paths should not call this (it builds a ``[..., V]`` one-hot): the greedy rule and
    :meth:`sample` use ``argmax`` alone.
    """
    logits_xV = logits_xV.astype(jnp.float32)
    v = logits_xV.shape[-1]
    if self.greedy:
      return jax.nn.one_hot(argmax(logits_xV), v, dtype=jnp.float32)
    logits_xV = logits_xV / self.temperature
    if 0 < self.top_k < v:
      kth = jax.lax.top_k(logits_xV, self.top_k)[0][..., -1:]
      logits_xV = jnp.where(logits_xV >= kth, logits_xV, -jnp.inf)
    probs = jax.nn.softmax(logits_xV, -1)
    if self.top_p < 1.0:
      threshold = top_p_threshold(probs, self.top_p)
      probs = jnp.where(probs >= threshold, probs, 0.0)
      probs = probs / probs.sum(-1, keepdims=True)
    return probs

  def sample(self, rng, logits_xV: jax.Array) -> jax.Array:
    if self.greedy:
      return argmax(logits_xV)
    return sample_from(rng, self.probs(logits_xV))

  def draw(self, rng, logits_xV: jax.Array):
    """``(token, q)``: a draft token and the distribution it came from; ``q`` is None when greedy
    (the draft is deterministic: q one-hot on the token, which no one needs to build)."""
    if self.greedy:
      return argmax(logits_xV), None
    q_xV = self.probs(logits_xV)
    return sample_from(rng, q_xV), q_xV


def argmax(x_xV: jax.Array) -> jax.Array:
  """``jnp.argmax(x, -1)`` (first maximum; first NaN if any) as two plain reductions, int32.

  XLA's CPU argmax (a variadic reduce) costs several times a max over a 262k vocabulary."""
  m = jnp.max(x_xV, -1, keepdims=True)
  hit = (x_xV == m) | (jnp.isnan(x_xV) & jnp.isnan(m))
  v = x_xV.shape[-1]
  return jnp.min(jnp.where(hit, jnp.arange(v, dtype=jnp.int32), v), -1).astype(jnp.int32)


SAMPLE_BLOCK = 512


def sample_from(rng, probs_xV: jax.Array) -> jax.Array:
  """One draw per row from (unnormalised, non-negative) ``probs``: inverse CDF, two levels.

  One uniform u in [0, total) per row; the token is the first whose cumulative mass exceeds u,
  found as the block of ``SAMPLE_BLOCK`` tokens whose cumulative mass first exceeds u, then the
  token inside it -- one pass over V (the block sums) instead of a Gumbel draw per token. A
  token of zero probability is never returned (rounding at the far end clamps to the last token
  with mass).
  """
  lead, v = probs_xV.shape[:-1], probs_xV.shape[-1]
  p_BxV = probs_xV.reshape((-1, v)).astype(jnp.float32)
  block = min(SAMPLE_BLOCK, v)
  nb = -(-v // block)
  p_BxNxY = jnp.pad(p_BxV, ((0, 0), (0, nb * block - v))).reshape(-1, nb, block)
  mass_BxN = p_BxNxY.sum(-1)
  cum_BxN = jnp.cumsum(mass_BxN, -1)
  u_B = jax.random.uniform(rng, cum_BxN.shape[:1]) * cum_BxN[:, -1]
  last_block = (nb - 1) - argmax((mass_BxN > 0)[:, ::-1])
  blk_B = jnp.minimum(jnp.sum(cum_BxN <= u_B[:, None], -1), last_block).astype(jnp.int32)
  rest_B = u_B - jnp.take_along_axis(cum_BxN - mass_BxN, blk_B[:, None], 1)[:, 0]
  row_BxY = jnp.take_along_axis(p_BxNxY, blk_B[:, None, None], 1)[:, 0]
  last_tok = (block - 1) - argmax((row_BxY > 0)[:, ::-1])
  tok_B = jnp.minimum(jnp.sum(jnp.cumsum(row_BxY, -1) <= rest_B[:, None], -1), last_tok)
  return (blk_B * block + tok_B).astype(jnp.int32).reshape(lead)


# ----------------------------------------------------------------------------- top-p threshold
def top_p_threshold_by_sort(probs_xV, top_p: float):
  """The definition (a full sort): the smallest probability of the shortest sorted prefix whose
  mass strictly before each token is below ``top_p``; every token with prob >= it is kept (ties at
  the threshold all stay). Reference for tests; O(V log V)."""
  sorted_desc = -jnp.sort(-probs_xV, axis=-1)
  before = jnp.cumsum(sorted_desc, -1) - sorted_desc  # mass strictly above each sorted token
  keep_sorted = before < top_p                         # smallest prefix reaching top_p
  return jnp.min(jnp.where(keep_sorted, sorted_desc, jnp.inf), -1, keepdims=True)


def _mass_above(probs_xV, t_x1):
  return jnp.sum(jnp.where(probs_xV > t_x1, probs_xV, 0.0), -1, keepdims=True)


def top_p_threshold_by_bisection(probs_xV, top_p: float, hi_x1=None):
  """Sort-free, exact: the threshold is the smallest float t with ``mass(probs > t) < top_p``.

  With M(t) the mass strictly above t (non-increasing, constant between consecutive probability
  values), the full-sort threshold tau is the smallest probability value with M(tau) < top_p, and
  M(t) >= top_p for every t below it; so tau is also the smallest float32 t with M(t) < top_p.
  Non-negative float32s order like their int32 bit patterns: halving the bit range finds t
  exactly, in at most 31 passes over V (fewer from the bracket [(total - top_p) / V, hi]). ``hi_x1`` (M(hi) < top_p) narrows the start.
  """
  hi = jnp.max(probs_xV, -1, keepdims=True) if hi_x1 is None else hi_x1  # M(max) = 0 < top_p
  # M(t) >= total - V t, so P fails below (total - top_p) / V: start there (a margin for rounding)
  total = jnp.sum(probs_xV, -1, keepdims=True)
  lo = (total - top_p - 1e-5) / probs_xV.shape[-1] * (1 - 1e-4)
  lo_bits = jnp.where(lo > 0, jax.lax.bitcast_convert_type(lo.astype(jnp.float32), jnp.int32), -1)
  lo_bits = jnp.minimum(lo_bits, hi_bits := jax.lax.bitcast_convert_type(hi.astype(jnp.float32), jnp.int32))

  def body(lh):
    lo, hi = lh
    busy = hi - lo > 1
    mid = jnp.where(busy, lo + (hi - lo) // 2, hi)  # >= 0 while busy
    ok = _mass_above(probs_xV, jax.lax.bitcast_convert_type(mid, jnp.float32)) < top_p
    return jnp.where(busy & ~ok, mid, lo), jnp.where(busy & ok, mid, hi)

  # P(hi) holds and P(lo) fails throughout; hi - lo < 2^31 halves to 1 in at most 31 passes
  _, hi_bits = jax.lax.while_loop(lambda lh: jnp.any(lh[1] - lh[0] > 1), body, (lo_bits, hi_bits))
  return jax.lax.bitcast_convert_type(jnp.maximum(hi_bits, 0), jnp.float32)


def top_p_threshold(probs_xV, top_p: float, slice_size: int = TOP_P_SLICE):
  """The full-sort threshold (:func:`top_p_threshold_by_sort`) without sorting V.

  ``slice_size`` 0 (the default): :func:`top_p_threshold_by_bisection` alone. Otherwise first the
  ``k`` largest probabilities (``lax.top_k``): they are the first ``k`` of the full sort, so when
  the mass of the first ``k - 1`` already reaches ``top_p`` the kept prefix ends inside the slice
  and its cumulative sums decide exactly as the full sort's; rows where it does not (a flat
  distribution) bisect below the k-th largest, under a ``lax.cond`` that runs only when needed.
  On CPU at V = 262k a top-256 costs about as much as the whole bisection, hence the default.
  """
  v = probs_xV.shape[-1]
  if slice_size <= 0:
    return top_p_threshold_by_bisection(probs_xV, top_p)
  k = min(slice_size, v)
  top_xk = jax.lax.top_k(probs_xV, k)[0]
  before = jnp.cumsum(top_xk, -1) - top_xk
  keep = before < top_p
  from_slice = jnp.min(jnp.where(keep, top_xk, jnp.inf), -1, keepdims=True)
  if k == v:
    return from_slice
  decided = ~keep[..., -1:]  # the k-th token is already past the prefix
  return jax.lax.cond(jnp.all(decided), lambda: from_slice,
                      lambda: jnp.where(decided, from_slice,
                                        top_p_threshold_by_bisection(probs_xV, top_p, top_xk[..., -1:])))
