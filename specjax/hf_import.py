"""Import Hugging Face ``transformers`` checkpoints into specjax bundles, without torch.

``from_hf(folder)`` reads ``config.json`` plus ``model.safetensors`` (or a sharded
``model.safetensors.index.json`` and its shards) and returns a :class:`specjax.Model`:

* ``LlamaForCausalLM`` / ``MistralForCausalLM`` -> ``Decoder``. Both use rotate-half RoPE,
  RMSNorm with a weight multiply and SwiGLU, as specjax does, so the import is transposes only.
* ``T5ForConditionalGeneration`` (v1.1: gated-GELU, no biases) -> ``T5``.

Anything these families can express but specjax does not model (attention/MLP biases, RoPE
scaling, sliding windows, ReLU T5, ...) is rejected with an error naming the config key, rather
than imported into a silently different model.

Only safetensors are read, with a small reader of our own: the format is an 8-byte header
length, a JSON header and raw little-endian tensor bytes, and safetensors' numpy backend cannot
represent bfloat16 (most released checkpoints), so we map dtypes through ``ml_dtypes``. Tensors
are read one at a time and cast to float32. Pickle checkpoints (``pytorch_model.bin``) are never
loaded: unpickling runs arbitrary code.
"""
from __future__ import annotations

import json
import math
import pathlib

import ml_dtypes
import numpy as np

from specjax.checkpoint import CheckpointError, from_flat_params
from specjax.models.bundle import Model

_DTYPES = {"F64": np.dtype("<f8"), "F32": np.dtype("<f4"), "F16": np.dtype("<f2"),
           "BF16": np.dtype(ml_dtypes.bfloat16), "I64": np.dtype("<i8"), "I32": np.dtype("<i4"),
           "I16": np.dtype("<i2"), "I8": np.dtype("i1"), "U8": np.dtype("u1"), "BOOL": np.dtype("?")}
_PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".ckpt", ".pkl")


def from_hf(folder, *, allow_sliding_window: bool = False, **config_overrides) -> Model:
  """Loads a ``transformers`` checkpoint folder as a specjax model (params float32).

  ``config_overrides`` replace fields of the specjax config (e.g. ``dtype="bfloat16"`` for
  compute). ``allow_sliding_window`` imports a Mistral with a sliding window anyway: specjax
  attends to the whole context, which is exact only while sequences fit in the window.
  """
  folder = pathlib.Path(folder)
  if not folder.is_dir():
    raise CheckpointError(f"HF checkpoint folder not found: {folder}")
  cfg = _read_json(folder / "config.json")
  archs = cfg.get("architectures") or [cfg.get("model_type", "<none>")]
  arch = archs[0]
  if arch not in _IMPORTERS:
    raise CheckpointError(f"{folder / 'config.json'}: unsupported architecture {arch!r}; "
                          f"supported: {sorted(_IMPORTERS)}")
  weights = _Weights(_weight_index(folder))
  return _IMPORTERS[arch](folder, cfg, weights, allow_sliding_window, config_overrides)


# ----------------------------------------------------------------------------- files
def _read_json(path: pathlib.Path) -> dict:
  if not path.is_file():
    raise CheckpointError(f"HF checkpoint file missing: {path}")
  try:
    data = json.loads(path.read_text())
  except (json.JSONDecodeError, UnicodeDecodeError) as e:
    raise CheckpointError(f"{path}: not valid JSON ({e})") from e
  if not isinstance(data, dict):
    raise CheckpointError(f"{path}: expected a JSON object, got {type(data).__name__}")
  return data


