"""The encoder-decoder family (:class:`specjax.models.t5.T5`) and the checkpoints it imports."""
from __future__ import annotations

from specjax.hf_import import t5
from specjax.models.families import Architecture, Family, HFShape, declare
from specjax.models.t5 import T5, T5Config

FAMILY = declare(Family("t5", T5, T5Config, encoder_decoder=True,
                        cache_fields=("num_decoder_layers", "num_heads", "head_dim"),
                        layer_fields=("num_encoder_layers", "num_decoder_layers"), architectures=(
    # T5WithLMHeadModel: the original T5 releases' config.json, written before the rename
    Architecture(("T5ForConditionalGeneration", "T5WithLMHeadModel"), "t5", t5.t5,
                 # relative positions: no fixed context
                 hf_shape=HFShape(layers=("num_decoder_layers", "num_layers"), kv_heads=(),
                                  head_dim=("d_kv",), width=None, context=None)),
)))
