"""Building blocks shared by the model families: RMSNorm, RoPE, dot-product attention, activations,
the gated MLP."""
from __future__ import annotations

from typing import Callable

import flax.linen as nn
import jax
import jax.numpy as jnp

Init = nn.initializers


def param_with_axes(module: nn.Module, name, init_fn, shape, axes, dtype=jnp.float32):
  """A param whose logical axis names travel with it (read back by specjax.sharding)."""
  return module.param(name, nn.with_logical_partitioning(init_fn, axes), shape, dtype)


def compute_weight(w, x, dt):
  """Weight ``w`` in compute dtype ``dt`` for a product with activations ``x``, cast where it is used.

  On XLA:CPU a weight stored narrower than float32 is cast from :func:`tied_to` ``(w, x)``, so the
  cast waits for this layer's input and lives only for this layer (XLA otherwise schedules every
  layer's cast at the start of the program). XLA:CPU computes a bfloat16 matmul through a float32
  cast of its own, so a bfloat16 weight is tied there even when ``dt`` is bfloat16. Inside a decode
  loop the cast is still loop-invariant to XLA's code motion, which ``precision.jit_for_weights``
  turns off for such programs.
  """
  dt = jnp.dtype(dt)
  if not narrow_on_cpu(w):  # accelerators multiply bfloat16 natively: their programs stay as they were
    return w.astype(dt)
  return tied_to(w, x).astype(dt)


def narrow_on_cpu(w) -> bool:
  """Whether ``w`` is a float stored narrower than float32 on XLA:CPU (which upcasts it to compute)."""
  return jnp.issubdtype(w.dtype, jnp.floating) and w.dtype.itemsize < 4 and jax.default_backend() == "cpu"


def tied_to(w, x):
  """``w`` (a narrow float array) unchanged bit for bit, as a value XLA sees depend on ``x``: its
  bits OR-ed with ``min(sign bit of x's first element, 0)``, 0 for every value (NaN included), a
  zero XLA's simplifier does not fold. Integer ops, since XLA:CPU computes bfloat16 selects,
  dynamic updates and gathers through a float32 copy of their operand, which it then hoists like
  the cast; an optimization barrier does not serve either (XLA:CPU drops it before these passes)."""
  bits = jax.lax.bitcast_convert_type(x.reshape(-1)[0].astype(jnp.float32), jnp.int32)
  zero = jnp.minimum(jax.lax.shift_right_logical(bits, 31), 0)
  uint = jnp.dtype(f"uint{8 * w.dtype.itemsize}")
  return jax.lax.bitcast_convert_type(jax.lax.bitcast_convert_type(w, uint) | zero.astype(uint), w.dtype)


# MLP gate activations by config name; gelu_tanh is HF's gelu_pytorch_tanh / gelu_new
ACTIVATIONS = {"silu": jax.nn.silu, "gelu_tanh": lambda x: jax.nn.gelu(x, approximate=True)}


class RMSNorm(nn.Module):
  """``x / rms(x) * (offset + scale)`` in float32; ``offset=1`` is Gemma's zero-centred scale."""
  eps: float = 1e-6
  offset: float = 0.0

  @nn.compact
  def __call__(self, x):
    scale = param_with_axes(self, "scale", Init.constant(1.0 - self.offset), (x.shape[-1],), ("embed",))
    x32 = x.astype(jnp.float32)
    y = x32 * jax.lax.rsqrt(jnp.mean(x32 * x32, axis=-1, keepdims=True) + self.eps)
    return (y * (self.offset + scale)).astype(x.dtype)


def rope(x_BxTxHxD, positions_BxT, theta: float):
  """Rotary embedding, rotate-half layout (the Llama/HF convention, so imports are a copy)."""
  d = x_BxTxHxD.shape[-1]
  freq = theta ** (-jnp.arange(0, d, 2, dtype=jnp.float32) / d)
  angle = positions_BxT[..., None].astype(jnp.float32) * freq  # [B, T, D/2]
  sin, cos = jnp.sin(angle)[:, :, None, :], jnp.cos(angle)[:, :, None, :]
  x1, x2 = jnp.split(x_BxTxHxD.astype(jnp.float32), 2, axis=-1)
  out = jnp.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1)
  return out.astype(x_BxTxHxD.dtype)