def _weight_index(folder: pathlib.Path) -> dict:
  """``{tensor name: (file, header entry, data start)}`` over the single file or every shard."""
  single, index = folder / "model.safetensors", folder / "model.safetensors.index.json"
  if single.is_file():
    files = [single]
  elif index.is_file():
    weight_map = _read_json(index).get("weight_map")
    if not isinstance(weight_map, dict) or not weight_map:
      raise CheckpointError(f"{index}: no 'weight_map' naming the shards")
    files = [folder / name for name in sorted(set(weight_map.values()))]
    for f in files:
      if not f.is_file():
        raise CheckpointError(f"{index}: lists shard {f.name!r}, which is missing from {folder}")
  else:
    pickles = sorted(p.name for p in folder.iterdir() if p.suffix in _PICKLE_SUFFIXES)
    found = f" (found {pickles})" if pickles else ""
    raise CheckpointError(
        f"{folder}: no model.safetensors or model.safetensors.index.json{found}. Only safetensors are "
        "imported; .bin/pickle checkpoints are not loaded on purpose (unpickling runs arbitrary code). "
        "Convert once with transformers: model.save_pretrained(dir, safe_serialization=True).")
  out = {}
  for f in files:
    for name, (entry, start) in read_safetensors_header(f).items():
      out[name] = (f, entry, start)
  return out


def read_safetensors_header(path) -> dict:
  """Validated header: ``{name: (entry, data_start)}``; a truncated or corrupt file raises."""
  path = pathlib.Path(path)
  size = path.stat().st_size
  with open(path, "rb") as fh:
    head = fh.read(8)
    if len(head) < 8:
      raise CheckpointError(f"{path}: truncated safetensors file ({size} bytes, no header)")
    n = int.from_bytes(head, "little")
    if n > size - 8:
      raise CheckpointError(f"{path}: corrupt or truncated safetensors file (header of {n} bytes, "
                            f"file has {size})")
    try:
      header = json.loads(fh.read(n))
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
      raise CheckpointError(f"{path}: corrupt safetensors header ({e})") from e
  if not isinstance(header, dict):
    raise CheckpointError(f"{path}: corrupt safetensors header (not a JSON object)")
  header.pop("__metadata__", None)
  start = 8 + n
  for name, entry in header.items():
    _check_entry(path, name, entry, size - start)
  return {name: (entry, start) for name, entry in header.items()}


def _check_entry(path, name, entry, data_bytes):
  if isinstance(entry, dict) and entry.get("dtype") not in _DTYPES:
    raise CheckpointError(f"{path}: tensor {name!r} has dtype {entry.get('dtype')!r}, which specjax does not "
                          f"read (known: {sorted(_DTYPES)})")
  try:
    dtype, shape, (a, b) = _DTYPES[entry["dtype"]], entry["shape"], entry["data_offsets"]
    want = math.prod(shape) * dtype.itemsize
  except (KeyError, TypeError, ValueError) as e:
    raise CheckpointError(f"{path}: corrupt safetensors header entry for {name!r}: {entry!r}") from e
  if b - a != want or a < 0:
    raise CheckpointError(f"{path}: corrupt safetensors header: {name!r} {entry['dtype']}{shape} needs "
                          f"{want} bytes, offsets {a}..{b} give {b - a}")
  if b > data_bytes:
    raise CheckpointError(f"{path}: truncated safetensors file: {name!r} ends at byte {b} of the data, "
                          f"which has only {data_bytes}")


class _Weights:
  """The checkpoint's tensors, read lazily by name; records what was used and what was missing."""

  def __init__(self, index: dict):
    self.index, self.used, self.missing = index, set(), []

  def __contains__(self, name):
    return name in self.index

  def take(self, name, shape_hf) -> np.ndarray:
    """float32 tensor ``name``, checked against the shape the config implies."""
    if name not in self.index:
      self.missing.append(name)
      return np.zeros(shape_hf, np.float32)  # placeholder; finish() raises
    path, entry, start = self.index[name]
    self.used.add(name)
    if tuple(entry["shape"]) != tuple(shape_hf):
      raise CheckpointError(f"{path}: tensor {name!r} has shape {tuple(entry['shape'])}, but config.json "
                            f"implies {tuple(shape_hf)}")
    dtype = _DTYPES[entry["dtype"]]
    if not (np.issubdtype(dtype, np.floating) or dtype == ml_dtypes.bfloat16):
      raise CheckpointError(f"{path}: tensor {name!r} has dtype {entry['dtype']}, expected a float")
    a, b = entry["data_offsets"]
    arr = np.fromfile(path, dtype=dtype, count=math.prod(entry["shape"]), offset=start + a)
    return arr.reshape(entry["shape"]).astype(np.float32)

  def finish(self, source, ignored=lambda name: False):
    if self.missing:
      raise CheckpointError(f"{source}: missing tensors {self.missing[:8]}"
                            + (f" and {len(self.missing) - 8} more" if len(self.missing) > 8 else ""))
    extra = sorted(n for n in set(self.index) - self.used if not ignored(n))
    if extra:  # a tensor we do not map means a feature specjax would silently drop
      raise CheckpointError(f"{source}: unexpected tensors {extra[:8]} (a feature specjax does not model?)")


