"""Draft-vocabulary truncation (FR-Spec; EAGLE-3's ``d2t`` map), lossless.

A drafter's output layer covers only ``K`` token ids ``subset_K`` (for a real target: the ``K``
most frequent tokens of the target's own generations, :func:`top_k_subset`). Its ``K`` logits
stand for a distribution over the target's whole vocabulary that is zero outside the subset:

* sampled: ``q_xV`` = the ``K``-wide distribution (temperature, top-k, top-p applied to the ``K``
  logits -- the same as applying them to the logits expanded with ``-inf`` outside the subset,
  :func:`expand_logits`) scattered to the subset's ids (:func:`scatter_probs`). The token is drawn
  over ``K`` and mapped through ``subset_K``. The accept rule sees an ordinary ``q_xV``: tokens
  outside the subset are never proposed, and the residual ``norm(max(0, p - q))`` still emits
  them, so the output is exactly the target's.
* greedy: ``subset_K[argmax(logits_xK)]``; no ``V``-sized work at all.

What it buys: the drafter's LM head shrinks from ``d x V`` to ``d x K`` (SmolLM2: 49,152 -> 8k),
which is most of a small drafter's per-token FLOPs and, trained, most of its weights.
"""
from __future__ import annotations

import jax.numpy as jnp
import numpy as np

from specjax.models import store
from specjax.models.store import check_subset  # noqa: F401  (the models layer's check, re-used here)
from specjax.sampling import argmax, sample_from


def top_k_subset(counts_V, k: int) -> np.ndarray:
  """The ``k`` ids with the largest counts (ties: the smaller id first), sorted by id, int32."""
  counts_V = np.asarray(counts_V)
  if counts_V.ndim != 1:
    raise ValueError(f"token counts must be 1-D [vocab_size], got shape {counts_V.shape}")
  v = counts_V.shape[0]
  if int(k) != k or not 1 <= k <= v:
    raise ValueError(f"subset size k={k} must be an integer in [1, vocab_size={v}]")
  order = np.lexsort((np.arange(v), -counts_V.astype(np.float64)))  # count desc, then id asc
  return np.sort(order[:int(k)]).astype(np.int32)


def coverage(counts_V, subset_K) -> float:
  """Share of the counted tokens that fall inside the subset."""
  counts_V = np.asarray(counts_V, np.float64)
  return float(counts_V[np.asarray(subset_K)].sum() / max(counts_V.sum(), 1.0))


def expand_logits(logits_xK, subset_K, vocab_size: int):
  """``[..., V]`` logits: the subset's at their ids, ``-inf`` elsewhere (the definition of q)."""
  full = jnp.full(logits_xK.shape[:-1] + (vocab_size,), -jnp.inf, jnp.float32)
  return full.at[..., subset_K].set(logits_xK.astype(jnp.float32))


def scatter_probs(q_xK, subset_K, vocab_size: int):
  """``[..., V]`` probabilities: ``q_xK`` at the subset's ids, 0 elsewhere."""
  return jnp.zeros(q_xK.shape[:-1] + (vocab_size,), jnp.float32).at[..., subset_K].set(q_xK)


def select_logits(logits_xW, subset_K, vocab_size: int):
  """The drafter's ``K`` logits: ``logits`` itself when it is already ``K`` wide (a truncated head),
  the subset's columns when it is ``V`` wide (truncating an existing full-vocabulary drafter)."""
  w, k = logits_xW.shape[-1], subset_K.shape[0]
  if w == k:
    return logits_xW
  if w == vocab_size:
    return jnp.take(logits_xW, subset_K, axis=-1)
  raise ValueError(f"drafter logits have width {w}; expected K={k} (its vocab subset) or V={vocab_size}")


def draw(sampling, rng, logits_xW, subset_K=None, vocab_size: int | None = None):
  """``(token, q_xV or None)`` as :meth:`specjax.Sampling.draw`, through the subset when given."""
  if subset_K is None:
    return sampling.draw(rng, logits_xW)
  logits_xK = select_logits(logits_xW, subset_K, vocab_size)
  if sampling.greedy:
    return jnp.take(subset_K, argmax(logits_xK)), None
  q_xK = sampling.probs(logits_xK)
  return jnp.take(subset_K, sample_from(rng, q_xK)), scatter_probs(q_xK, subset_K, vocab_size)


def load_subset(folder):
  """The vocab subset (``vocab_subset.npy``, :mod:`specjax.models.store`) saved beside a truncated
  drafter's weights, as int32, or None when there is none."""
  subset = store.read_subset(folder)
  return None if subset is None else jnp.asarray(subset, jnp.int32)
