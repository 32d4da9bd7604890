"""GGUF files (llama.cpp's format) -> specjax models, through the maintained ``gguf`` reader.

``from_gguf(path)`` reads the metadata into an HF-style config dict, names every tensor as
transformers does and hands both to :func:`specjax.hf_import.from_config`, so the GGUF and HF paths
share one mapping per family. Tensors are dequantized to float32 (``gguf.quants.dequantize``) one
at a time, as the importer takes them: a 1.5B model is 7 GB in float32.

llama.cpp's quirks, undone here (as transformers' GGUF loader does), declared per
``general.architecture`` with its family (:class:`specjax.models.families.GGUF`):
* Llama-architecture Q/K rows are permuted for llama.cpp's interleaved RoPE; specjax uses
  rotate-half, so rows go back: ``w.reshape(heads, d / heads / 2, 2, in).swapaxes(1, 2)``.
* Gemma's norm weights hold ``1 + w``; specjax's Gemma RMSNorm (``norm_offset=1``) wants ``w``.
* Qwen2's Q/K rows are stored as HF has them (its converter permutes only Llama); its q/k/v biases
  map to the HF names through the same ``blk.N.attn_q.bias`` pattern.
* Gemma 3's file has no local RoPE theta or sliding pattern: transformers' defaults (10k, every
  sixth layer global) are the released models' values.
"""
from __future__ import annotations

import contextlib
import functools
import pathlib
import re

import numpy as np

from specjax.checkpoint import CheckpointError
from specjax.data import gguf_tokenizer
from specjax.models import families
from specjax.models.bundle import Model

# general.architecture -> (HF architecture, HF model_type), as the families declare them
ARCHITECTURES = families.DeclaredView(
    lambda: {n: (a.hf_names[0], a.model_type) for n, a in families.gguf_architectures().items()})

_GLOBAL_NAMES = {"token_embd.weight": "model.embed_tokens.weight", "output_norm.weight": "model.norm.weight",
                 "output.weight": "lm_head.weight"}
# blk.N.<gguf> -> model.layers.N.<hf>; ffn_norm is Llama's second norm but Gemma's pre-MLP one
_BLOCK_NAMES = {
    "attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj", "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj", "attn_q_norm": "self_attn.q_norm", "attn_k_norm": "self_attn.k_norm",
    "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj", "ffn_down": "mlp.down_proj",
    "attn_norm": "input_layernorm", "post_attention_norm": "post_attention_layernorm",
    "post_ffw_norm": "post_feedforward_layernorm",
}
_BLOCK_RE = re.compile(r"blk\.(\d+)\.(\w+)\.(weight|bias)$")


def _gguf():
  try:
    import gguf  # pylint: disable=import-outside-toplevel
  except ImportError as e:
    raise ImportError("reading GGUF files needs the `gguf` package: pip install gguf==0.19.0") from e
  return gguf


_PARSED = None  # {(resolved path, args, kwargs): reader} inside fast_reader_everywhere, else None


def open_reader(path):
  """A ``gguf.GGUFReader`` over ``path``; a missing or corrupt file raises a CheckpointError naming it."""
  gguf = _gguf()
  path = pathlib.Path(path)
  if not path.is_file():
    raise CheckpointError(f"GGUF file not found: {path}")
  try:
    return _parsed_once(gguf_tokenizer.reader_class(gguf), path)  # parses 100k+ token strings 3x faster
  except Exception as e:  # the reader raises ValueError/IndexError/struct errors on broken files
    raise CheckpointError(f"{path}: not a readable GGUF file ({type(e).__name__}: {e})") from e


def _parsed_once(reader_cls, file, *args, **kwargs):
  if _PARSED is None:
    return reader_cls(str(file), *args, **kwargs)
  key = (str(pathlib.Path(file).resolve()), args, tuple(sorted(kwargs.items())))
  if key not in _PARSED:
    _PARSED[key] = reader_cls(str(file), *args, **kwargs)
  return _PARSED[key]