def heads_first(x_BxSxAxD):
  """``[B, S, A, D] -> [B, A, S, D]``: the key/value layout :func:`attend` (and the cache) use."""
  return jnp.swapaxes(x_BxSxAxD, 1, 2)


def attend(q_BxTxHxD, k_BxAxSxD, v_BxAxSxD, mask_BxTxS, bias_BxHxTxS=None, scale=None, extra=None):
  """Grouped-query attention; H must be a multiple of K. Softmax in float32.

  Keys and values come heads-first, ``[B, A, S, D]``: the dots then batch over the leading
  ``(b, k)`` as stored, where a ``[B, S, A, D]`` cache made XLA transpose-copy every layer's
  whole cache on every step (a third of a batch-8 step on CPU, ``python -m specjax.bench profile``).
  ``extra = (k_BxKxTxD, v_BxKxTxD, mask_BxTxT)``: more keys and values (new tokens not written
  to the cache, kv_cache.PendingKV) in the same softmax, without concatenating them to the cache.
  """
  b, t, h, d = q_BxTxHxD.shape
  kvh = k_BxAxSxD.shape[1]
  q = q_BxTxHxD.reshape(b, t, kvh, h // kvh, d)
  scale = d ** -0.5 if scale is None else scale
  s_BxAxRxTxS = jnp.einsum("btkgd,bksd->bkgts", q, k_BxAxSxD).astype(jnp.float32) * scale
  if bias_BxHxTxS is not None:  # T5's relative position bias
    s_BxAxRxTxS = s_BxAxRxTxS + bias_BxHxTxS.reshape(-1, kvh, h // kvh, *bias_BxHxTxS.shape[-2:])
  s_BxAxRxTxS = jnp.where(mask_BxTxS[:, None, None], s_BxAxRxTxS, -1e30)
  if extra is None:
    w = jax.nn.softmax(s_BxAxRxTxS, axis=-1).astype(v_BxAxSxD.dtype)
    out = jnp.einsum("bkgts,bksd->btkgd", w, v_BxAxSxD)
    return out.reshape(b, t, h, d)
  k_new, v_new, mask_new = extra
  s_new = jnp.einsum("btkgd,bknd->bkgtn", q, k_new).astype(jnp.float32) * scale
  s_new = jnp.where(mask_new[:, None, None], s_new, -1e30)
  w = jax.nn.softmax(jnp.concatenate([s_BxAxRxTxS, s_new], axis=-1), axis=-1).astype(v_BxAxSxD.dtype)
  s = k_BxAxSxD.shape[2]
  out = (jnp.einsum("bkgts,bksd->btkgd", w[..., :s], v_BxAxSxD)
         + jnp.einsum("bkgtn,bknd->btkgd", w[..., s:], v_new.astype(v_BxAxSxD.dtype)))
  return out.reshape(b, t, h, d)


class GatedMLP(nn.Module):
  """The MLP of every family: ``(act(x Wg) * (x Wu)) Wd`` (SwiGLU with silu, GeGLU with tanh-GELU);
  ``gated=False``: ``act(x Wu) Wd`` and no gate param (the original T5).

  Params ``gate``, ``up``, ``down``, created in that order: flax draws each param's init key in
  creation order, so random inits and checkpoint names stay those of every model built before.
  ``per_use_casts``: weights reach the compute dtype through :func:`compute_weight` (the decoder
  targets, whose narrow weights must not stay resident as float32 copies on CPU); otherwise a plain cast.
  """
  d_model: int
  mlp_dim: int
  dtype: str
  activation: Callable = jax.nn.silu
  gated: bool = True
  per_use_casts: bool = False

  @nn.compact
  def __call__(self, x):
    dt, e, m = jnp.dtype(self.dtype), self.d_model, self.mlp_dim
    cast = (lambda w, y: compute_weight(w, y, dt)) if self.per_use_casts else (lambda w, y: w.astype(dt))
    wg = param_with_axes(self, "gate", Init.normal(e ** -0.5), (e, m), ("embed", "mlp")) if self.gated else None
    wu = param_with_axes(self, "up", Init.normal(e ** -0.5), (e, m), ("embed", "mlp"))
    wd = param_with_axes(self, "down", Init.normal(m ** -0.5), (m, e), ("mlp", "embed"))
    if self.gated:
      h = self.activation(x @ cast(wg, x)) * (x @ cast(wu, x))
    else:
      h = self.activation(x @ cast(wu, x))
    return h @ cast(wd, h)
