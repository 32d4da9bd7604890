"""Tiny random models for tests and notebooks."""
from __future__ import annotations

from specjax.models import bundle
from specjax.models.decoder import Decoder, DecoderConfig


def tiny_decoder(vocab_size: int = 64, seed: int = 0, **overrides) -> bundle.Model:
  cfg = dict(vocab_size=vocab_size, d_model=32, num_layers=2, num_heads=4, num_kv_heads=2, head_dim=8,
             mlp_dim=64)
  cfg.update(overrides)
  return bundle.init_model(Decoder(DecoderConfig(**cfg)), seed)


def tiny_t5(vocab_size: int = 64, seed: int = 0, **overrides) -> bundle.Model:
  from specjax.models.t5 import T5, T5Config  # pylint: disable=import-outside-toplevel
  cfg = dict(vocab_size=vocab_size, d_model=32, num_encoder_layers=2, num_decoder_layers=2, num_heads=4,
             head_dim=8, mlp_dim=64)
  cfg.update(overrides)
  return bundle.init_model(T5(T5Config(**cfg)), seed)
