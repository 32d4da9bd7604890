"""Accept rules for a chain of ``G`` drafts scored by one target pass over ``G + 1`` positions.

Each returns ``(n_accepted_B, next_token_B)``: the row keeps drafts ``0..n-1`` and then
``next_token`` (the correction at the first rejection, or the bonus token when all G pass).
"""
from __future__ import annotations

import jax
import jax.numpy as jnp

from specjax.sampling import sample_from

# Below this the residual max(0, p - q) is numerically empty (p ~= q): fall back to p.
RESIDUAL_EPS = 1e-6


def _leading_true(ok_BxG):
  return jnp.sum(jnp.cumprod(ok_BxG.astype(jnp.int32), axis=-1), axis=-1)


def greedy(target_logits_BxG1xV, drafts_BxG):
  """Exact match with the target's argmax; the output equals greedy autoregressive decoding."""
  best_BxG1 = jnp.argmax(target_logits_BxG1xV, -1).astype(jnp.int32)
  n_B = _leading_true(drafts_BxG == best_BxG1[:, :-1])
  return n_B, jnp.take_along_axis(best_BxG1, n_B[:, None], 1)[:, 0]


def rejection(rng, p_BxG1xV, q_BxGxV, drafts_BxG, lenience: float = 1.0):
  """Leviathan et al. Alg. 1 (Chen et al. Alg. 2): lossless when ``lenience == 1``.

  Accept draft x with probability min(1, p(x) / (lenience * q(x))); on the first rejection draw
  from norm(max(0, p - q)), with p as the fallback when that residual is ~0; when all G drafts
  pass, draw the bonus token from the target's last distribution. ``lenience < 1`` is lossy.
  """
  b, g = drafts_BxG.shape
  u_rng, r_rng = jax.random.split(rng)
  p_draft = jnp.take_along_axis(p_BxG1xV[:, :g], drafts_BxG[..., None], -1)[..., 0]
  q_draft = jnp.take_along_axis(q_BxGxV, drafts_BxG[..., None], -1)[..., 0]
  u_BxG = jax.random.uniform(u_rng, (b, g))
  n_B = _leading_true(u_BxG * lenience * q_draft < p_draft)
  q_pad_BxG1xV = jnp.concatenate([q_BxGxV, jnp.zeros_like(q_BxGxV[:, :1])], axis=1)  # bonus: residual = p
  p_n = jnp.take_along_axis(p_BxG1xV, n_B[:, None, None], 1)[:, 0]
  q_n = jnp.take_along_axis(q_pad_BxG1xV, n_B[:, None, None], 1)[:, 0]
  residual = jnp.maximum(p_n - q_n, 0.0)
  mass = residual.sum(-1, keepdims=True)
  residual = jnp.where(mass > RESIDUAL_EPS, residual / jnp.maximum(mass, RESIDUAL_EPS), p_n)
  return n_B, sample_from(r_rng, residual)


def overlap(p_BxGxV, q_BxGxV):
  """sum_x min(p(x), q(x)) per position: the acceptance probability alpha of each draft."""
  return jnp.sum(jnp.minimum(p_BxGxV, q_BxGxV), -1)
