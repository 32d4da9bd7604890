"""Export a specjax decoder to a Hugging Face ``LlamaForCausalLM`` folder (config.json + safetensors).

The exact inverse of :func:`specjax.hf_import.from_hf`'s Llama mapping, so
``from_hf(to_hf_llama(model, dir))`` gives back the same params. specjax's decoder is a Llama
(RMSNorm with a weight multiply, rotate-half RoPE, SwiGLU, GQA, no biases), so this is transposes
and reshapes only. Written so transformers' own ``generate`` (and assisted generation) can run
specjax weights side by side with specjax (``python -m specjax.bench hf``). The exports need no torch; only
:func:`load_draft_lm_torch` imports it.
"""
from __future__ import annotations

import json
import pathlib

import jax
import numpy as np

from specjax.models import store
from specjax.models.bundle import Model


def to_hf_llama(model: Model, folder, *, max_position_embeddings: int = 4096, bos_token_id=None,
                eos_token_id=None, pad_token_id=None) -> pathlib.Path:
  """Writes ``folder/config.json`` and ``folder/model.safetensors`` (float32); returns the folder.

  The HF config computes in float32 whatever ``model.config.dtype`` says: specjax params are
  float32 and only the compute dtype is configurable.
  """
  from specjax.models.decoder import Decoder  # pylint: disable=import-outside-toplevel
  if not isinstance(model.module, Decoder):
    raise ValueError(f"to_hf_llama exports decoder-only models; got {type(model.module).__name__}")
  cfg = model.config
  p = jax.device_get(model.params)
  tensors = {"model.embed_tokens.weight": _a(p["embed"]), "model.norm.weight": _a(p["final_norm"]["scale"]),
             **_layer_tensors(cfg, p)}
  if not cfg.tie_embeddings:
    tensors["lm_head.weight"] = _a(np.asarray(p["lm_head"]).T)
  return _write(tensors, _llama_config(cfg, max_position_embeddings, bos_token_id, eos_token_id, pad_token_id),
                folder)


def draft_lm_to_hf(model: Model, subset_K, folder, *, max_position_embeddings: int = 4096, eos_token_id=None,
                   pad_token_id=None) -> pathlib.Path:
  """Exports a :mod:`specjax.models.draft_lm` drafter (frozen parts included) as a Llama plus a head.

  The input side folds exactly into a Llama embedding: ``norm(E[v] @ P)`` depends on the token
  only, so it is precomputed for every ``v``. The output side (``norm(h @ up) @ W[:, subset]``, or a
  K-wide head) is not a Llama ``lm_head``; it is written as ``lm_head.0`` (up), ``lm_head.1`` (norm)
  and ``lm_head.2`` (a V-wide linear whose rows outside ``subset_K`` are zero with bias -1e9, so
  their probability is 0, as in specjax), and :func:`load_draft_lm_torch` builds that head. Used to
  run transformers' assisted generation with our drafter (``python -m specjax.bench peers``).
  """
  from specjax.models.draft_lm import FROZEN, FROZEN_HEAD, DraftLM  # pylint: disable=import-outside-toplevel
  if not isinstance(model.module, DraftLM):
    raise ValueError(f"draft_lm_to_hf exports draft_lm drafters; got {type(model.module).__name__}")
  cfg, p = model.config, jax.device_get(model.params)
  subset_K = np.asarray(subset_K, np.int64)
  if subset_K.shape != (cfg.num_outputs,):
    raise ValueError(f"subset_K has shape {subset_K.shape}; the head has out_vocab={cfg.num_outputs}")
  x = np.asarray(p[FROZEN], np.float32) @ np.asarray(p["embed_proj"], np.float32)
  embed = x / np.sqrt(np.mean(x * x, -1, keepdims=True) + cfg.norm_eps) * np.asarray(p["embed_norm"]["scale"])
  tensors = {"model.embed_tokens.weight": _a(embed), "model.norm.weight": _a(p["final_norm"]["scale"]),
             **_layer_tensors(cfg, p)}
  rows_KxE = np.asarray(p[FROZEN_HEAD] if cfg.frozen_head else p["lm_head"], np.float32).T
  out_w = np.zeros((cfg.vocab_size, rows_KxE.shape[1]), np.float32)
  out_w[subset_K] = rows_KxE
  bias = np.full((cfg.vocab_size,), -1e9, np.float32)
  bias[subset_K] = 0.0
  tensors.update({"lm_head.2.weight": _a(out_w), "lm_head.2.bias": bias})
  if cfg.frozen_head:
    tensors.update({"lm_head.0.weight": _a(np.asarray(p["head_proj"]).T), "lm_head.1.weight": _a(p["head_norm"]["scale"])})
  hf_cfg = _llama_config(cfg, max_position_embeddings, None, eos_token_id, pad_token_id)
  hf_cfg.update(tie_word_embeddings=False, specjax_head={"kind": "draft_lm", "embed_dim": cfg.embed_dim,
                                                         "frozen_head": cfg.frozen_head, "out_vocab": cfg.num_outputs})
  return _write(tensors, hf_cfg, folder)


