"""Decoder-only importers: Llama, Mistral, Qwen2 (q/k/v biases), Qwen3 (q/k norms), Gemma 3 (text).

All map onto :class:`specjax.models.decoder.Decoder` (which architecture uses which importer, with
which options: :mod:`specjax.families.decoder`); what differs is a few config fields
(``norm_offset``, ``sandwich_norms``, ``qk_norm``, ``qkv_bias``, ``layer_windows``, ...) and a few
extra tensors. HF's ``[out, in]`` projections become ``[in, heads, head_dim]`` by a transpose.
"""
from __future__ import annotations

import numpy as np

from specjax import sharding
from specjax.hf_import.common import build, get, placed_params, reject
from specjax.hf_import.weights import Weights


def _rope_theta(params, cfg, path, what="rope_parameters"):
  """v5 keeps RoPE settings in ``rope_parameters``; v4 in ``rope_theta`` + ``rope_scaling``."""
  params = params or {}
  rope_type = params.get("rope_type", params.get("type", "default"))
  if rope_type != "default":
    reject(path, f"{what} rope_type={rope_type!r} (specjax implements plain RoPE only)")
  if cfg.get("rope_scaling"):
    reject(path, f"rope_scaling={cfg['rope_scaling']!r} (specjax implements plain RoPE only)")
  if cfg.get("partial_rotary_factor", 1.0) != 1.0:
    reject(path, f"partial_rotary_factor={cfg['partial_rotary_factor']}")
  return float(params.get("rope_theta", cfg.get("rope_theta", 10000.0)))


def _check_features(cfg, path, act_key, acts, bias_ok):
  if cfg.get("mlp_bias"):
    reject(path, "mlp_bias=true (specjax's MLP has no biases)")
  if cfg.get("attention_bias") and not bias_ok:
    reject(path, "attention_bias=true (specjax projections have no biases)")
  if cfg.get(act_key, next(iter(acts))) not in acts:
    reject(path, f"{act_key}={cfg[act_key]!r} (specjax's MLP gate here is {sorted(acts)})")
  for key in ("attn_logit_softcapping", "final_logit_softcapping"):
    if cfg.get(key):
      reject(path, f"{key}={cfg[key]}")


def _windows(cfg, path, layers, global_default):
  """Per-layer sliding windows from ``layer_types`` (or one window on every layer, Mistral-style)."""
  window = cfg.get("sliding_window")
  types = cfg.get("layer_types")
  if types is not None:
    if len(types) != layers:
      reject(path, f"layer_types with {len(types)} entries for num_hidden_layers={layers}")
    bad = sorted(set(types) - {"sliding_attention", "full_attention"})
    if bad:
      reject(path, f"layer_types {bad}")
    if window is None and "sliding_attention" in types:
      reject(path, "sliding_attention layers without a sliding_window")
    return tuple(int(window) if t == "sliding_attention" else 0 for t in types)
  if window is None or global_default:
    return ()
  return (int(window),) * layers


def _attn(w: Weights, flat, src, dst, e, h, k, d, bias: bool, qk_norm: bool):
  for n, heads in (("q", h), ("k", k), ("v", k)):
    flat[f"{dst}/attn/{n}"] = w.take(f"{src}.self_attn.{n}_proj.weight", (heads * d, e)).T.reshape(e, heads, d)
    if bias:
      flat[f"{dst}/attn/{n}_bias"] = w.take(f"{src}.self_attn.{n}_proj.bias", (heads * d,)).reshape(heads, d)
  flat[f"{dst}/attn/o"] = w.take(f"{src}.self_attn.o_proj.weight", (e, h * d)).T.reshape(h, d, e)
  if qk_norm:
    flat[f"{dst}/attn/q_norm/scale"] = w.take(f"{src}.self_attn.q_norm.weight", (d,))
    flat[f"{dst}/attn/k_norm/scale"] = w.take(f"{src}.self_attn.k_norm.weight", (d,))


