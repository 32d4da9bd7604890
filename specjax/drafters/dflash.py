"""DFlash: a block drafter that fills ``gamma`` masks after the anchor in ONE forward pass.

The drafter keeps, per draft layer, a cache of extra keys/values projected from the fused target
features of every committed position (DFlash's "target features as KV memory"). Bookkeeping for a
row holding ``L`` tokens: the target has features for positions ``0 .. L-2`` (it has not seen the
last token ``x_{L-1}`` yet); the block is ``[x_{L-1}, MASK * gamma]`` at positions ``L-1 ..
L-1+gamma`` and attends to context slots ``< L-1`` and to the whole block. Each MASK's distribution
q_i depends only on the context, not on the other drafts, so drawing every draft independently from
its own q_i and handing those q to the rejection rule is exact; greedy is exact match.

Features reach the drafter through ``commit``: this drafter sets ``feature_layers`` and the
speculative loop then passes the chosen target layers' outputs at the verified positions,
concatenated on the last axis (``[B, gamma+1, n_layers * E]``), instead of the final hidden state.
``init`` takes the prompt's features from the target's prefill.
Decode with ``gamma = block_size - 1``: other block sizes run exactly, but were not trained for.
Train on sequences as long as the contexts you decode: the block reads the context through RoPE'd
keys, and query-key distances never seen in training draft worse (measured on the demo).
"""
from __future__ import annotations

import flax
import jax
import jax.numpy as jnp

from specjax.drafters import vocab
from specjax.drafters.base import Draft, top_probability
from specjax.drafters.head import FeatureHeadDrafter
from specjax.models import block_drafter, kv_cache
from specjax.models.bundle import Model


@flax.struct.dataclass
class DFlashState:
  ctx_k_LxBxSxAxD: jax.Array  # extra keys/values per draft layer, one slot per committed position
  ctx_v_LxBxSxAxD: jax.Array
  ctx_len_B: jax.Array        # slots holding target features: seq_len - 1
  embed_VxE: jax.Array
  unembed_ExV: jax.Array


@flax.struct.dataclass
class DFlash(FeatureHeadDrafter):
  head: Model  # a BlockDrafter bundle (specjax.models.block_drafter)
  subset_K: jax.Array | None = None  # truncated draft vocabulary (specjax.drafters.vocab); None: all
  kind = "dflash"

  @property
  def block_size(self) -> int:
    return self.head.config.block_size

  def check_compatible(self, target) -> None:
    self.check_head(target, "DFlash drafter", "DFlash")
    self.check_feature_layers(target, "DFlash")

  def _context(self, feat_BxTxF, positions_BxT):
    return self.apply_head(feat_BxTxF, positions_BxT, method="context")

  def init(self, target, prompts_BxP, prompt_lengths_B, max_len, prefill=None):
    b, p = prompts_BxP.shape
    embed, unembed = self.embed_and_unembed(target)
    feat = self.prefill_of(target, prompts_BxP, prefill).features_BxPxF
    k_new, v_new = self._context(feat, jnp.broadcast_to(jnp.arange(p)[None], (b, p)))
    cfg = self.head.config
    shape = (cfg.num_layers, b, max_len, cfg.num_kv_heads, cfg.head_dim)
    k = jnp.zeros(shape, k_new.dtype).at[:, :, :p].set(k_new)
    v = jnp.zeros(shape, v_new.dtype).at[:, :, :p].set(v_new)
    return DFlashState(k, v, (prompt_lengths_B - 1).astype(jnp.int32), embed, unembed)

  def propose(self, state, tokens_BxS, seq_len_B, gamma, sampling, rng):
    b = tokens_BxS.shape[0]
    q_len = gamma + 1
    anchor_B = jnp.take_along_axis(tokens_BxS, (seq_len_B - 1)[:, None], 1)[:, 0]
    tok_emb = jnp.broadcast_to(state.embed_VxE[anchor_B][:, None], (b, q_len, state.embed_VxE.shape[1]))
    is_mask = jnp.broadcast_to(jnp.arange(q_len)[None] > 0, (b, q_len))
    positions = (seq_len_B - 1)[:, None] + jnp.arange(q_len)[None]
    s = state.ctx_k_LxBxSxAxD.shape[2]
    ctx_visible = jnp.broadcast_to((jnp.arange(s)[None] < state.ctx_len_B[:, None])[:, None], (b, q_len, s))
    mask = block_drafter.block_mask(ctx_visible, jnp.zeros((q_len,), jnp.int32))
    hidden = self.apply_head(tok_emb, is_mask, positions, state.ctx_k_LxBxSxAxD, state.ctx_v_LxBxSxAxD, mask)
    logits_BxGxV = (hidden[:, 1:] @ state.unembed_ExV.astype(hidden.dtype)).astype(jnp.float32)
    drafts_BxG, q_BxGxV = vocab.draw(sampling, rng, logits_BxGxV, self.subset_K,
                                     state.embed_VxE.shape[0])  # independent draws; q None when greedy
    return state, Draft(drafts_BxG, q_BxGxV, confidence_BxG=top_probability(logits_BxGxV))

  def commit(self, state, tokens_BxS, seq_len_B, n_accepted_B, target_hidden_BxTxE):
    del tokens_BxS
    feat = target_hidden_BxTxE
    want = len(self.feature_layers) * self.head.config.d_model
    if feat.shape[-1] != want:
      raise ValueError(f"DFlash.commit got target features of width {feat.shape[-1]}, expected {want} "
                       f"(layers {self.feature_layers} concatenated): the loop must honour drafter.feature_layers")
    t = feat.shape[1]
    start_B = seq_len_B - 1  # == ctx_len: the verify pass started at the last token
    k_new, v_new = self._context(feat, start_B[:, None] + jnp.arange(t)[None])
    write = jax.vmap(kv_cache.write_rows, in_axes=(0, 0, None))
    return state.replace(ctx_k_LxBxSxAxD=write(state.ctx_k_LxBxSxAxD, k_new, start_B),
                         ctx_v_LxBxSxAxD=write(state.ctx_v_LxBxSxAxD, v_new, start_B),
                         ctx_len_B=(seq_len_B + n_accepted_B).astype(jnp.int32))
