"""The KV cache: an explicit pytree that every layer takes and returns.

Keys/values live in one buffer per kind, ``[layers, batch, kv_heads, max_len, head_dim]`` (heads
before slots: the layout attention's dots read without a transpose, layers.attend), and
``length[b]`` says how many slots of row ``b`` are *committed*. A forward pass writes its new
keys/values at slots ``length .. length + T - 1`` but does not commit them; the caller commits
what it accepted with :func:`commit`. Attention masks every slot at or past ``length`` (except
the new tokens themselves), so rolling back rejected tokens is only a length change.
"""
from __future__ import annotations

import flax
import jax
import jax.numpy as jnp


@flax.struct.dataclass
class KVCache:
  k_LxBxAxSxD: jax.Array
  v_LxBxAxSxD: jax.Array
  length_B: jax.Array  # int32: committed slots per row

  @property
  def max_len(self) -> int:
    return self.k_LxBxAxSxD.shape[3]

  @property
  def batch_size(self) -> int:
    return self.k_LxBxAxSxD.shape[1]

  def with_length(self, length_B) -> "KVCache":
    """Commit (advance) or roll back: only the per-row length changes."""
    return self.replace(length_B=jnp.asarray(length_B, jnp.int32))


@flax.struct.dataclass
class PendingKV:
  """A cache a forward pass reads but does not write: the new tokens' keys and values go to small
  buffers ``[layers, batch, T, kv_heads, head_dim]`` and attention reads the committed slots of
  ``cache`` plus them (:func:`specjax.models.layers.attend`'s ``extra``). :func:`write_pending`
  then writes them at each row's length, like a plain forward would have.

  Why: the adaptive loop verifies at one of several widths chosen by ``lax.switch``; a branch that
  writes the loop's cache makes XLA:CPU copy the whole cache once per round. A branch that only
  reads it and returns the new keys and values leaves a single in-place write after the switch.
  """
  cache: KVCache
  k_new_LxBxTxAxD: jax.Array
  v_new_LxBxTxAxD: jax.Array

  @classmethod
  def start(cls, cache: KVCache, num_tokens: int) -> "PendingKV":
    l, b, k, _, d = cache.k_LxBxAxSxD.shape
    zeros = jnp.zeros((l, b, num_tokens, k, d), cache.k_LxBxAxSxD.dtype)
    return cls(cache, zeros, zeros)

  @property
  def length_B(self):
    return self.cache.length_B

  @property
  def max_len(self) -> int:
    return self.cache.max_len

  def with_layer(self, layer: int, k_BxTxAxD, v_BxTxAxD) -> "PendingKV":
    dt = self.k_new_LxBxTxAxD.dtype
    return self.replace(k_new_LxBxTxAxD=self.k_new_LxBxTxAxD.at[layer].set(k_BxTxAxD.astype(dt)),
                        v_new_LxBxTxAxD=self.v_new_LxBxTxAxD.at[layer].set(v_BxTxAxD.astype(dt)))


def write_pending(cache: KVCache, k_new_LxBxTxAxD, v_new_LxBxTxAxD) -> KVCache:
  """Writes pending keys/values at slots ``length .. length + T - 1`` of every layer, in place."""
  return cache.replace(k_LxBxAxSxD=_write_all_layers(cache.k_LxBxAxSxD, k_new_LxBxTxAxD, cache.length_B),
                       v_LxBxAxSxD=_write_all_layers(cache.v_LxBxAxSxD, v_new_LxBxTxAxD, cache.length_B))


def _write_all_layers(buf_LxBxAxSxD, new_LxBxTxAxD, start_B):
  """:func:`write_layer` for every layer at once: one scatter, whatever the depth (layers and rows
  are batching dims, the slot the one index), so the program does not grow with the layers."""
  l, b, t = new_LxBxTxAxD.shape[:3]
  slots_LxBxTx1 = jnp.broadcast_to((start_B[:, None] + jnp.arange(t)[None, :]).astype(jnp.int32), (l, b, t))[..., None]
  dims = jax.lax.ScatterDimensionNumbers(update_window_dims=(3, 4), inserted_window_dims=(3,),
                                         scatter_dims_to_operand_dims=(3,), operand_batching_dims=(0, 1),
                                         scatter_indices_batching_dims=(0, 1))
  return jax.lax.scatter(buf_LxBxAxSxD, slots_LxBxTx1, new_LxBxTxAxD.astype(buf_LxBxAxSxD.dtype), dims,
                         indices_are_sorted=True, unique_indices=True, mode=jax.lax.GatherScatterMode.FILL_OR_DROP)


def committed_mask(length_B, max_len, t: int):
  """Boolean ``[B, T, S]``: the committed slots (before ``length``), for every new token."""
  committed_BxS = jnp.arange(max_len)[None, :] < length_B[:, None]
  return jnp.broadcast_to(committed_BxS[:, None, :], (length_B.shape[0], t, max_len))