def load_draft_lm_torch(folder):
  """The transformers ``LlamaForCausalLM`` of a :func:`draft_lm_to_hf` folder, with its head (eval mode)."""
  import torch  # pylint: disable=import-outside-toplevel
  import transformers  # pylint: disable=import-outside-toplevel
  from safetensors.torch import load_file  # pylint: disable=import-outside-toplevel
  folder = pathlib.Path(folder)
  raw = json.loads((folder / "config.json").read_text())
  head = raw.pop("specjax_head", None)
  if not head or head.get("kind") != "draft_lm":
    raise ValueError(f"{folder}: not a draft_lm export (no specjax_head in config.json)")
  model = transformers.LlamaForCausalLM(transformers.LlamaConfig(**raw))
  d, e, v = raw["hidden_size"], head["embed_dim"], raw["vocab_size"]
  if head["frozen_head"]:
    norm = transformers.models.llama.modeling_llama.LlamaRMSNorm(e, eps=raw["rms_norm_eps"])
    model.lm_head = torch.nn.Sequential(torch.nn.Linear(d, e, bias=False), norm, torch.nn.Linear(e, v))
  else:
    model.lm_head = torch.nn.Sequential(torch.nn.Identity(), torch.nn.Identity(), torch.nn.Linear(d, v))
  model.load_state_dict(load_file(str(folder / "model.safetensors")), strict=True)
  return model.float().eval()


def _a(x) -> np.ndarray:
  return np.ascontiguousarray(np.asarray(x, np.float32))


def _layer_tensors(cfg, p) -> dict:
  p = store.per_layer_params(p)  # a scanned decoder stacks its layers; the HF names are per layer
  e, h, k, d = cfg.d_model, cfg.num_heads, cfg.num_kv_heads, cfg.head_dim
  tensors = {}
  for i in range(cfg.num_layers):
    src, dst = p[f"layer_{i}"], f"model.layers.{i}"
    tensors[f"{dst}.self_attn.q_proj.weight"] = _a(np.reshape(src["attn"]["q"], (e, h * d)).T)
    tensors[f"{dst}.self_attn.k_proj.weight"] = _a(np.reshape(src["attn"]["k"], (e, k * d)).T)
    tensors[f"{dst}.self_attn.v_proj.weight"] = _a(np.reshape(src["attn"]["v"], (e, k * d)).T)
    tensors[f"{dst}.self_attn.o_proj.weight"] = _a(np.reshape(src["attn"]["o"], (h * d, e)).T)
    tensors[f"{dst}.mlp.gate_proj.weight"] = _a(np.asarray(src["mlp"]["gate"]).T)
    tensors[f"{dst}.mlp.up_proj.weight"] = _a(np.asarray(src["mlp"]["up"]).T)
    tensors[f"{dst}.mlp.down_proj.weight"] = _a(np.asarray(src["mlp"]["down"]).T)
    tensors[f"{dst}.input_layernorm.weight"] = _a(src["attn_norm"]["scale"])
    tensors[f"{dst}.post_attention_layernorm.weight"] = _a(src["mlp_norm"]["scale"])
  return tensors


def _llama_config(cfg, max_position_embeddings, bos_token_id, eos_token_id, pad_token_id) -> dict:
  e, h, k, d, f = cfg.d_model, cfg.num_heads, cfg.num_kv_heads, cfg.head_dim, cfg.mlp_dim
  return {
      "architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": cfg.vocab_size,
      "hidden_size": e, "intermediate_size": f, "num_hidden_layers": cfg.num_layers, "num_attention_heads": h,
      "num_key_value_heads": k, "head_dim": d, "hidden_act": "silu", "rms_norm_eps": cfg.norm_eps,
      "attention_bias": False, "mlp_bias": False, "tie_word_embeddings": bool(cfg.tie_embeddings),
      # transformers 5 reads rope_parameters; 4 reads rope_theta: write both
      "rope_parameters": {"rope_type": "default", "rope_theta": cfg.rope_theta}, "rope_theta": cfg.rope_theta,
      "max_position_embeddings": max_position_embeddings, "torch_dtype": "float32", "dtype": "float32",
      "bos_token_id": bos_token_id, "eos_token_id": eos_token_id, "pad_token_id": pad_token_id,
  }


def _write(tensors: dict, hf_cfg: dict, folder) -> pathlib.Path:
  from safetensors.numpy import save_file  # pylint: disable=import-outside-toplevel
  folder = pathlib.Path(folder)
  folder.mkdir(parents=True, exist_ok=True)
  save_file(tensors, str(folder / "model.safetensors"), metadata={"format": "pt"})
  (folder / "config.json").write_text(json.dumps(hf_cfg, indent=2) + "\n")
  return folder