def _mlp(w: Weights, flat, src, dst, e, f):
  flat[f"{dst}/mlp/gate"] = w.take(f"{src}.mlp.gate_proj.weight", (f, e)).T
  flat[f"{dst}/mlp/up"] = w.take(f"{src}.mlp.up_proj.weight", (f, e)).T
  flat[f"{dst}/mlp/down"] = w.take(f"{src}.mlp.down_proj.weight", (e, f)).T


def _head(w: Weights, flat, cfg, v, e, tied_default):
  tied = bool(cfg.get("tie_word_embeddings", tied_default))
  if not tied or "lm_head.weight" in w:
    head = w.take("lm_head.weight", (v, e))
    # like transformers 5: a tied config whose file holds a different head keeps both
    tied = tied and np.array_equal(head, sharding.to_host(flat["embed"]))
    if not tied:
      flat["lm_head"] = head.T
  return tied


def _shape(cfg, path):
  e, h = get(cfg, "hidden_size", path, required=True), get(cfg, "num_attention_heads", path, required=True)
  return dict(vocab_size=get(cfg, "vocab_size", path, required=True), d_model=e,
              num_layers=get(cfg, "num_hidden_layers", path, required=True), num_heads=h,
              num_kv_heads=get(cfg, "num_key_value_heads", path, h), head_dim=get(cfg, "head_dim", path, e // h),
              mlp_dim=get(cfg, "intermediate_size", path, required=True))


def llama(path, source, cfg, w: Weights, overrides, qkv_bias=False, qk_norm=False, qwen_windows=False):
  """Llama / Mistral, and with options Qwen2 (``qkv_bias``) and Qwen3 (``qk_norm``): pre-norm, SwiGLU,
  rotate-half RoPE. ``qwen_windows``: the config's ``sliding_window`` applies only with
  ``use_sliding_window``, from ``max_window_layers`` on (as transformers' Qwen2Config/Qwen3Config)."""
  from specjax.models.decoder import Decoder, DecoderConfig  # pylint: disable=import-outside-toplevel
  # qkv_bias: q/k/v biases always; otherwise attention_bias (o_proj too) is refused
  _check_features(cfg, path, "hidden_act", ("silu", "swish"), bias_ok=qkv_bias)
  shape = _shape(cfg, path)
  v, e, h, k, d, f = (shape[n] for n in ("vocab_size", "d_model", "num_heads", "num_kv_heads", "head_dim", "mlp_dim"))
  qwen_window_off = qwen_windows and not cfg.get("use_sliding_window", False)
  if qwen_windows and not qwen_window_off and cfg.get("layer_types") is None:
    # as transformers' Qwen2Config/Qwen3Config derive it: layers from max_window_layers on slide
    first = int(cfg.get("max_window_layers", 28))
    cfg = dict(cfg, layer_types=["sliding_attention" if i >= first else "full_attention"
                                 for i in range(shape["num_layers"])])
  windows = () if qwen_window_off else _windows(cfg, path, shape["num_layers"], global_default=False)
  fields = dict(shape, rope_theta=_rope_theta(cfg.get("rope_parameters"), cfg, path),
                norm_eps=float(get(cfg, "rms_norm_eps", path, 1e-6)), qkv_bias=qkv_bias, qk_norm=qk_norm,
                layer_windows=windows)
  # untied until the file says otherwise: room for lm_head (its embedding's sharding does not change)
  flat = placed_params(path, Decoder, DecoderConfig, dict(fields, tie_embeddings=False), overrides, w.mesh)
  flat["embed"] = w.take("model.embed_tokens.weight", (v, e))
  flat["final_norm/scale"] = w.take("model.norm.weight", (e,))
  for i in range(shape["num_layers"]):
    src, dst = f"model.layers.{i}", f"layer_{i}"
    _attn(w, flat, src, dst, e, h, k, d, qkv_bias, qk_norm)
    _mlp(w, flat, src, dst, e, f)
    flat[f"{dst}/attn_norm/scale"] = w.take(f"{src}.input_layernorm.weight", (e,))
    flat[f"{dst}/mlp_norm/scale"] = w.take(f"{src}.post_attention_layernorm.weight", (e,))
  tied = _head(w, flat, cfg, v, e, tied_default=False)
  w.finish(source, ignored=lambda n: n.endswith("rotary_emb.inv_freq"))  # old buffers, recomputed
  return build(path, Decoder, DecoderConfig, dict(fields, tie_embeddings=tied), overrides, flat, source=source,
               mesh=w.mesh)


def gemma3(path, source, cfg, w: Weights, overrides):
  """Gemma 3 text: (1 + w) RMSNorms, four per block, q/k norms, scaled embeddings, GeGLU, local/global layers."""
  from specjax.models.decoder import Decoder, DecoderConfig  # pylint: disable=import-outside-toplevel
  _check_features(cfg, path, "hidden_activation", ("gelu_pytorch_tanh", "gelu_new"), bias_ok=False)
  if cfg.get("use_bidirectional_attention"):
    reject(path, "use_bidirectional_attention=true (specjax decodes causally)")
  shape = _shape(cfg, path)
  v, e, h, k, d, f = (shape[n] for n in ("vocab_size", "d_model", "num_heads", "num_kv_heads", "head_dim", "mlp_dim"))
  layers = shape["num_layers"]
  if cfg.get("layer_types") is None:  # old configs: every sliding_window_pattern-th layer is global
    pattern = int(cfg.get("sliding_window_pattern", 6))
    cfg = dict(cfg, layer_types=["sliding_attention" if (i + 1) % pattern else "full_attention"
                                 for i in range(layers)])
  rope = cfg.get("rope_parameters") or {}
  if "full_attention" in rope:  # v5: one RoPE per layer type
    theta = _rope_theta(rope["full_attention"], cfg, path, "rope_parameters[full_attention]")
    local_theta = _rope_theta(rope.get("sliding_attention", {"rope_theta": 10000.0}), {}, path,
                              "rope_parameters[sliding_attention]")
  else:  # v4: rope_theta + rope_local_base_freq
    theta = _rope_theta(rope, cfg, path)
    local_theta = float(cfg.get("rope_local_base_freq", 10000.0))
  fields = dict(shape, rope_theta=theta, local_rope_theta=local_theta,
                norm_eps=float(get(cfg, "rms_norm_eps", path, 1e-6)), norm_offset=1.0, sandwich_norms=True,
                qk_norm=True, scale_embeddings=True, mlp_activation="gelu_tanh",
                query_pre_attn_scalar=float(get(cfg, "query_pre_attn_scalar", path, d)),
                layer_windows=_windows(cfg, path, layers, global_default=False))
  flat = placed_params(path, Decoder, DecoderConfig, dict(fields, tie_embeddings=False), overrides, w.mesh)
  flat["embed"] = w.take("model.embed_tokens.weight", (v, e))
  flat["final_norm/scale"] = w.take("model.norm.weight", (e,))
  for i in range(layers):
    src, dst = f"model.layers.{i}", f"layer_{i}"
    _attn(w, flat, src, dst, e, h, k, d, bias=False, qk_norm=True)
    _mlp(w, flat, src, dst, e, f)
    for ours, theirs in (("attn_norm", "input_layernorm"), ("post_attn_norm", "post_attention_layernorm"),
                         ("mlp_norm", "pre_feedforward_layernorm"), ("post_mlp_norm", "post_feedforward_layernorm")):
      flat[f"{dst}/{ours}/scale"] = w.take(f"{src}.{theirs}.weight", (e,))
  tied = _head(w, flat, cfg, v, e, tied_default=True)
  w.finish(source)
  return build(path, Decoder, DecoderConfig, dict(fields, tie_embeddings=tied), overrides, flat, source=source,
               mesh=w.mesh)
