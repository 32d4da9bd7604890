"""EAGLE-3's draft head: one decoder layer of the target's width that autoregresses on features.

Slot ``t`` of the head's sequence pairs ``h_t`` with the embedding of token ``x_{t+1}`` and
predicts ``x_{t+2}``; it sits at position ``t``. ``h_t`` is ``fc(F_t)`` -- the fused outputs of
three target layers at position ``t`` (EAGLE-3: low, middle, high) -- when the target has seen
``x_t``, and the head's own output ``g`` of the previous slot when ``x_{t+1}`` is a draft.
The layer: ``u = [norm(emb) ; norm(h)]`` (width 2E) gives the queries, keys and values;
``g = h + attn(u)``, ``g += mlp(norm(g))``; logits ``= lm_head(norm(g))`` over the head's own
(optionally truncated, ``draft_vocab_size``) vocabulary. Embeddings are the target's, frozen.

Decoding (:class:`specjax.drafters.Eagle`) keeps the head's keys/values in a one-layer
:class:`specjax.models.kv_cache.KVCache`. Training (:meth:`EagleHead.unrolled`, EAGLE-3's
"training-time test") runs ``depth`` steps over every slot at once, each seeing the true keys of
the committed prefix and the keys its own earlier draft steps wrote, exactly as decoding does.
"""
from __future__ import annotations

import dataclasses

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from specjax.models import heads, kv_cache, layers
from specjax.models.layers import Init, RMSNorm, attend, param_with_axes, rope


@dataclasses.dataclass(frozen=True)
class EagleConfig:
  vocab_size: int = 256          # the target's
  draft_vocab_size: int = 0      # 0: the target's whole vocabulary; K: a truncated head (d2t map in the drafter)
  d_model: int = 128             # must equal the target's d_model
  num_heads: int = 4
  num_kv_heads: int = 4
  head_dim: int = 32
  mlp_dim: int = 384
  target_layers: tuple = (0,)    # target layers whose outputs are fused by fc
  rope_theta: float = 10000.0
  norm_eps: float = 1e-6
  dtype: str = "float32"

  def __post_init__(self):
    heads.check_feature_config(self)

  @property
  def out_vocab(self) -> int:
    return self.draft_vocab_size or self.vocab_size


