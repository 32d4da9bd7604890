"""T5 encoder-decoder (the Leviathan et al. target/drafter pair), numerically HF's
``T5ForConditionalGeneration``: T5 v1.1 / FLAN-T5 and the original T5, as config fields.

Both: RMSNorm without mean subtraction, no biases, no 1/sqrt(d) attention scaling, bucketed
relative position bias owned by the first layer of each stack and shared by the rest, one input
embedding for both stacks. They differ in two places, set by :class:`T5Config` fields:

* feed-forward: v1.1 is gated-GELU (tanh), ``gelu_tanh(x @ gate) * (x @ up) @ down``
  (``gated_mlp=True``, ``mlp_activation="gelu_tanh"``); the original T5 is ``relu(x @ up) @ down``
  (``gated_mlp=False``, ``mlp_activation="relu"``);
* head: v1.1 has its own ``lm_head``; the original T5 reads the input embedding
  (``tie_embeddings=True``) after rescaling the decoder output by ``d_model**-0.5``
  (``scale_decoder_output=True``), as HF does for a tied T5.

Like ``Decoder``, one ``__call__``: with ``cache=None`` it runs the encoder and a causal decoder
pass; with a :class:`T5Cache` it is a decoder-only step that writes the new self-attention
keys/values after each row's committed length (never commits) and reads the cross-attention
keys/values that :meth:`T5.init_cache` computed once from the encoder.
"""
from __future__ import annotations

import dataclasses
import math

import flax
import flax.linen as nn
import jax
import jax.numpy as jnp

from specjax.models import kv_cache
from specjax.models.layers import ACTIVATIONS, GatedMLP, Init, RMSNorm, attend, heads_first, param_with_axes


# T5Config.mlp_activation -> the function; HF's dense_act_fn gelu_new (and gelu_pytorch_tanh) is gelu_tanh
MLP_ACTIVATIONS = {"gelu_tanh": ACTIVATIONS["gelu_tanh"], "relu": jax.nn.relu}


@dataclasses.dataclass(frozen=True)
class T5Config:
  vocab_size: int = 256
  d_model: int = 128
  num_encoder_layers: int = 2
  num_decoder_layers: int = 2
  num_heads: int = 4
  head_dim: int = 32  # HF's d_kv
  mlp_dim: int = 384  # HF's d_ff
  relative_attention_num_buckets: int = 32
  relative_attention_max_distance: int = 128
  norm_eps: float = 1e-6
  decoder_start_id: int = 0
  pad_id: int = 0
  eos_id: int = 1
  dtype: str = "float32"  # compute dtype; params keep their storage dtype (specjax.precision)
  cache_dtype: str = ""   # self-attention KV cache dtype; "": the compute dtype
  mlp_activation: str = "gelu_tanh"  # a key of MLP_ACTIVATIONS
  gated_mlp: bool = True              # act(x @ gate) * (x @ up); False: act(x @ up)
  tie_embeddings: bool = False        # the head is the input embedding (no lm_head param)
  scale_decoder_output: bool = False  # decoder output * d_model**-0.5 before the head

  def __post_init__(self):
    if self.mlp_activation not in MLP_ACTIVATIONS:
      raise ValueError(f"mlp_activation={self.mlp_activation!r}; expected one of {sorted(MLP_ACTIVATIONS)}")
    if self.relative_attention_num_buckets < 4:
      raise ValueError(f"relative_attention_num_buckets={self.relative_attention_num_buckets} must be >= 4")
    if min(self.num_encoder_layers, self.num_decoder_layers) < 1:
      raise ValueError(f"T5 needs >= 1 layer per stack, got encoder={self.num_encoder_layers}, "
                       f"decoder={self.num_decoder_layers}")

  # Generic decoding code reads these names from any family's config.
  @property
  def num_layers(self) -> int:
    return self.num_decoder_layers

  @property
  def num_kv_heads(self) -> int:
    return self.num_heads


@flax.struct.dataclass
class T5Cache:
  """Decoder self-attention KV cache plus the encoder's cross-attention keys/values (fixed)."""
  self_attn: kv_cache.KVCache
  cross_k_LxBxAxSxD: jax.Array
  cross_v_LxBxAxSxD: jax.Array
  encoder_mask_BxS: jax.Array  # bool: real (non-pad) encoder tokens

  @property
  def length_B(self) -> jax.Array:
    return self.self_attn.length_B

  @property
  def max_len(self) -> int:
    return self.self_attn.max_len

  @property
  def batch_size(self) -> int:
    return self.self_attn.batch_size

  def with_length(self, length_B) -> "T5Cache":
    """Commit or roll back the decoder's self-attention: only the per-row length changes."""
    return self.replace(self_attn=self.self_attn.with_length(length_B))


