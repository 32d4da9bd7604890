"""Decoder-only transformer: Llama/Mistral/Qwen/Gemma 3 style, one module, families as config fields.

The families differ by small named pieces, each a config field, never a family switch:
RMSNorm scale ``offset + w`` (Gemma: 1), optional sandwich norms after attention and MLP (Gemma's
four norms per block), q/k RMSNorm before RoPE (Gemma 3, Qwen3), q/k/v biases (Qwen2), embeddings
scaled by sqrt(d_model) (Gemma), the MLP's gate activation (SwiGLU or tanh-GELU GeGLU), the
attention scale, and a sliding window and RoPE theta per layer (Gemma 3: five local layers per
global one; Mistral: every layer local).

One ``__call__``: with ``cache=None`` it is a plain causal forward over the tokens (training,
``specjax.logits``); with a cache it writes the new keys/values after each row's committed length
and attends to the committed prefix plus whatever ``new_mask_TxT`` allows among the new tokens
(causal for chains, ancestors for trees); a ``[T, W > T]`` mask also covers the ``W - T``
uncommitted slots just before them (kv_cache.attention_mask). It never commits: callers do. With a
``kv_cache.PendingKV`` it reads the cache and returns the new keys/values in the pending buffers
instead of writing them (``[T, T]`` masks only).
"""
from __future__ import annotations

import dataclasses
import os

import flax.linen as nn
import jax
import jax.numpy as jnp

from specjax.models import kv_cache, layers
from specjax.models.layers import (ACTIVATIONS, GatedMLP, Init, RMSNorm, attend, compute_weight, heads_first,
                                   param_with_axes, rope)


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
  dtype: str = "float32"  # compute dtype; params keep their storage dtype (specjax.precision)
  cache_dtype: str = ""   # KV cache dtype; "": the compute dtype
  # family pieces (defaults: Llama)
  norm_offset: float = 0.0            # RMSNorm multiplies by (offset + w); Gemma stores w around 0
  sandwich_norms: bool = False        # extra RMSNorm on the attention and MLP outputs (Gemma 2/3)
  qk_norm: bool = False               # RMSNorm over head_dim on q and k before RoPE (Gemma 3, Qwen3)
  qkv_bias: bool = False              # biases on the q/k/v projections (Qwen2)
  scale_embeddings: bool = False      # embeddings times sqrt(d_model) (Gemma)
  mlp_activation: str = "silu"        # gate activation: silu (SwiGLU) | gelu_tanh (GeGLU)
  query_pre_attn_scalar: float = 0.0  # attention scale is this ** -0.5; 0: head_dim
  layer_windows: tuple[int, ...] = ()  # sliding window per layer, 0 = global; () = all global
  local_rope_theta: float = 0.0       # RoPE theta of windowed layers; 0: rope_theta
  # one lax.scan over the layers (params stacked [L, ...] under "layers"), so the compile does not
  # grow with depth; None: scanned on accelerators, unrolled on CPU, where slicing the stacked
  # weights copies them every step (``python -m specjax.bench compile_depth``). Checkpoints store
  # per-layer names either way (store.stack_layers / unstack_layers).
  scan_layers: bool | None = None

  def __post_init__(self):
    object.__setattr__(self, "layer_windows", tuple(int(w) for w in self.layer_windows))
    if self.num_heads % self.num_kv_heads:
      raise ValueError(f"num_heads={self.num_heads} is not a multiple of num_kv_heads={self.num_kv_heads}")
    if self.mlp_activation not in ACTIVATIONS:
      raise ValueError(f"mlp_activation={self.mlp_activation!r}; expected one of {sorted(ACTIVATIONS)}")
    if self.layer_windows and len(self.layer_windows) != self.num_layers:
      raise ValueError(f"layer_windows has {len(self.layer_windows)} entries for num_layers={self.num_layers}")
    if any(w < 0 for w in self.layer_windows):
      raise ValueError(f"layer_windows must be >= 0 (0 = global), got {self.layer_windows}")

  def window(self, layer: int) -> int:
    return self.layer_windows[layer] if self.layer_windows else 0

  def layer_rope_theta(self, layer: int) -> float:
    return self.local_rope_theta if self.window(layer) and self.local_rope_theta else self.rope_theta

  @property
  def scanned(self) -> bool:
    """Whether the layers run as one scan: ``scan_layers``; when it is None, ``$SPECJAX_SCAN_LAYERS``
    (``on`` / ``off``), else by platform (scanned except on CPU)."""
    if self.scan_layers is not None:
      return self.scan_layers
    env = os.environ.get("SPECJAX_SCAN_LAYERS", "auto")
    if env not in ("auto", "on", "off"):
      raise ValueError(f"SPECJAX_SCAN_LAYERS={env!r}; expected auto, on or off")
    return env == "on" if env != "auto" else jax.default_backend() != "cpu"

  @property
  def min_window(self) -> int:
    """The smallest sliding window (0: none): tree verification needs it deeper than the tree."""
    return min((w for w in self.layer_windows if w), default=0)


