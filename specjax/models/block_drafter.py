"""DFlash's block drafter: a small non-autoregressive transformer conditioned on target features.

Input: a block ``[anchor, MASK, ..., MASK]`` (``B`` positions); output: a token for every MASK in
one pass (position i of the block predicts the token at position i). Within the block attention is
bidirectional. The target's hidden states from several layers are concatenated per position and
fused (linear + RMSNorm) into one context feature ``c``; every draft layer projects ``c`` with its
own key/value weights into EXTRA keys and values that the block attends to, like a KV cache of the
prefix. ``c`` is never added to the block's input stream. Embeddings and the LM head are the
target's (frozen); the module owns only the mask embedding, the fusion and the draft layers.
"""
from __future__ import annotations

import dataclasses

import flax.linen as nn
import jax.numpy as jnp
import numpy as np

from specjax.models import heads, layers
from specjax.models.layers import Init, RMSNorm, attend, heads_first, param_with_axes, rope


@dataclasses.dataclass(frozen=True)
class BlockDrafterConfig:
  vocab_size: int = 256
  d_model: int = 128            # must equal the target's d_model (shares its embeddings / LM head)
  num_layers: int = 1
  num_heads: int = 4
  num_kv_heads: int = 4
  head_dim: int = 32
  mlp_dim: int = 384
  target_layers: tuple = (0,)   # target layers whose outputs are fused into the context feature
  block_size: int = 8           # trained block size B (anchor + B - 1 masks); decode with gamma = B - 1
  rope_theta: float = 10000.0
  norm_eps: float = 1e-6
  dtype: str = "float32"

  def __post_init__(self):
    heads.check_feature_config(self)
    if self.block_size < 2:
      raise ValueError(f"block_size must be >= 2 (anchor + at least one mask), got {self.block_size}")


def spaced_layers(num_target_layers: int, n: int) -> tuple:
  """``n`` target layers spread from shallow to deep (DFlash fuses several depths)."""
  n = min(n, num_target_layers)
  return tuple(int(round(x)) for x in np.linspace(0, num_target_layers - 1, n))


class DraftLayer(nn.Module):
  cfg: BlockDrafterConfig

  def setup(self):
    cfg = self.cfg
    e, h, k, d, m = cfg.d_model, cfg.num_heads, cfg.num_kv_heads, cfg.head_dim, cfg.mlp_dim
    init = Init.normal(e ** -0.5)
    self.wq = param_with_axes(self, "q", init, (e, h, d), ("embed", "heads", "kv"))
    self.wk = param_with_axes(self, "k", init, (e, k, d), ("embed", "kv_heads", "kv"))
    self.wv = param_with_axes(self, "v", init, (e, k, d), ("embed", "kv_heads", "kv"))
    self.wo = param_with_axes(self, "o", Init.normal((h * d) ** -0.5), (h, d, e), ("heads", "kv", "embed"))
    self.mlp = layers.GatedMLP(e, m, cfg.dtype)
    self.attn_norm = RMSNorm(cfg.norm_eps)
    self.mlp_norm = RMSNorm(cfg.norm_eps)

  def kv(self, x_BxTxE, positions_BxT):
    """Keys/values of a stream (the block's, or the fused context feature's: the extra KV)."""
    dt = jnp.dtype(self.cfg.dtype)
    k = rope(jnp.einsum("bte,ekd->btkd", x_BxTxE, self.wk.astype(dt)), positions_BxT, self.cfg.rope_theta)
    return k, jnp.einsum("bte,ekd->btkd", x_BxTxE, self.wv.astype(dt))

  def __call__(self, x_BxYxE, positions_BxY, ctx_k_BxSxAxD, ctx_v_BxSxAxD, mask_BxYxSY):
    """``mask[:, :, :S]`` picks visible context slots, ``mask[:, :, S:]`` visible block positions."""
    dt = jnp.dtype(self.cfg.dtype)
    h = self.attn_norm(x_BxYxE)
    q = rope(jnp.einsum("bte,ehd->bthd", h, self.wq.astype(dt)), positions_BxY, self.cfg.rope_theta)
    k, v = self.kv(h, positions_BxY)
    k_all = jnp.concatenate([ctx_k_BxSxAxD.astype(dt), k], axis=1)
    v_all = jnp.concatenate([ctx_v_BxSxAxD.astype(dt), v], axis=1)
    out = attend(q, heads_first(k_all), heads_first(v_all), mask_BxYxSY)
    x = x_BxYxE + jnp.einsum("bthd,hde->bte", out, self.wo.astype(dt))
    return x + self.mlp(self.mlp_norm(x))