def relative_position_bucket(relative_position, bidirectional: bool, num_buckets: int = 32,
                             max_distance: int = 128):
  """HF/Mesh-TF ``_relative_position_bucket``; relative_position = key_pos - query_pos."""
  rel = jnp.asarray(relative_position, jnp.int32)
  bucket = jnp.zeros_like(rel)
  if bidirectional:
    num_buckets //= 2
    bucket = bucket + (rel > 0).astype(jnp.int32) * num_buckets
    rel = jnp.abs(rel)
  else:  # the causal decoder only looks back; future offsets share bucket 0
    rel = -jnp.minimum(rel, 0)
  max_exact = num_buckets // 2
  # float32 like torch; max(rel, 1) keeps log finite in the branch `where` discards
  log_ratio = jnp.log(jnp.maximum(rel, 1).astype(jnp.float32) / max_exact) / math.log(max_distance / max_exact)
  large = max_exact + (log_ratio * (num_buckets - max_exact)).astype(jnp.int32)
  large = jnp.minimum(large, num_buckets - 1)
  return bucket + jnp.where(rel < max_exact, rel, large)


class Attention(nn.Module):
  """Unscaled multi-head attention; ``has_rel_bias`` makes it own the stack's bias table."""
  cfg: T5Config
  has_rel_bias: bool = False
  bidirectional: bool = False

  def setup(self):
    cfg = self.cfg
    e, h, d = cfg.d_model, cfg.num_heads, cfg.head_dim
    # HF/Mesh-TF init: the missing 1/sqrt(d) is folded into q's init scale
    self.q = param_with_axes(self, "q", Init.normal((e * d) ** -0.5), (e, h, d), ("embed", "heads", "kv"))
    self.k = param_with_axes(self, "k", Init.normal(e ** -0.5), (e, h, d), ("embed", "kv_heads", "kv"))
    self.v = param_with_axes(self, "v", Init.normal(e ** -0.5), (e, h, d), ("embed", "kv_heads", "kv"))
    self.o = param_with_axes(self, "o", Init.normal((h * d) ** -0.5), (h, d, e), ("heads", "kv", "embed"))
    if self.has_rel_bias:
      self.rel_bias = param_with_axes(self, "rel_bias", Init.normal(e ** -0.5),
                                      (cfg.relative_attention_num_buckets, h), ("relpos_buckets", "heads"))

  def kv(self, x_BxSxE):
    """Keys and values ``[B, S, H, D]`` (the cache's write layout; attend takes heads first)."""
    dt = jnp.dtype(self.cfg.dtype)
    return (jnp.einsum("bse,ehd->bshd", x_BxSxE, self.k.astype(dt)),
            jnp.einsum("bse,ehd->bshd", x_BxSxE, self.v.astype(dt)))

  def position_bias(self, q_pos_BxT, k_pos_BxS):
    """Float32 ``[B, H, T, S]`` from absolute query and key positions."""
    cfg = self.cfg
    bucket_BxTxS = relative_position_bucket(k_pos_BxS[:, None, :] - q_pos_BxT[:, :, None], self.bidirectional,
                                            cfg.relative_attention_num_buckets,
                                            cfg.relative_attention_max_distance)
    return jnp.transpose(self.rel_bias[bucket_BxTxS], (0, 3, 1, 2)).astype(jnp.float32)

  def __call__(self, x_BxTxE, k_BxHxSxD, v_BxHxSxD, mask_BxTxS, bias_BxHxTxS=None):
    dt = jnp.dtype(self.cfg.dtype)
    q = jnp.einsum("bte,ehd->bthd", x_BxTxE, self.q.astype(dt))
    out = attend(q, k_BxHxSxD.astype(dt), v_BxHxSxD.astype(dt), mask_BxTxS, bias_BxHxTxS, scale=1.0)
    b, t = out.shape[:2]  # one [B, T, H*D] x [H*D, E] matmul (an einsum over (h, d) transposed o per step)
    return out.reshape(b, t, -1) @ self.o.astype(dt).reshape(-1, self.cfg.d_model)