def eagle3_layers(num_target_layers: int) -> tuple:
  """EAGLE-3's feature layers: the inputs of layers 2, L/2 and L-3, i.e. the outputs of 1, L/2-1, L-4.
  Shallow targets where those collide get three evenly spread layers instead."""
  n = num_target_layers
  picks = sorted({min(max(i, 0), n - 1) for i in (1, n // 2 - 1, n - 4)})
  if len(picks) == 3 or n < 3:
    return tuple(picks)
  return tuple(sorted({int(round(x)) for x in np.linspace(0, n - 1, 3)}))


class EagleHead(nn.Module):
  cfg: EagleConfig
  family = "eagle3"

  def setup(self):
    cfg = self.cfg
    e, h, k, d = cfg.d_model, cfg.num_heads, cfg.num_kv_heads, cfg.head_dim
    f = len(cfg.target_layers) * e
    self.fc = param_with_axes(self, "fc", Init.normal(f ** -0.5), (f, e), ("fused", "embed"))
    init2 = Init.normal((2 * e) ** -0.5)
    self.wq = param_with_axes(self, "q", init2, (2 * e, h, d), ("fused", "heads", "kv"))
    self.wk = param_with_axes(self, "k", init2, (2 * e, k, d), ("fused", "kv_heads", "kv"))
    self.wv = param_with_axes(self, "v", init2, (2 * e, k, d), ("fused", "kv_heads", "kv"))
    self.wo = param_with_axes(self, "o", Init.normal((h * d) ** -0.5), (h * d, e), ("heads", "embed"))
    self.embed_norm = RMSNorm(cfg.norm_eps)
    self.hidden_norm = RMSNorm(cfg.norm_eps)
    self.mlp_norm = RMSNorm(cfg.norm_eps)
    self.final_norm = RMSNorm(cfg.norm_eps)
    self.mlp = layers.GatedMLP(e, cfg.mlp_dim, cfg.dtype)
    self.lm_head = param_with_axes(self, "lm_head", Init.normal(e ** -0.5), (e, cfg.out_vocab), ("embed", "vocab"))

  def project(self, feat_BxTxF):
    """``fc``: the fused target features, ``[B, T, E]``."""
    dt = jnp.dtype(self.cfg.dtype)
    return feat_BxTxF.astype(dt) @ self.fc.astype(dt)

  def _qkv(self, h_BxTxE, emb_BxTxE, positions_BxT):
    dt, cfg = jnp.dtype(self.cfg.dtype), self.cfg
    u = jnp.concatenate([self.embed_norm(emb_BxTxE.astype(dt)), self.hidden_norm(h_BxTxE.astype(dt))], -1)
    q = rope(jnp.einsum("btf,fhd->bthd", u, self.wq.astype(dt)), positions_BxT, cfg.rope_theta)
    k = rope(jnp.einsum("btf,fkd->btkd", u, self.wk.astype(dt)), positions_BxT, cfg.rope_theta)
    return q, k, jnp.einsum("btf,fkd->btkd", u, self.wv.astype(dt))

  def _out(self, h_BxTxE, attn_BxTxHxD):
    dt = jnp.dtype(self.cfg.dtype)
    b, t = attn_BxTxHxD.shape[:2]
    g = h_BxTxE.astype(dt) + attn_BxTxHxD.reshape(b, t, -1) @ self.wo.astype(dt)
    g = g + self.mlp(self.mlp_norm(g))
    return g, (self.final_norm(g) @ self.lm_head.astype(dt)).astype(jnp.float32)

  def __call__(self, h_BxTxE, emb_BxTxE, positions_BxT, cache: kv_cache.KVCache, new_mask_TxU):
    """Writes the T slots' keys/values at ``cache.length`` (not committed) and attends as the
    decoder does (``kv_cache.attention_mask``). Returns ``(g_BxTxE, logits_BxTxV', cache)``."""
    q, k, v = self._qkv(h_BxTxE, emb_BxTxE, positions_BxT)
    cache = cache.replace(k_LxBxAxSxD=kv_cache.write_layer(cache.k_LxBxAxSxD, 0, k, cache.length_B),
                          v_LxBxAxSxD=kv_cache.write_layer(cache.v_LxBxAxSxD, 0, v, cache.length_B))
    mask = kv_cache.attention_mask(cache.length_B, cache.max_len, new_mask_TxU)
    dt = jnp.dtype(self.cfg.dtype)
    out = attend(q, cache.k_LxBxAxSxD[0].astype(dt), cache.v_LxBxAxSxD[0].astype(dt), mask)
    g, logits = self._out(h_BxTxE, out)
    return g, logits, cache

  def unrolled(self, feat_BxTxF, emb_next_BxTxE, depth: int):
    """Training-time test: logits ``[depth, B, T, V']`` of draft steps 1..depth at every slot.

    Step j at slot s simulates drafting after a committed prefix ending at slot c = s - j + 1:
    its input is ``(g of step j-1 at slot s-1, x_{s+1})`` (step 1: ``fc(F_s)``), and it attends to
    step 1's keys at slots ``<= c`` plus step i's key at slot ``c + i - 1`` for i = 2..j -- what the
    head cache holds at that point of a real draft. Every step predicts ``x_{s+2}``; slot s is valid
    for step j when ``s >= j - 1``.
    """
    b, t, _ = feat_BxTxF.shape
    pos_BxT = jnp.broadcast_to(jnp.arange(t)[None], (b, t))
    h = self.project(feat_BxTxF)
    keys, values, out = [], [], []
    scale = self.cfg.head_dim ** -0.5
    g_k = self.cfg.num_heads // self.cfg.num_kv_heads
    for j in range(1, depth + 1):
      q, k, v = self._qkv(h, emb_next_BxTxE, pos_BxT)
      keys.append(jnp.repeat(k, g_k, axis=2)), values.append(jnp.repeat(v, g_k, axis=2))
      # step 1's keys, causal up to c = s - j + 1
      s1 = jnp.einsum("bshd,buhd->bhsu", q, keys[0]).astype(jnp.float32) * scale
      vis = jnp.arange(t)[None, :] <= jnp.arange(t)[:, None] - (j - 1)
      s1 = jnp.where(vis[None, None], s1, -1e30)
      # step i's key at slot s - (j - i): the diagonal of step i, shifted by j - i
      diag = [jnp.einsum("bshd,bshd->bhs", q, _shift(keys[i - 1], j - i)).astype(jnp.float32)[..., None] * scale
              for i in range(2, j + 1)]
      w = jax.nn.softmax(jnp.concatenate([s1] + diag, -1), -1)
      attn = jnp.einsum("bhsu,buhd->bshd", w[..., :t].astype(v.dtype), values[0])
      for n, i in enumerate(range(2, j + 1)):
        attn = attn + w[..., t + n].transpose(0, 2, 1)[..., None].astype(v.dtype) * _shift(values[i - 1], j - i)
      g, logits = self._out(h, attn)
      out.append(logits)
      h = _shift(g, 1)  # step j+1 at slot s reads step j's output at slot s-1
    return jnp.stack(out)

  def init_all(self, feat_BxTxF, emb_BxTxE):
    return self.unrolled(feat_BxTxF, emb_BxTxE, 2)

  def dummy_inputs(self):
    f = len(self.cfg.target_layers) * self.cfg.d_model
    return (jnp.zeros((1, 3, f)), jnp.zeros((1, 3, self.cfg.d_model))), {"method": "init_all"}


def _shift(x_BxTx, n: int):
  """``out[:, s] = x[:, s - n]`` (zeros for s < n)."""
  if n == 0:
    return x_BxTx
  return jnp.concatenate([jnp.zeros_like(x_BxTx[:, :n]), x_BxTx[:, :-n]], axis=1)