# ----------------------------------------------------------------------------- config helpers
def _get(cfg, key, path, default=None, required=False):
  if key in cfg and cfg[key] is not None:
    return cfg[key]
  if required:
    raise CheckpointError(f"{path}: missing required key {key!r}")
  return default


def _reject(path, what):
  raise CheckpointError(f"{path}: unsupported {what}")


def _build(path, module_cls, config_cls, fields, overrides, flat, source):
  try:
    cfg = config_cls(**{**fields, **overrides})
  except (TypeError, ValueError) as e:
    raise CheckpointError(f"{path}: cannot build {config_cls.__name__} ({e})") from e
  return from_flat_params(module_cls(cfg), flat, source=source)


def _first_id(value):
  return value[0] if isinstance(value, list) and value else value


# ----------------------------------------------------------------------------- Llama family
def _rope_theta(cfg, path):
  """v5 keeps RoPE settings in ``rope_parameters``; v4 in ``rope_theta`` + ``rope_scaling``."""
  params = cfg.get("rope_parameters") or {}
  rope_type = params.get("rope_type", params.get("type", "default"))
  if rope_type != "default":
    _reject(path, f"rope_parameters rope_type={rope_type!r} (specjax implements plain RoPE only)")
  if cfg.get("rope_scaling"):
    _reject(path, f"rope_scaling={cfg['rope_scaling']!r} (specjax implements plain RoPE only)")
  if cfg.get("partial_rotary_factor", 1.0) != 1.0:
    _reject(path, f"partial_rotary_factor={cfg['partial_rotary_factor']}")
  return float(params.get("rope_theta", cfg.get("rope_theta", 10000.0)))


def _check_llama_features(cfg, path, allow_sliding_window):
  for key in ("attention_bias", "mlp_bias"):
    if cfg.get(key):
      _reject(path, f"{key}=true (specjax projections have no biases)")
  if cfg.get("hidden_act", "silu") not in ("silu", "swish"):
    _reject(path, f"hidden_act={cfg['hidden_act']!r} (specjax's MLP is SwiGLU)")
  window = cfg.get("sliding_window")
  if window is not None and not allow_sliding_window:
    _reject(path, f"sliding_window={window} (specjax attends to the whole context; pass "
                  "allow_sliding_window=True to import anyway, exact while sequences fit the window)")