@contextlib.contextmanager
def fast_reader_everywhere():
  """Within the block, ``gguf.GGUFReader`` is the plain-array reader, and each file is parsed once,
  by specjax (:func:`open_reader`) and by code that parses GGUF files itself: transformers'
  ``from_pretrained(..., gguf_file=...)`` parses the file once for the config and again for the
  weights, each slow with gguf's own reader for a large vocabulary's token strings, and a parity check
  that converts the file too parses it a third time. The parsed fields and tensors are the same;
  the parsed files are dropped when the block ends."""
  global _PARSED  # pylint: disable=global-statement
  if _PARSED is not None:  # nested: the outer block already shares its parses
    yield
    return
  gguf = _gguf()
  original, _PARSED = gguf.GGUFReader, {}
  gguf.GGUFReader = functools.partial(_parsed_once, gguf_tokenizer.reader_class(gguf))
  try:
    yield
  finally:
    gguf.GGUFReader, _PARSED = original, None


def metadata(reader) -> dict:
  """Scalar and string metadata (token tables left out: they are the tokenizer's business)."""
  out = {}
  for key, field in reader.fields.items():
    if key.startswith("tokenizer.ggml.") and key.rsplit(".", 1)[1] in ("tokens", "scores", "token_type", "merges"):
      continue
    try:
      out[key] = field.contents()
    except Exception:  # pylint: disable=broad-except  # an exotic field type: not needed for the model
      pass
  return out


