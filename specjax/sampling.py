"""Logits -> probabilities: temperature, top-k, top-p. Applied to BOTH target and drafter."""
from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp


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
    """The distribution tokens are drawn from, float32; one-hot argmax when greedy."""
    logits_xV = logits_xV.astype(jnp.float32)
    v = logits_xV.shape[-1]
    if self.greedy:
      return jax.nn.one_hot(jnp.argmax(logits_xV, -1), v, dtype=jnp.float32)
    logits_xV = logits_xV / self.temperature
    if 0 < self.top_k < v:
      kth = jax.lax.top_k(logits_xV, self.top_k)[0][..., -1:]
      logits_xV = jnp.where(logits_xV >= kth, logits_xV, -jnp.inf)
    probs = jax.nn.softmax(logits_xV, -1)
    if self.top_p < 1.0:
      sorted_desc = -jnp.sort(-probs, axis=-1)
      before = jnp.cumsum(sorted_desc, -1) - sorted_desc  # mass strictly above each sorted token
      keep_sorted = before < self.top_p                     # smallest prefix reaching top_p
      threshold = jnp.min(jnp.where(keep_sorted, sorted_desc, jnp.inf), -1, keepdims=True)
      probs = jnp.where(probs >= threshold, probs, 0.0)
      probs = probs / probs.sum(-1, keepdims=True)
    return probs

  def sample(self, rng, logits_xV: jax.Array) -> jax.Array:
    if self.greedy:
      return jnp.argmax(logits_xV, -1).astype(jnp.int32)
    return sample_from(rng, self.probs(logits_xV))


def sample_from(rng, probs_xV: jax.Array) -> jax.Array:
  return jax.random.categorical(rng, jnp.log(probs_xV), axis=-1).astype(jnp.int32)