def _llama(folder, cfg, w: _Weights, allow_sliding_window, overrides) -> Model:
  from specjax.models.decoder import Decoder, DecoderConfig  # pylint: disable=import-outside-toplevel
  path = folder / "config.json"
  _check_llama_features(cfg, path, allow_sliding_window)
  v, e = _get(cfg, "vocab_size", path, required=True), _get(cfg, "hidden_size", path, required=True)
  layers = _get(cfg, "num_hidden_layers", path, required=True)
  h = _get(cfg, "num_attention_heads", path, required=True)
  k = _get(cfg, "num_key_value_heads", path, h)
  d = _get(cfg, "head_dim", path, e // h)
  f = _get(cfg, "intermediate_size", path, required=True)
  flat = {"embed": w.take("model.embed_tokens.weight", (v, e)),
          "final_norm/scale": w.take("model.norm.weight", (e,))}
  for i in range(layers):
    src, dst = f"model.layers.{i}", f"layer_{i}"
    flat[f"{dst}/attn/q"] = w.take(f"{src}.self_attn.q_proj.weight", (h * d, e)).T.reshape(e, h, d)
    flat[f"{dst}/attn/k"] = w.take(f"{src}.self_attn.k_proj.weight", (k * d, e)).T.reshape(e, k, d)
    flat[f"{dst}/attn/v"] = w.take(f"{src}.self_attn.v_proj.weight", (k * d, e)).T.reshape(e, k, d)
    flat[f"{dst}/attn/o"] = w.take(f"{src}.self_attn.o_proj.weight", (e, h * d)).T.reshape(h, d, e)
    flat[f"{dst}/mlp/gate"] = w.take(f"{src}.mlp.gate_proj.weight", (f, e)).T
    flat[f"{dst}/mlp/up"] = w.take(f"{src}.mlp.up_proj.weight", (f, e)).T
    flat[f"{dst}/mlp/down"] = w.take(f"{src}.mlp.down_proj.weight", (e, f)).T
    flat[f"{dst}/attn_norm/scale"] = w.take(f"{src}.input_layernorm.weight", (e,))
    flat[f"{dst}/mlp_norm/scale"] = w.take(f"{src}.post_attention_layernorm.weight", (e,))
  tied = bool(cfg.get("tie_word_embeddings", False))
  if not tied or "lm_head.weight" in w:
    head = w.take("lm_head.weight", (v, e))
    # like transformers 5: a tied config whose file holds a different head keeps both
    tied = tied and np.array_equal(head, flat["embed"])
    if not tied:
      flat["lm_head"] = head.T
  w.finish(folder, ignored=lambda n: n.endswith("rotary_emb.inv_freq"))  # old buffers, recomputed
  fields = dict(vocab_size=v, d_model=e, num_layers=layers, num_heads=h, num_kv_heads=k, head_dim=d, mlp_dim=f,
                tie_embeddings=tied, rope_theta=_rope_theta(cfg, path),
                norm_eps=float(_get(cfg, "rms_norm_eps", path, 1e-6)))
  return _build(path, Decoder, DecoderConfig, fields, overrides, flat, source=str(folder))


# ----------------------------------------------------------------------------- T5 v1.1
def _check_t5_features(cfg, path):
  ff = cfg.get("feed_forward_proj", "relu")
  if ff != "gated-gelu":
    _reject(path, f"feed_forward_proj={ff!r} (specjax's T5 is v1.1: gated-gelu)")
  if cfg.get("dense_act_fn", "gelu_new") not in ("gelu_new", "gelu_pytorch_tanh"):
    _reject(path, f"dense_act_fn={cfg['dense_act_fn']!r} (specjax's T5 uses tanh-approximate GELU)")


def _t5_attn(w, flat, dst, src, e, h, d, buckets=None):
  for n in "qkv":
    flat[f"{dst}/{n}"] = w.take(f"{src}.{n}.weight", (h * d, e)).T.reshape(e, h, d)
  flat[f"{dst}/o"] = w.take(f"{src}.o.weight", (e, h * d)).T.reshape(h, d, e)
  if buckets is not None:  # the bias table lives in layer 0's self-attention only
    flat[f"{dst}/rel_bias"] = w.take(f"{src}.relative_attention_bias.weight", (buckets, h))


def _t5_stack(w, flat, stack, layers, e, h, d, f, buckets):
  for i in range(layers):
    dst, src = f"{stack}/layers_{i}", f"{stack}.block.{i}.layer"
    _t5_attn(w, flat, f"{dst}/self_attn", f"{src}.0.SelfAttention", e, h, d, buckets if i == 0 else None)
    flat[f"{dst}/self_attn_norm/scale"] = w.take(f"{src}.0.layer_norm.weight", (e,))
    if stack == "decoder":
      _t5_attn(w, flat, f"{dst}/cross_attn", f"{src}.1.EncDecAttention", e, h, d)
      flat[f"{dst}/cross_attn_norm/scale"] = w.take(f"{src}.1.layer_norm.weight", (e,))
    ff = f"{src}.{2 if stack == 'decoder' else 1}"
    flat[f"{dst}/mlp/gate"] = w.take(f"{ff}.DenseReluDense.wi_0.weight", (f, e)).T
    flat[f"{dst}/mlp/up"] = w.take(f"{ff}.DenseReluDense.wi_1.weight", (f, e)).T
    flat[f"{dst}/mlp/down"] = w.take(f"{ff}.DenseReluDense.wo.weight", (e, f)).T
    flat[f"{dst}/mlp_norm/scale"] = w.take(f"{ff}.layer_norm.weight", (e,))
  flat[f"{stack}/final_norm/scale"] = w.take(f"{stack}.final_layer_norm.weight", (e,))


def _t5_ignored(name):
  # aliases of shared.weight, and a cross-attention bias HF itself never uses
  return name in ("encoder.embed_tokens.weight", "decoder.embed_tokens.weight",
                  "decoder.block.0.layer.1.EncDecAttention.relative_attention_bias.weight")


def _t5(folder, cfg, w: _Weights, allow_sliding_window, overrides) -> Model:
  del allow_sliding_window
  from specjax.models.t5 import T5, T5Config  # pylint: disable=import-outside-toplevel
  path = folder / "config.json"
  _check_t5_features(cfg, path)
  gen = _read_json(folder / "generation_config.json") if (folder / "generation_config.json").is_file() else {}
  v, e = _get(cfg, "vocab_size", path, required=True), _get(cfg, "d_model", path, required=True)
  h, d = _get(cfg, "num_heads", path, required=True), _get(cfg, "d_kv", path, required=True)
  f, enc_layers = _get(cfg, "d_ff", path, required=True), _get(cfg, "num_layers", path, required=True)
  dec_layers = _get(cfg, "num_decoder_layers", path, enc_layers)
  buckets = _get(cfg, "relative_attention_num_buckets", path, 32)
  shared = next((n for n in ("shared.weight", "encoder.embed_tokens.weight", "decoder.embed_tokens.weight")
                 if n in w), "shared.weight")
  flat = {"embed": w.take(shared, (v, e))}
  _t5_stack(w, flat, "encoder", enc_layers, e, h, d, f, buckets)
  _t5_stack(w, flat, "decoder", dec_layers, e, h, d, f, buckets)
  head_VxE = w.take("lm_head.weight", (v, e)) if "lm_head.weight" in w else flat["embed"]
  # transformers 4: a tied head also rescales the decoder output by d_model**-0.5; 5 names that
  # scale_decoder_outputs. specjax's T5 has no rescale, so it is folded into lm_head (exact).
  scale = cfg.get("scale_decoder_outputs", cfg.get("tie_word_embeddings", True))
  flat["lm_head"] = head_VxE.T * (e ** -0.5 if scale else 1.0)
  w.finish(folder, ignored=_t5_ignored)
  pad = _first_id(_get(cfg, "pad_token_id", path, 0))
  start = _get(gen, "decoder_start_token_id", path, _get(cfg, "decoder_start_token_id", path, pad))
  fields = dict(vocab_size=v, d_model=e, num_encoder_layers=enc_layers, num_decoder_layers=dec_layers,
                num_heads=h, head_dim=d, mlp_dim=f, relative_attention_num_buckets=buckets,
                relative_attention_max_distance=_get(cfg, "relative_attention_max_distance", path, 128),
                norm_eps=float(_get(cfg, "layer_norm_epsilon", path, 1e-6)), decoder_start_id=_first_id(start),
                pad_id=pad, eos_id=_first_id(_get(cfg, "eos_token_id", path, 1)))
  return _build(path, T5, T5Config, fields, overrides, flat, source=str(folder))


_IMPORTERS = {"LlamaForCausalLM": _llama, "MistralForCausalLM": _llama, "T5ForConditionalGeneration": _t5}