class Block(nn.Module):
  cfg: T5Config
  is_decoder: bool
  has_rel_bias: bool = False

  def setup(self):
    cfg = self.cfg
    self.self_attn = Attention(cfg, self.has_rel_bias, bidirectional=not self.is_decoder)
    self.self_attn_norm = RMSNorm(cfg.norm_eps)
    if self.is_decoder:
      self.cross_attn = Attention(cfg)  # no position bias in cross-attention
      self.cross_attn_norm = RMSNorm(cfg.norm_eps)
    # gated: gate/up/down = HF's wi_0/wi_1/wo (v1.1); not gated: up/down = HF's wi/wo (the original T5)
    self.mlp = GatedMLP(cfg.d_model, cfg.mlp_dim, cfg.dtype, MLP_ACTIVATIONS[cfg.mlp_activation], cfg.gated_mlp)
    self.mlp_norm = RMSNorm(cfg.norm_eps)

  def __call__(self, x, mask_BxTxS, bias_BxHxTxS, cache=None, layer=0, cross=None):
    """``cross`` = (k_BxHxSxD, v_BxHxSxD, mask_BxTxS) for decoder blocks."""
    h = self.self_attn_norm(x)
    k, v = self.self_attn.kv(h)
    if cache is not None:  # write after each row's committed length; attend over the whole buffer
      cache = cache.replace(
          k_LxBxAxSxD=kv_cache.write_layer(cache.k_LxBxAxSxD, layer, k, cache.length_B),
          v_LxBxAxSxD=kv_cache.write_layer(cache.v_LxBxAxSxD, layer, v, cache.length_B))
      k, v = cache.k_LxBxAxSxD[layer], cache.v_LxBxAxSxD[layer]
    else:
      k, v = heads_first(k), heads_first(v)
    x = x + self.self_attn(h, k, v, mask_BxTxS, bias_BxHxTxS)
    if self.is_decoder:
      x = x + self.cross_attn(self.cross_attn_norm(x), *cross)
    x = x + self.mlp(self.mlp_norm(x))
    return x, cache


class Stack(nn.Module):
  """Encoder or decoder stack; layer 0's self-attention owns the bias table for all layers."""
  cfg: T5Config
  is_decoder: bool

  def setup(self):
    n = self.cfg.num_decoder_layers if self.is_decoder else self.cfg.num_encoder_layers
    self.layers = [Block(self.cfg, self.is_decoder, has_rel_bias=i == 0) for i in range(n)]
    self.final_norm = RMSNorm(self.cfg.norm_eps)

  def cross_kv(self, enc_BxSxE):
    """Stacked cross-attention keys/values ``[L, B, H, S, D]`` of every decoder layer (heads first)."""
    kvs = [blk.cross_attn.kv(enc_BxSxE) for blk in self.layers]
    return jnp.stack([heads_first(k) for k, _ in kvs]), jnp.stack([heads_first(v) for _, v in kvs])

  def __call__(self, x, q_pos_BxT, k_pos_BxS, mask_BxTxS, cache=None, cross=None):
    bias = self.layers[0].self_attn.position_bias(q_pos_BxT, k_pos_BxS)
    for i, blk in enumerate(self.layers):
      layer_cross = None if cross is None else (cross[0][i], cross[1][i], cross[2])
      x, cache = blk(x, mask_BxTxS, bias, cache, i, layer_cross)
    return self.final_norm(x), cache