class BlockDrafter(nn.Module):
  cfg: BlockDrafterConfig
  family = "block_drafter"

  def setup(self):
    cfg = self.cfg
    f = len(cfg.target_layers) * cfg.d_model
    self.fuse = param_with_axes(self, "fuse", Init.normal(f ** -0.5), (f, cfg.d_model), ("mlp", "embed"))
    self.fuse_norm = RMSNorm(cfg.norm_eps)
    self.mask_embed = param_with_axes(self, "mask_embed", Init.normal(1.0), (cfg.d_model,), ("embed",))
    self.layers = [DraftLayer(cfg, name=f"layer_{i}") for i in range(cfg.num_layers)]
    self.final_norm = RMSNorm(cfg.norm_eps)

  def context(self, feat_BxTxF, positions_BxT):
    """Fused target features -> every layer's extra keys/values ``[L, B, T, K, D]`` (twice)."""
    dt = jnp.dtype(self.cfg.dtype)
    c = self.fuse_norm(feat_BxTxF.astype(dt) @ self.fuse.astype(dt))
    kvs = [layer.kv(c, positions_BxT) for layer in self.layers]
    return jnp.stack([k for k, _ in kvs]), jnp.stack([v for _, v in kvs])

  def __call__(self, tok_emb_BxYxE, is_mask_BxY, positions_BxY, ctx_k_LxBxSxAxD, ctx_v_LxBxSxAxD, mask_BxYxSY):
    """Hidden states after the final norm, ``[B, Y, E]``; logits are ``hidden @ target unembed``."""
    dt = jnp.dtype(self.cfg.dtype)
    x = jnp.where(is_mask_BxY[..., None], self.mask_embed.astype(dt), tok_emb_BxYxE.astype(dt))
    for i, layer in enumerate(self.layers):
      x = layer(x, positions_BxY, ctx_k_LxBxSxAxD[i], ctx_v_LxBxSxAxD[i], mask_BxYxSY)
    return self.final_norm(x)

  def init_all(self, feat_BxTxF, tok_emb_BxYxE):
    b, t, _ = feat_BxTxF.shape
    q = tok_emb_BxYxE.shape[1]
    ck, cv = self.context(feat_BxTxF, jnp.zeros((b, t), jnp.int32))
    return self(tok_emb_BxYxE, jnp.zeros((b, q), bool), jnp.zeros((b, q), jnp.int32), ck, cv,
                jnp.ones((b, q, t + q), bool))

  def dummy_inputs(self):
    f = len(self.cfg.target_layers) * self.cfg.d_model
    return (jnp.zeros((1, 2, f)), jnp.zeros((1, 2, self.cfg.d_model))), {"method": "init_all"}




def block_mask(ctx_visible_BxYxS, block_id_Y):
  """Full attention mask: the given context slots, plus bidirectional attention inside each block."""
  same_YxY = block_id_Y[:, None] == block_id_Y[None, :]
  b = ctx_visible_BxYxS.shape[0]
  return jnp.concatenate([ctx_visible_BxYxS, jnp.broadcast_to(same_YxY, (b,) + same_YxY.shape)], axis=-1)


def features(layer_hidden, target_layers):
  """Concatenates the chosen target layers' outputs along the last axis: ``[B, T, n * E]``."""
  return jnp.concatenate([layer_hidden[i] for i in target_layers], axis=-1)