def _norm(cfg: DecoderConfig, name: str):
  return RMSNorm(cfg.norm_eps, offset=cfg.norm_offset, name=name)


class Attention(nn.Module):
  cfg: DecoderConfig
  layer: int = 0

  def _project(self, name, x_BxTxE, heads, axes):
    cfg, dt = self.cfg, jnp.dtype(self.cfg.dtype)
    w = param_with_axes(self, name, Init.normal(cfg.d_model ** -0.5), (cfg.d_model, heads, cfg.head_dim), axes)
    y = jnp.einsum("bte,ehd->bthd", x_BxTxE, compute_weight(w, x_BxTxE, dt))
    if cfg.qkv_bias:
      y = y + param_with_axes(self, f"{name}_bias", Init.zeros, (heads, cfg.head_dim), axes[1:]).astype(dt)
    return y

  @nn.compact
  def __call__(self, x_BxTxE, positions_BxT, mask_BxTxS, cache=None, layer=None, theta=None):
    """``layer`` / ``theta`` override the static ones (traced inside the scan over layers)."""
    cfg, dt = self.cfg, jnp.dtype(self.cfg.dtype)
    layer = self.layer if layer is None else layer
    q = self._project("q", x_BxTxE, cfg.num_heads, ("embed", "heads", "kv"))
    k = self._project("k", x_BxTxE, cfg.num_kv_heads, ("embed", "kv_heads", "kv"))
    v = self._project("v", x_BxTxE, cfg.num_kv_heads, ("embed", "kv_heads", "kv"))
    wo = param_with_axes(self, "o", Init.normal((cfg.num_heads * cfg.head_dim) ** -0.5),
                         (cfg.num_heads, cfg.head_dim, cfg.d_model), ("heads", "kv", "embed"))
    if cfg.qk_norm:
      q, k = _norm(cfg, "q_norm")(q), _norm(cfg, "k_norm")(k)
    theta = cfg.layer_rope_theta(layer) if theta is None else theta
    q, k = rope(q, positions_BxT, theta), rope(k, positions_BxT, theta)
    extra = None
    if cache is None:  # no cache: attend among the new tokens only
      k_all, v_all = heads_first(k), heads_first(v)
    elif isinstance(cache, kv_cache.PendingKV):  # read the cache, keep the new keys/values aside
      cache = cache.with_layer(layer, k, v)
      mask_BxTxS, mask_new_BxTxT = mask_BxTxS
      extra = (heads_first(k).astype(dt), heads_first(v).astype(dt), mask_new_BxTxT)
      k_all, v_all = cache.cache.k_LxBxAxSxD[layer], cache.cache.v_LxBxAxSxD[layer]
    else:
      cache = cache.replace(
          k_LxBxAxSxD=kv_cache.write_layer(cache.k_LxBxAxSxD, layer, k, cache.length_B),
          v_LxBxAxSxD=kv_cache.write_layer(cache.v_LxBxAxSxD, layer, v, cache.length_B))
      k_all, v_all = cache.k_LxBxAxSxD[layer], cache.v_LxBxAxSxD[layer]
    scale = cfg.query_pre_attn_scalar ** -0.5 if cfg.query_pre_attn_scalar else None
    out = attend(q, k_all.astype(dt), v_all.astype(dt), mask_BxTxS, scale=scale, extra=extra)
    # one [B, T, H*D] x [H*D, E] matmul: as an einsum over (h, d), XLA transposed wo every step
    b, t = out.shape[:2]
    out_flat = out.reshape(b, t, -1)  # [B, T, H*D]
    return out_flat @ compute_weight(wo, out_flat, dt).reshape(-1, cfg.d_model), cache


