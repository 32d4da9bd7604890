"""The decoder-only family (:class:`specjax.models.decoder.Decoder`) and the checkpoints it imports.

Every architecture here is a few config fields of the one decoder; what sets one apart is its
importer's options and, for llama.cpp's files, its GGUF quirks.
"""
from __future__ import annotations

from specjax.hf_import import decoders
from specjax.models.decoder import Decoder, DecoderConfig
from specjax.models.families import GGUF, Architecture, Family, declare

FAMILY = declare(Family("decoder", Decoder, DecoderConfig, architectures=(
    # llama.cpp's converter permutes Llama's Q/K rows; Mistral files say llama and keep their window
    Architecture(("LlamaForCausalLM",), "llama", decoders.llama,
                 gguf=GGUF("llama", permute_qk=True, sliding_window="optional")),
    Architecture(("MistralForCausalLM",), "mistral", decoders.llama),
    Architecture(("Qwen2ForCausalLM",), "qwen2", decoders.llama, dict(qkv_bias=True, qwen_windows=True),
                 gguf=GGUF("qwen2")),
    Architecture(("Qwen3ForCausalLM",), "qwen3", decoders.llama, dict(qk_norm=True, qwen_windows=True),
                 gguf=GGUF("qwen3")),
    # the file has no local RoPE theta or sliding pattern: transformers' defaults are the releases' values
    Architecture(("Gemma3ForCausalLM",), "gemma3_text", decoders.gemma3,
                 gguf=GGUF("gemma3", ffn_norm="pre_feedforward_layernorm", norm_offset=1.0,
                           sliding_window="required",
                           config=dict(sliding_window_pattern=6, rope_local_base_freq=10000.0,
                                       hidden_activation="gelu_pytorch_tanh"))),
)))