def hf_config(meta: dict, tensor_shapes: dict, path) -> dict:
  """The transformers-style config dict a GGUF's metadata describes."""
  arch = meta.get("general.architecture")
  declared = _declared(arch, path)

  def key(name, default=None, required=True):
    value = meta.get(f"{arch}.{name}", default)
    if value is None and required:
      raise CheckpointError(f"{path}: GGUF metadata lacks {arch}.{name}")
    return value

  hidden, heads = int(key("embedding_length")), int(key("attention.head_count"))
  # not every file states the vocabulary size; the embedding's rows always do
  vocab = key("vocab_size", required=False) or tensor_shapes.get("token_embd.weight", (0, 0))[-1]
  if not vocab:
    raise CheckpointError(f"{path}: GGUF file gives no vocabulary size ({arch}.vocab_size, token_embd.weight)")
  cfg = dict(architectures=[declared.hf_names[0]], model_type=declared.model_type, vocab_size=int(vocab),
             hidden_size=hidden, num_hidden_layers=int(key("block_count")),
             intermediate_size=int(key("feed_forward_length")),
             num_attention_heads=heads, num_key_value_heads=int(key("attention.head_count_kv", heads)),
             head_dim=int(key("attention.key_length", hidden // heads)),
             rms_norm_eps=float(key("attention.layer_norm_rms_epsilon")),
             rope_theta=float(key("rope.freq_base", 10000.0)),
             tie_word_embeddings="output.weight" not in tensor_shapes)
  scaling = key("rope.scaling.type", required=False)
  if scaling not in (None, "none"):
    cfg["rope_scaling"] = {"type": scaling, "factor": key("rope.scaling.factor", required=False)}
  quirks = declared.gguf
  if quirks.sliding_window != "ignored":  # Mistral files say llama: their window is optional
    required = quirks.sliding_window == "required"
    window = key("attention.sliding_window", required=required)
    if window or required:
      cfg["sliding_window"] = int(window)
  cfg.update(quirks.config)
  return cfg


def _declared(arch, path) -> families.Architecture:
  found = families.gguf_architectures()
  if arch not in found:
    raise CheckpointError(f"{path}: unsupported GGUF architecture {arch!r}; supported: {sorted(found)}")
  return found[arch]


def _hf_name(name: str, quirks: families.GGUF, path) -> str:
  if name in _GLOBAL_NAMES:
    return _GLOBAL_NAMES[name]
  m = _BLOCK_RE.match(name)
  if m is None or (m.group(2) not in _BLOCK_NAMES and m.group(2) != "ffn_norm"):
    raise CheckpointError(f"{path}: unexpected GGUF tensor {name!r} (a feature specjax does not model?)")
  layer, part, kind = m.groups()
  hf_part = quirks.ffn_norm if part == "ffn_norm" else _BLOCK_NAMES[part]
  return f"model.layers.{layer}.{hf_part}.{kind}"


def _unpermute(weight, heads: int):
  """Undo llama.cpp's Q/K row permutation (interleaved RoPE pairs -> rotate-half halves); ``weight``'s rows are its outputs."""
  out = weight.shape[0]
  return weight.reshape(heads, out // heads // 2, 2, *weight.shape[1:]).swapaxes(1, 2).reshape(weight.shape)


def gguf_weights(reader, cfg: dict, arch: str, path):
  """The file's tensors as lazy :class:`~specjax.hf_import.weights.Weights`: HF names and ``[out, in]``
  shapes up front (an unknown tensor fails before any work), each dequantized to float32 only when
  the importer takes it, so a whole float32 copy of the model is never held twice here."""
  from specjax.hf_import import weights as hf_weights  # pylint: disable=import-outside-toplevel
  gguf = _gguf()
  quirks = _declared(arch, path).gguf
  for t in reader.tensors:  # integer tensors are never weights: name them before anything else
    qtype = gguf.GGMLQuantizationType(t.tensor_type)
    if qtype.name in ("I8", "I16", "I32", "I64"):
      raise CheckpointError(f"{path}: tensor {t.name!r} has type {qtype.name}, which the gguf package "
                            f"cannot dequantize")
  by_name = {_hf_name(t.name, quirks, path): t for t in reader.tensors}

  def read(name):
    t = by_name[name]
    qtype = gguf.GGMLQuantizationType(t.tensor_type)
    try:
      w = gguf.quants.dequantize(t.data, qtype)
    except NotImplementedError as e:
      raise CheckpointError(f"{path}: tensor {t.name!r} has type {qtype.name}, which the gguf package "
                            f"cannot dequantize") from e
    w = np.asarray(w, np.float32).reshape(_hf_shape(t))
    if quirks.permute_qk and name.endswith(("q_proj.weight", "k_proj.weight")):
      heads = cfg["num_attention_heads"] if "q_proj" in name else cfg["num_key_value_heads"]
      w = _unpermute(w, heads)
    if quirks.norm_offset and name.endswith("norm.weight"):
      w = w - quirks.norm_offset
    return w

  return hf_weights.Weights({n: _hf_shape(t) for n, t in by_name.items()}, read, {n: str(path) for n in by_name})


def _hf_shape(t) -> tuple:
  return tuple(int(n) for n in reversed(t.shape))  # GGUF lists dimensions innermost first


def from_gguf(path, param_dtype: str | None = "float32", mesh=None, reader=None, **config_overrides) -> Model:
  """Loads a GGUF file as a specjax model, params dequantized and stored in ``param_dtype``
  (:mod:`specjax.precision`; float32 by default: the conversion cache keeps the dequantized values);
  on ``mesh`` when given, each tensor placed as soon as it is dequantized (:mod:`specjax.placement`).
  ``reader``: the file already parsed by :func:`open_reader`."""
  from specjax import precision  # pylint: disable=import-outside-toplevel
  from specjax import hf_import  # pylint: disable=import-outside-toplevel
  path = pathlib.Path(path)
  reader = reader or open_reader(path)
  meta = metadata(reader)
  cfg = hf_config(meta, {t.name: tuple(int(n) for n in t.shape) for t in reader.tensors}, path)
  weights = gguf_weights(reader, cfg, meta["general.architecture"], path)
  weights.dtype = precision.storage_dtype(param_dtype)
  return hf_import.from_config(cfg, weights, path, str(path), mesh=mesh, **config_overrides)
