"""Export a specjax decoder to a Hugging Face ``LlamaForCausalLM`` folder (config.json + safetensors).

The exact inverse of :func:`specjax.hf_import.from_hf`'s Llama mapping, so
``from_hf(to_hf_llama(model, dir))`` gives back the same params. specjax's decoder is a Llama
(RMSNorm with a weight multiply, rotate-half RoPE, SwiGLU, GQA, no biases), so this is transposes
and reshapes only. Written so transformers' own ``generate`` (and assisted generation) can run
specjax weights side by side with specjax (scripts/compare_hf.py). Needs no torch.
"""
from __future__ import annotations

import json
import pathlib

import jax
import numpy as np

from specjax.models.bundle import Model


def to_hf_llama(model: Model, folder, *, max_position_embeddings: int = 4096, bos_token_id=None,
                eos_token_id=None, pad_token_id=None) -> pathlib.Path:
  """Writes ``folder/config.json`` and ``folder/model.safetensors`` (float32); returns the folder.

  The HF config computes in float32 whatever ``model.config.dtype`` says: specjax params are
  float32 and only the compute dtype is configurable.
  """
  from safetensors.numpy import save_file  # pylint: disable=import-outside-toplevel
  from specjax.models.decoder import Decoder  # pylint: disable=import-outside-toplevel
  if not isinstance(model.module, Decoder):
    raise ValueError(f"to_hf_llama exports decoder-only models; got {type(model.module).__name__}")
  cfg = model.config
  e, h, k, d, f = cfg.d_model, cfg.num_heads, cfg.num_kv_heads, cfg.head_dim, cfg.mlp_dim
  p = jax.device_get(model.params)
  a = lambda x: np.ascontiguousarray(np.asarray(x, np.float32))
  tensors = {"model.embed_tokens.weight": a(p["embed"]), "model.norm.weight": a(p["final_norm"]["scale"])}
  for i in range(cfg.num_layers):
    src, dst = p[f"layer_{i}"], f"model.layers.{i}"
    tensors[f"{dst}.self_attn.q_proj.weight"] = a(np.reshape(src["attn"]["q"], (e, h * d)).T)
    tensors[f"{dst}.self_attn.k_proj.weight"] = a(np.reshape(src["attn"]["k"], (e, k * d)).T)
    tensors[f"{dst}.self_attn.v_proj.weight"] = a(np.reshape(src["attn"]["v"], (e, k * d)).T)
    tensors[f"{dst}.self_attn.o_proj.weight"] = a(np.reshape(src["attn"]["o"], (h * d, e)).T)
    tensors[f"{dst}.mlp.gate_proj.weight"] = a(np.asarray(src["mlp"]["gate"]).T)
    tensors[f"{dst}.mlp.up_proj.weight"] = a(np.asarray(src["mlp"]["up"]).T)
    tensors[f"{dst}.mlp.down_proj.weight"] = a(np.asarray(src["mlp"]["down"]).T)
    tensors[f"{dst}.input_layernorm.weight"] = a(src["attn_norm"]["scale"])
    tensors[f"{dst}.post_attention_layernorm.weight"] = a(src["mlp_norm"]["scale"])
  if not cfg.tie_embeddings:
    tensors["lm_head.weight"] = a(np.asarray(p["lm_head"]).T)
  hf_cfg = {
      "architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": cfg.vocab_size,
      "hidden_size": e, "intermediate_size": f, "num_hidden_layers": cfg.num_layers, "num_attention_heads": h,
      "num_key_value_heads": k, "head_dim": d, "hidden_act": "silu", "rms_norm_eps": cfg.norm_eps,
      "attention_bias": False, "mlp_bias": False, "tie_word_embeddings": bool(cfg.tie_embeddings),
      # transformers 5 reads rope_parameters; 4 reads rope_theta: write both
      "rope_parameters": {"rope_type": "default", "rope_theta": cfg.rope_theta}, "rope_theta": cfg.rope_theta,
      "max_position_embeddings": max_position_embeddings, "torch_dtype": "float32", "dtype": "float32",
      "bos_token_id": bos_token_id, "eos_token_id": eos_token_id, "pad_token_id": pad_token_id,
  }
  folder = pathlib.Path(folder)
  folder.mkdir(parents=True, exist_ok=True)
  save_file(tensors, str(folder / "model.safetensors"), metadata={"format": "pt"})
  (folder / "config.json").write_text(json.dumps(hf_cfg, indent=2) + "\n")
  return folder
