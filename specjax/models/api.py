"""The few calls decoding needs from any model family (decoder-only or encoder-decoder).

Every family's module is called as ``module(tokens_BxT, positions_BxT, cache, new_mask_TxT)``
and returns ``(logits_BxTxV float32, hidden_BxTxE, cache)``; its cache has ``length_B`` and
``with_length``. Encoder-decoders also expose ``init_cache(encoder_tokens, encoder_lengths,
max_len)`` (runs the encoder once, caches cross-attention keys/values) and take
``encoder_tokens=`` in a cache-free call.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp

from specjax.models import kv_cache
from specjax.models.bundle import Model


def forward(model: Model, tokens_BxT, cache, positions_BxT=None, new_mask_TxT=None):
  return model.module.apply({"params": model.params}, tokens_BxT, positions_BxT, cache, new_mask_TxT)


def logits(model: Model, tokens_BxT, encoder_tokens=None, encoder_lengths=None) -> jax.Array:
  """Plain full forward, no cache: float32 ``[B, T, V]``. One jitted program per input shape (run
  op by op, each of the forward's hundreds of operations would compile on its own)."""
  tokens_BxT = jnp.asarray(tokens_BxT, jnp.int32)
  if model.is_encoder_decoder:
    if encoder_tokens is None:
      raise ValueError("an encoder-decoder model needs encoder_tokens= for specjax.logits")
    encoder_tokens = jnp.asarray(encoder_tokens, jnp.int32)
  return _logits(model, tokens_BxT, encoder_tokens, encoder_lengths)


@jax.jit
def _logits(model: Model, tokens_BxT, encoder_tokens, encoder_lengths):
  if model.is_encoder_decoder:
    out = model.module.apply({"params": model.params}, tokens_BxT, encoder_tokens=encoder_tokens,
                             encoder_lengths=encoder_lengths)
  else:
    out = model.module.apply({"params": model.params}, tokens_BxT)
  return out[0]


def start(model: Model, prompts_BxP, prompt_lengths_B, max_len: int, return_prefill: bool = False):
  """Decode state for a fresh generation: ``(cache, tokens_BxS, seq_len_B)``, and with
  ``return_prefill`` also ``(hidden_BxPxE, layer_hidden)`` from the prefill (drafters read them
  instead of running the target again; ``(None, None)`` for an encoder-decoder).

  Invariant kept by every loop: the cache has committed every token of the buffer except the
  last one (``seq_len - 1`` slots); the last token is fed next. For a decoder-only model the
  buffer starts as the prompt; for an encoder-decoder the prompt goes to the encoder and the
  buffer starts as the decoder start token.
  """
  b, p = prompts_BxP.shape
  cfg = model.config
  if model.is_encoder_decoder:
    cache = model.module.apply({"params": model.params}, prompts_BxP, prompt_lengths_B, max_len,
                               method="init_cache")
    tokens = jnp.full((b, max_len), cfg.decoder_start_id, jnp.int32)
    out = cache, tokens, jnp.ones((b,), jnp.int32)
    return out + ((None, None),) if return_prefill else out
  cache = kv_cache.init_cache(cfg.num_layers, b, max_len, cfg.num_kv_heads, cfg.head_dim,
                              jnp.dtype(cfg.cache_dtype or cfg.dtype))
  # prefill; pads past each row's length are masked later
  if return_prefill:  # the layers' outputs too (dropped by XLA when no drafter reads them)
    _, hidden, cache, layer_hidden = model.module.apply({"params": model.params}, prompts_BxP, None, cache,
                                                         return_layer_hidden=True)
  else:
    _, hidden, cache = forward(model, prompts_BxP, cache)
  cache = cache.with_length(prompt_lengths_B - 1)
  tokens = jnp.zeros((b, max_len), jnp.int32).at[:, :p].set(prompts_BxP)
  out = cache, tokens, prompt_lengths_B.astype(jnp.int32)
  return out + ((hidden, layer_hidden),) if return_prefill else out