class Block(nn.Module):
  cfg: DecoderConfig
  layer: int = 0

  @nn.compact
  def __call__(self, x, positions_BxT, mask_BxTxS, cache=None, layer=None, theta=None):
    cfg = self.cfg
    h, cache = Attention(cfg, self.layer, name="attn")(_norm(cfg, "attn_norm")(x), positions_BxT, mask_BxTxS, cache,
                                                       layer, theta)
    if cfg.sandwich_norms:
      h = _norm(cfg, "post_attn_norm")(h)
    x = x + h
    h = GatedMLP(cfg.d_model, cfg.mlp_dim, cfg.dtype, ACTIVATIONS[cfg.mlp_activation], per_use_casts=True,
                 name="mlp")(_norm(cfg, "mlp_norm")(x))
    if cfg.sandwich_norms:
      h = _norm(cfg, "post_mlp_norm")(h)
    return x + h, cache


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
    # XLA:CPU gathers from a float32 copy of a bfloat16 table: tied, it is made per step, not held
    x = (layers.tied_to(embed, tokens_BxT) if layers.narrow_on_cpu(embed) else embed)[tokens_BxT].astype(dt)
    if cfg.scale_embeddings:
      x = x * jnp.asarray(cfg.d_model ** 0.5, dt)
    windows = sorted({cfg.window(i) for i in range(cfg.num_layers)})
    if cache is None:
      mask = jnp.broadcast_to(new_mask_TxT[None], (b, t, t))
      key_positions_BxS = positions_BxT
    else:
      mask = (kv_cache.committed_mask(cache.length_B, cache.max_len, t) if isinstance(cache, kv_cache.PendingKV)
              else kv_cache.attention_mask(cache.length_B, cache.max_len, new_mask_TxT))
      key_positions_BxS = jnp.broadcast_to(jnp.arange(cache.max_len)[None], (b, cache.max_len))
    masks = {w: kv_cache.sliding_window_mask(mask, positions_BxT, key_positions_BxS, w) for w in windows}
    if isinstance(cache, kv_cache.PendingKV):  # (committed slots, new tokens among themselves)
      new_BxTxT = jnp.broadcast_to(new_mask_TxT, (b, t, t))
      masks = {w: (masks[w], kv_cache.sliding_window_mask(new_BxTxT, positions_BxT, positions_BxT, w))
               for w in windows}
    if cfg.scanned:
      x, cache, layer_hidden = _scan_blocks(cfg, windows, masks, x, positions_BxT, cache, return_layer_hidden)
    else:
      layer_hidden = []
      for i in range(cfg.num_layers):
        x, cache = Block(cfg, i, name=f"layer_{i}")(x, positions_BxT, masks[cfg.window(i)], cache)
        layer_hidden.append(x)
    hidden = _norm(cfg, "final_norm")(x)
    if cfg.tie_embeddings:
      logits = hidden @ compute_weight(embed, hidden, dt).T
    else:
      head = param_with_axes(self, "lm_head", Init.normal(cfg.d_model ** -0.5), (cfg.d_model, cfg.vocab_size),
                             ("embed", "vocab"))
      logits = hidden @ compute_weight(head, hidden, dt)
    out = (logits.astype(jnp.float32), hidden, cache)
    return out + (layer_hidden,) if return_layer_hidden else out


def _scan_blocks(cfg: DecoderConfig, windows, masks, x, positions_BxT, cache, return_layer_hidden: bool):
  """The layers as one ``nn.scan`` over params stacked ``[L, ...]`` (module name ``layers``).

  A layer's window and RoPE theta are scanned inputs, its mask is picked from the (few) distinct
  windows' masks stacked once outside the loop, and the cache rides in the carry, so each layer
  writes its slice in place. Returns ``(x, cache, layer_hidden)``; ``layer_hidden`` is ``[L, B, T, E]``
  when asked for (feature taps index it like the unrolled list), else ``None``.
  """
  stacked = jax.tree.map(lambda *ms: jnp.stack(ms), *[masks[w] for w in windows])
  per_layer = (jnp.arange(cfg.num_layers, dtype=jnp.int32),
               jnp.asarray([windows.index(cfg.window(i)) for i in range(cfg.num_layers)], jnp.int32),
               jnp.asarray([cfg.layer_rope_theta(i) for i in range(cfg.num_layers)], jnp.float32))

  def body(block, carry, layer_xs, positions, masks_by_window):
    h, c = carry
    layer, window_index, theta = layer_xs
    mask = jax.tree.map(lambda m: m[window_index], masks_by_window)
    h, c = block(h, positions, mask, c, layer, theta)
    return (h, c), (h if return_layer_hidden else None)

  scan = nn.scan(body, variable_axes={"params": 0}, split_rngs={"params": True},
                 in_axes=(0, nn.broadcast, nn.broadcast), length=cfg.num_layers,
                 metadata_params={nn.PARTITION_NAME: "layers"})
  (x, cache), layer_hidden = scan(Block(cfg, name="layers"), (x, cache), per_layer, positions_BxT, stacked)
  return x, cache, layer_hidden
