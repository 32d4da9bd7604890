"""Decoder-only transformer, Chinchilla/Llama style: RMSNorm, RoPE, SwiGLU, optional GQA.

One module, one ``__call__``: with ``cache=None`` it is a plain causal forward over the tokens
(training, ``specjax.logits``); with a cache it writes the new keys/values after each row's
committed length and attends to the committed prefix plus whatever ``new_mask_TxT`` allows among
the new tokens (causal for chains, ancestors for trees); a ``[T, W > T]`` mask also covers the
``W - T`` uncommitted slots just before them (kv_cache.attention_mask). It never commits: callers do.
"""
from __future__ import annotations

import dataclasses

import flax.linen as nn
import jax
import jax.numpy as jnp

from specjax.models import kv_cache
from specjax.models.layers import Init, RMSNorm, attend, param_with_axes, rope


@dataclasses.dataclass(frozen=True)
class DecoderConfig:
  vocab_size: int = 256
  d_model: int = 128
  num_layers: int = 2
  num_heads: int = 4
  num_kv_heads: int = 4
  head_dim: int = 32
  mlp_dim: int = 384
  tie_embeddings: bool = True
  rope_theta: float = 10000.0
  norm_eps: float = 1e-6
  dtype: str = "float32"  # compute dtype; params stay float32

  def __post_init__(self):
    if self.num_heads % self.num_kv_heads:
      raise ValueError(f"num_heads={self.num_heads} is not a multiple of num_kv_heads={self.num_kv_heads}")


class Attention(nn.Module):
  cfg: DecoderConfig

  @nn.compact
  def __call__(self, x_BxTxE, positions_BxT, mask_BxTxS, cache=None, layer=0):
    cfg, dt = self.cfg, jnp.dtype(self.cfg.dtype)
    init = Init.normal(cfg.d_model ** -0.5)
    wq = param_with_axes(self, "q", init, (cfg.d_model, cfg.num_heads, cfg.head_dim), ("embed", "heads", "kv"))
    wk = param_with_axes(self, "k", init, (cfg.d_model, cfg.num_kv_heads, cfg.head_dim), ("embed", "kv_heads", "kv"))
    wv = param_with_axes(self, "v", init, (cfg.d_model, cfg.num_kv_heads, cfg.head_dim), ("embed", "kv_heads", "kv"))
    wo = param_with_axes(self, "o", Init.normal((cfg.num_heads * cfg.head_dim) ** -0.5),
                         (cfg.num_heads, cfg.head_dim, cfg.d_model), ("heads", "kv", "embed"))
    q = rope(jnp.einsum("bte,ehd->bthd", x_BxTxE, wq.astype(dt)), positions_BxT, cfg.rope_theta)
    k = rope(jnp.einsum("bte,ekd->btkd", x_BxTxE, wk.astype(dt)), positions_BxT, cfg.rope_theta)
    v = jnp.einsum("bte,ekd->btkd", x_BxTxE, wv.astype(dt))
    if cache is None:  # no cache: attend among the new tokens only
      k_all, v_all = k, v
    else:
      cache = cache.replace(
          k_LxBxSxKxD=kv_cache.write_layer(cache.k_LxBxSxKxD, layer, k, cache.length_B),
          v_LxBxSxKxD=kv_cache.write_layer(cache.v_LxBxSxKxD, layer, v, cache.length_B))
      k_all, v_all = cache.k_LxBxSxKxD[layer], cache.v_LxBxSxKxD[layer]
    out = attend(q, k_all.astype(dt), v_all.astype(dt), mask_BxTxS)
    return jnp.einsum("bthd,hde->bte", out, wo.astype(dt)), cache


class MLP(nn.Module):
  cfg: DecoderConfig

  @nn.compact
  def __call__(self, x_BxTxE):
    cfg, dt = self.cfg, jnp.dtype(self.cfg.dtype)
    wg = param_with_axes(self, "gate", Init.normal(cfg.d_model ** -0.5), (cfg.d_model, cfg.mlp_dim), ("embed", "mlp"))
    wu = param_with_axes(self, "up", Init.normal(cfg.d_model ** -0.5), (cfg.d_model, cfg.mlp_dim), ("embed", "mlp"))
    wd = param_with_axes(self, "down", Init.normal(cfg.mlp_dim ** -0.5), (cfg.mlp_dim, cfg.d_model), ("mlp", "embed"))
    h = jax.nn.silu(x_BxTxE @ wg.astype(dt)) * (x_BxTxE @ wu.astype(dt))
    return h @ wd.astype(dt)


class Block(nn.Module):
  cfg: DecoderConfig

  @nn.compact
  def __call__(self, x, positions_BxT, mask_BxTxS, cache=None, layer=0):
    h, cache = Attention(self.cfg, name="attn")(RMSNorm(self.cfg.norm_eps, name="attn_norm")(x),
                                                  positions_BxT, mask_BxTxS, cache, layer)
    x = x + h
    x = x + MLP(self.cfg, name="mlp")(RMSNorm(self.cfg.norm_eps, name="mlp_norm")(x))
    return x, cache


class Decoder(nn.Module):
  """Returns ``(logits_BxTxV float32, hidden_BxTxE, cache)``; hidden is after the final norm."""
  cfg: DecoderConfig

  @nn.compact
  def __call__(self, tokens_BxT, positions_BxT=None, cache: kv_cache.KVCache | None = None,
               new_mask_TxT=None, return_layer_hidden=False):
    cfg, dt = self.cfg, jnp.dtype(self.cfg.dtype)
    b, t = tokens_BxT.shape
    if new_mask_TxT is None:
      new_mask_TxT = kv_cache.causal_mask(t)
    if positions_BxT is None:
      start = jnp.zeros((b,), jnp.int32) if cache is None else cache.length_B
      positions_BxT = start[:, None] + jnp.arange(t)[None, :]
    embed = param_with_axes(self, "embed", Init.normal(cfg.d_model ** -0.5), (cfg.vocab_size, cfg.d_model), ("vocab", "embed"))
    x = embed.astype(dt)[tokens_BxT]
    if cache is None:
      mask = jnp.broadcast_to(new_mask_TxT[None], (b, t, t))
    else:
      mask = kv_cache.attention_mask(cache.length_B, cache.max_len, new_mask_TxT)
    layer_hidden = []
    for i in range(cfg.num_layers):
      x, cache = Block(cfg, name=f"layer_{i}")(x, positions_BxT, mask, cache, i)
      layer_hidden.append(x)
    hidden = RMSNorm(cfg.norm_eps, name="final_norm")(x)
    if cfg.tie_embeddings:
      logits = hidden @ embed.astype(dt).T
    else:
      head = param_with_axes(self, "lm_head", Init.normal(cfg.d_model ** -0.5), (cfg.d_model, cfg.vocab_size),
                             ("embed", "vocab"))
      logits = hidden @ head.astype(dt)
    out = (logits.astype(jnp.float32), hidden, cache)
    return out + (layer_hidden,) if return_layer_hidden else out


def _register():
  from specjax import checkpoint  # pylint: disable=import-outside-toplevel
  checkpoint.register_family("decoder", Decoder, DecoderConfig)


_register()