def init_cache(num_layers, batch, max_len, num_kv_heads, head_dim, dtype=jnp.float32) -> KVCache:
  shape = (num_layers, batch, num_kv_heads, max_len, head_dim)
  return KVCache(jnp.zeros(shape, dtype), jnp.zeros(shape, dtype), jnp.zeros((batch,), jnp.int32))


def write_rows(buf_BxSx, new_BxTx, start_B):
  """Writes ``new[b]`` into ``buf[b, start[b]:start[b]+T]`` for every row."""
  def one(buf, new, start):
    idx = (start,) + (0,) * (buf.ndim - 1)
    return jax.lax.dynamic_update_slice(buf, new.astype(buf.dtype), idx)
  return jax.vmap(one)(buf_BxSx, new_BxTx, start_B)


def write_layer(buf_LxBxAxSxD, layer: int, new_BxTxAxD, start_B):
  """Writes one layer's new keys (or values) into the stacked buffer, in place.

  One scatter of the ``B * T`` new ``[K, D]`` rows at ``(layer, b, :, start[b] + t)``: the
  loop-carried buffer is updated where it lives. (A ``vmap`` of ``dynamic_update_slice`` over the
  batch axis, which is not leading here, made XLA transpose and copy the whole buffer per layer
  per step.) Slots past ``max_len`` are dropped, never wrapped onto committed ones.
  """
  b, t = new_BxTxAxD.shape[:2]
  slots_BxT = start_B[:, None] + jnp.arange(t)[None, :]
  index_BxTx2 = jnp.stack([jnp.full((b, t), layer, jnp.int32), slots_BxT.astype(jnp.int32)], axis=-1)
  # the batch is a *batching* dim of the scatter (operand dim 1 <-> index dim 0), not an index:
  # row b only ever writes row b, so a mesh's 'data' split needs no gather of indices or updates
  dims = jax.lax.ScatterDimensionNumbers(update_window_dims=(2, 3), inserted_window_dims=(0, 3),
                                         scatter_dims_to_operand_dims=(0, 3), operand_batching_dims=(1,),
                                         scatter_indices_batching_dims=(0,))
  return jax.lax.scatter(buf_LxBxAxSxD, index_BxTx2, new_BxTxAxD.astype(buf_LxBxAxSxD.dtype), dims,
                         indices_are_sorted=True, unique_indices=True, mode=jax.lax.GatherScatterMode.FILL_OR_DROP)


def gather_rows(buf_BxSx, idx_BxT):
  """``out[b, t] = buf[b, idx[b, t]]`` for a buffer with trailing dims."""
  return jax.vmap(lambda buf, idx: buf[idx])(buf_BxSx, idx_BxT)


def attention_mask(length_B, max_len, new_mask_TxU):
  """Boolean ``[B, T, S]``: query t may see committed slots and the window slots its mask allows.

  ``new_mask_TxU`` may also be ``[B, T, U]``, one mask per row.

  New token t sits in slot ``length + t``. ``new_mask_TxU`` covers the window of ``U >= T`` slots
  ending with the new ones, ``length - (U - T) .. length + T - 1``: ``[t, u]`` says whether new
  token t sees window slot u (causal for a chain, ancestors-and-self for a tree). Slots before the
  window are committed and always visible; ``U > T`` lets a tree drafter feed one level at a time
  while the earlier levels' (uncommitted) nodes stay visible only to their descendants.
  """
  t, w = new_mask_TxU.shape[-2:]
  slot_S = jnp.arange(max_len)
  rel_BxS = slot_S[None, :] - (length_B[:, None] - (w - t))
  committed_BxS = rel_BxS < 0
  in_window_BxS = (rel_BxS >= 0) & (rel_BxS < w)
  idx_BxS = jnp.clip(rel_BxS, 0, w - 1)
  if new_mask_TxU.ndim == 3:  # a mask per row [B, T, U] (dynamic token trees)
    b = length_B.shape[0]
    window_BxTxS = jnp.take_along_axis(new_mask_TxU, jnp.broadcast_to(idx_BxS[:, None], (b, t, max_len)), 2)
  else:
    window_BxTxS = jnp.transpose(jnp.take(new_mask_TxU, idx_BxS, axis=1), (1, 0, 2))  # [T, B, S] -> [B, T, S]
  window_BxTxS = window_BxTxS & in_window_BxS[:, None, :]
  return committed_BxS[:, None, :] | window_BxTxS


def sliding_window_mask(mask_BxTxS, q_positions_BxT, k_positions_BxS, window: int):
  """Restricts a mask to keys less than ``window`` positions back (HF/Gemma: q - k < window).

  In a cache, slot s of a committed token holds position s (trees compact their accepted path),
  and so do a chain's or a prefill's new tokens. A tree node's slot is at or past its position,
  but it only sees its ancestors, all within the tree's depth, so the rule is exact whenever the
  window is deeper than the tree (validate.drafter checks it).
  """
  if not window:
    return mask_BxTxS
  near_BxTxS = k_positions_BxS[:, None, :] > q_positions_BxT[:, :, None] - window
  return mask_BxTxS & near_BxTxS


def causal_mask(t: int) -> jax.Array:
  return jnp.tril(jnp.ones((t, t), bool))