class T5(nn.Module):
  """Returns ``(logits_BxTxV float32, hidden_BxTxE, cache)``; hidden is the decoder's final norm."""
  cfg: T5Config
  is_encoder_decoder = True  # class attribute, not a module field

  def setup(self):
    cfg = self.cfg
    self.embed = param_with_axes(self, "embed", Init.normal(1.0), (cfg.vocab_size, cfg.d_model), ("vocab", "embed"))
    self.encoder = Stack(cfg, is_decoder=False)
    self.decoder = Stack(cfg, is_decoder=True)
    if not cfg.tie_embeddings:
      self.lm_head = param_with_axes(self, "lm_head", Init.normal(cfg.d_model ** -0.5),
                                     (cfg.d_model, cfg.vocab_size), ("embed", "vocab"))

  def head(self, hidden_BxTxE):
    """Logits (compute dtype) of the decoder's final-norm output: ``lm_head``, or the embedding
    when tied, after the ``d_model**-0.5`` rescale where the config asks for it."""
    dt = jnp.dtype(self.cfg.dtype)
    if self.cfg.scale_decoder_output:
      hidden_BxTxE = hidden_BxTxE * (self.cfg.d_model ** -0.5)
    if self.cfg.tie_embeddings:
      return hidden_BxTxE @ self.embed.astype(dt).T
    return hidden_BxTxE @ self.lm_head.astype(dt)

  def encode(self, encoder_tokens_BxS, encoder_lengths_B=None):
    """Encoder hidden ``[B, S, E]`` and its padding mask ``[B, S]`` (right padding)."""
    encoder_tokens_BxS = jnp.asarray(encoder_tokens_BxS, jnp.int32)
    b, s = encoder_tokens_BxS.shape
    if encoder_lengths_B is None:
      encoder_lengths_B = jnp.full((b,), s, jnp.int32)
    pos_BxS = jnp.broadcast_to(jnp.arange(s)[None], (b, s))
    mask_BxS = pos_BxS < jnp.asarray(encoder_lengths_B, jnp.int32)[:, None]
    x = self.embed.astype(jnp.dtype(self.cfg.dtype))[encoder_tokens_BxS]
    mask_BxSxS = jnp.broadcast_to(mask_BxS[:, None, :], (b, s, s))  # pad queries are never read
    hidden, _ = self.encoder(x, pos_BxS, pos_BxS, mask_BxSxS)
    return hidden, mask_BxS

  def init_cache(self, encoder_tokens_BxS, encoder_lengths_B, max_len: int) -> T5Cache:
    """Runs the encoder once and caches every decoder layer's cross-attention keys/values."""
    cfg = self.cfg
    enc_BxSxE, mask_BxS = self.encode(encoder_tokens_BxS, encoder_lengths_B)
    cross_k, cross_v = self.decoder.cross_kv(enc_BxSxE)
    self_attn = kv_cache.init_cache(cfg.num_decoder_layers, enc_BxSxE.shape[0], max_len, cfg.num_heads,
                                    cfg.head_dim, jnp.dtype(cfg.cache_dtype or cfg.dtype))
    return T5Cache(self_attn, cross_k, cross_v, mask_BxS)

  def __call__(self, tokens_BxT, positions_BxT=None, cache: T5Cache | None = None, new_mask_TxT=None,
               encoder_tokens=None, encoder_lengths=None):
    dt = jnp.dtype(self.cfg.dtype)
    b, t = tokens_BxT.shape
    if new_mask_TxT is None:
      new_mask_TxT = kv_cache.causal_mask(t)
    if cache is None:
      if encoder_tokens is None:
        raise ValueError("T5 without a cache needs encoder_tokens= (or build one with init_cache)")
      enc_BxSxE, enc_mask_BxS = self.encode(encoder_tokens, encoder_lengths)
      cross_k, cross_v = self.decoder.cross_kv(enc_BxSxE)
      start_B = jnp.zeros((b,), jnp.int32)
    else:
      cross_k, cross_v, enc_mask_BxS = cache.cross_k_LxBxAxSxD, cache.cross_v_LxBxAxSxD, cache.encoder_mask_BxS
      start_B = cache.length_B
    if positions_BxT is None:
      positions_BxT = start_B[:, None] + jnp.arange(t)[None, :]
    positions_BxT = jnp.asarray(positions_BxT, jnp.int32)
    if cache is None:
      self_mask = jnp.broadcast_to(new_mask_TxT[None], (b, t, t))
      k_pos_BxS = positions_BxT
    else:
      self_mask = kv_cache.attention_mask(cache.length_B, cache.max_len, new_mask_TxT)
      # committed slot s sits at position s; new slot length+u at positions[u] (trees repeat depths)
      slot_BxS = jnp.broadcast_to(jnp.arange(cache.max_len)[None], (b, cache.max_len))
      rel_BxS = slot_BxS - cache.length_B[:, None]
      new_pos_BxS = jnp.take_along_axis(positions_BxT, jnp.clip(rel_BxS, 0, t - 1), axis=1)
      k_pos_BxS = jnp.where((rel_BxS >= 0) & (rel_BxS < t), new_pos_BxS, slot_BxS)
    cross_mask_BxTxS = jnp.broadcast_to(enc_mask_BxS[:, None, :], (b, t, enc_mask_BxS.shape[1]))
    x = self.embed.astype(dt)[tokens_BxT]
    hidden, self_attn = self.decoder(x, positions_BxT, k_pos_BxS, self_mask,
                                     None if cache is None else cache.self_attn,
                                     (cross_k, cross_v, cross_mask_BxTxS))
    logits = self.head(hidden)
    if cache is not None:
      cache = cache.replace(self_attn=self_attn)
    return logits.astype(jnp.float32), hidden, cache
