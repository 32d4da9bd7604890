"""What a run needs, known before any weight is read or anything compiles.

* :func:`describe`: a model spec (a checkpoint, or family fields of a random init) -> its parameter
  count, KV cache shape and context length, from metadata only: a GGUF header
  (``<arch>.context_length``, tensor shapes), an HF ``config.json`` (``max_position_embeddings``) and
  safetensors headers, a specjax bundle's ``config.json`` (an optional ``context_length``, or the
  GGUF it was converted from), or abstract shapes of the family's init.
* :func:`check_memory`: params + KV caches of target and drafter against the memory this machine
  has, so a paper-size config without weights fails in seconds instead of being killed mid-init.
* :func:`cache_length`: the cache length a run needs, checked against the model's context and a
  requested ``max_len``, with the numbers and what to change in the error.

Params are counted in their storage dtype (the spec's ``param_dtype``, :mod:`specjax.precision`),
KV caches in the spec's ``cache_dtype`` (default: its compute ``dtype``).
"""
from __future__ import annotations

import dataclasses
import json
import math
import mmap
import os
import pathlib
import struct

GB = 1e9


@dataclasses.dataclass(frozen=True)
class ModelInfo:
  params: int
  layers: int = 0      # KV cache shape; 0: the model keeps no cache of its own (or it is not known)
  kv_heads: int = 0
  head_dim: int = 0
  encoder: bool = False  # T5: cross-attention keys/values over the prompt too
  context: int | None = None  # None: no limit known (random init, relative positions)
  context_source: str = ""
  param_dtype: str = "float32"
  cache_dtype: str = "float32"

  def param_bytes(self) -> int:
    return self.params * _ITEMSIZE[self.param_dtype]

  def kv_bytes(self, rows: int, max_len: int, prompt_len: int) -> int:
    slots = max_len + (prompt_len if self.encoder else 0)
    return 2 * self.layers * self.kv_heads * self.head_dim * _ITEMSIZE[self.cache_dtype] * rows * slots


_ITEMSIZE = {"float32": 4, "bfloat16": 2, "float16": 2}


# ----------------------------------------------------------------------------- describing models
def describe(spec) -> ModelInfo | None:
  """``spec``: ``{"checkpoint": ...}`` or a family's config fields. None: nothing to read (a
  checkpoint that is not there: loading names it)."""
  from specjax import precision  # pylint: disable=import-outside-toplevel
  spec = dict(spec)
  dtypes = dict(param_dtype=precision.resolve(spec.pop("param_dtype", "auto")),
                cache_dtype=str(spec.get("cache_dtype") or spec.get("dtype") or "float32"))
  if dtypes["cache_dtype"] not in _ITEMSIZE:
    raise ValueError(f"cache_dtype={dtypes['cache_dtype']!r}; expected one of {', '.join(_ITEMSIZE)}")
  if spec.get("checkpoint"):
    info = describe_checkpoint(str(spec["checkpoint"]))
    return None if info is None else dataclasses.replace(info, **dtypes)
  from specjax.models import families  # pylint: disable=import-outside-toplevel
  module_cls, cfg = families.config_from_fields(spec)
  family = families.of_config(cfg)
  return ModelInfo(abstract_params(module_cls, cfg), *family.cache_shape(dataclasses.asdict(cfg)),
                   encoder=family.encoder_decoder, **dtypes)


def describe_checkpoint(source: str) -> ModelInfo | None:
  from specjax import loading, registry  # pylint: disable=import-outside-toplevel
  if source in registry.REGISTRY:
    return gguf_info(registry.gguf_path(source), source)
  path = pathlib.Path(source).expanduser()
  if not path.exists() and (loading.ASSETS / source).exists():
    path = loading.ASSETS / source
  if loading.hub_id(source):  # a hub id: its snapshot in huggingface_hub's cache, if fetched
    from specjax import hub  # pylint: disable=import-outside-toplevel
    path = hub.cached(source) or path
  if path.suffix == ".gguf" and path.is_file():
    return gguf_info(path, path.name)
  if not (path / "config.json").is_file():
    return None
  try:
    meta = json.loads((path / "config.json").read_text())
  except (json.JSONDecodeError, UnicodeDecodeError):
    return None  # loading names what is wrong with it
  if not isinstance(meta, dict):
    return None
  params = safetensors_params(path)
  if "family" in meta:  # a specjax bundle
    cfg = meta.get("config", {})
    family = _declared_family(meta["family"])
    shape = _kv_shape_fields(cfg, family)
    context, where = meta.get("context_length"), f"{path}/config.json context_length"
    source_json = path / "source.json"  # a converted GGUF: the file it came from says
    if context is None and source_json.is_file():
      gguf = pathlib.Path(json.loads(source_json.read_text()).get("gguf") or "/nonexistent")
      if gguf.suffix == ".gguf" and gguf.is_file():
        info = gguf_info(gguf, gguf.name)
        context, where = info.context, info.context_source
    return ModelInfo(params, *shape, encoder=bool(family and family.encoder_decoder), context=context,
                     context_source=where if context else "")
  from specjax.models import families  # pylint: disable=import-outside-toplevel
  family, arch = families.of_hf_config(meta) or (None, None)
  hf_shape = arch.hf_shape if arch else families.HFShape()  # undeclared: read as a decoder
  *shape, context = hf_shape.read(meta)
  return ModelInfo(params, *shape, encoder=bool(family and family.encoder_decoder), context=context,
                   context_source=f"{path}/config.json {hf_shape.context}" if context else "")


def safetensors_params(folder: pathlib.Path) -> int:
  from specjax.hf_import import read_safetensors_header  # pylint: disable=import-outside-toplevel
  from specjax.models.packed import weights_path  # pylint: disable=import-outside-toplevel
  files = sorted(folder.glob("*.safetensors")) or [p for p in [weights_path(folder)] if p.is_file()]
  return sum(math.prod(entry["shape"]) for f in files for entry, _ in read_safetensors_header(f).values())


def _declared_family(name):
  """The declared model family of a bundle (None: a bundle of none, e.g. a draft_lm)."""
  from specjax.models import families  # pylint: disable=import-outside-toplevel
  return families.family(name) if name in families.names() else None


def _kv_shape_fields(fields: dict, family) -> tuple:
  """A bundle's cache shape: its family's declared fields, or any model with layers of KV heads (heads: none)."""
  if family is not None:
    return family.cache_shape(fields)
  if "num_layers" not in fields or "head_dim" not in fields:
    return 0, 0, 0
  return (int(fields["num_layers"]), int(fields.get("num_kv_heads", fields.get("num_heads", 0))),
          int(fields["head_dim"]))


def abstract_params(module_cls, cfg) -> int:
  """Parameter count from abstract shapes. Tracing a deep model's init takes seconds, so a
  1-layer and a 2-layer copy are traced and the per-layer count extrapolated (layers are alike:
  per-layer windows change no shapes, T5's relative bias lives in layer 0 alone)."""
  from specjax.models import families  # pylint: disable=import-outside-toplevel
  fields = [f.name for f in dataclasses.fields(cfg) if f.name in families.layer_fields()]
  if sum(getattr(cfg, f) for f in fields) <= 2 * len(fields) + 1:
    return _count(module_cls, cfg)
  ones = {f: 1 for f in fields}
  base = _count(module_cls, _probe(cfg, ones))
  total = base
  for f in fields:
    total += (_count(module_cls, _probe(cfg, {**ones, f: 2})) - base) * (getattr(cfg, f) - 1)
  return total


def _probe(cfg, layers: dict):
  extra = {"layer_windows": ()} if hasattr(cfg, "layer_windows") else {}
  return dataclasses.replace(cfg, **layers, **extra)


def _count(module_cls, cfg) -> int:
  import flax.linen as nn  # pylint: disable=import-outside-toplevel
  import jax  # pylint: disable=import-outside-toplevel
  from specjax.models import bundle  # pylint: disable=import-outside-toplevel
  module = module_cls(cfg)
  args, kwargs = bundle._dummy_inputs(module)  # pylint: disable=protected-access
  abstract = jax.eval_shape(lambda: module.init(jax.random.PRNGKey(0), *args, **kwargs))
  return sum(math.prod(x.shape) for x in jax.tree_util.tree_leaves(nn.unbox(abstract["params"])))


# ----------------------------------------------------------------------------- GGUF header
_SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}


def gguf_info(path, name: str) -> ModelInfo:
  """Params, cache shape and ``<arch>.context_length`` from a GGUF header, read in place (the
  token tables are skipped, not parsed: a 262k-token vocabulary costs a fraction of a second)."""
  meta, tensors = read_gguf_header(path)
  arch = meta.get("general.architecture", "")
  heads = int(meta.get(f"{arch}.attention.head_count", 1) or 1)
  hidden = int(meta.get(f"{arch}.embedding_length", 0))
  shape = (int(meta.get(f"{arch}.block_count", 0)), int(meta.get(f"{arch}.attention.head_count_kv", heads)),
           int(meta.get(f"{arch}.attention.key_length", hidden // heads)))
  context = meta.get(f"{arch}.context_length")
  return ModelInfo(sum(math.prod(s) for s in tensors.values()), *shape,
                   context=int(context) if context else None,
                   context_source=f"GGUF {arch}.context_length of {name}" if context else "")


def read_gguf_header(path) -> tuple[dict, dict]:
  """``(scalar and string metadata, {tensor name: shape})`` of a GGUF file (arrays left out)."""
  from specjax.checkpoint import CheckpointError  # pylint: disable=import-outside-toplevel
  with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as buf:
    try:
      return _parse_gguf(buf)
    except (struct.error, ValueError, UnicodeDecodeError) as e:
      raise CheckpointError(f"{path}: not a readable GGUF header ({e})") from e


def _parse_gguf(buf) -> tuple[dict, dict]:
  if buf[:4] != b"GGUF":
    raise ValueError("no GGUF magic")
  pos = 8  # magic, version
  n_tensors, n_kv = struct.unpack_from("<QQ", buf, pos)
  pos += 16

  def string(pos):
    (n,) = struct.unpack_from("<Q", buf, pos)
    return buf[pos + 8:pos + 8 + n].decode("utf-8", errors="replace"), pos + 8 + n

  def value(kind, pos, keep=True):
    if kind in _SCALARS:
      fmt = _SCALARS[kind]
      return (struct.unpack_from(fmt, buf, pos)[0] if keep else None), pos + struct.calcsize(fmt)
    if kind == 8:
      return string(pos)
    if kind == 9:  # arrays (token tables): skipped
      inner, count = struct.unpack_from("<IQ", buf, pos)
      pos += 12
      if inner in _SCALARS:
        return None, pos + count * struct.calcsize(_SCALARS[inner])
      for _ in range(count):
        _, pos = value(inner, pos, keep=False)
      return None, pos
    raise ValueError(f"unknown GGUF value type {kind}")

  meta = {}
  for _ in range(n_kv):
    key, pos = string(pos)
    (kind,) = struct.unpack_from("<I", buf, pos)
    meta[key], pos = value(kind, pos + 4)
  tensors = {}
  for _ in range(n_tensors):
    name, pos = string(pos)
    (n_dims,) = struct.unpack_from("<I", buf, pos)
    tensors[name] = struct.unpack_from(f"<{n_dims}Q", buf, pos + 4)
    pos += 4 + 8 * n_dims + 12  # dims, type, offset
  return meta, tensors


# ----------------------------------------------------------------------------- memory
def available_memory(devices: int = 1) -> tuple[int | None, str]:
  """``(bytes, where)``: free device memory over ``devices`` accelerators, or on a CPU backend the
  host's available memory (/proc/meminfo MemAvailable; None when it cannot be read)."""
  import jax  # pylint: disable=import-outside-toplevel
  if jax.default_backend() != "cpu":
    stats = [d.memory_stats() or {} for d in jax.local_devices()[:max(devices, 1)]]
    if stats and all("bytes_limit" in s for s in stats):
      free = sum(s["bytes_limit"] - s.get("bytes_in_use", 0) for s in stats)
      return free, f"{len(stats)} {jax.default_backend()} device{'s' * (len(stats) > 1)}"
    return None, ""
  try:
    for line in pathlib.Path("/proc/meminfo").read_text().splitlines():
      if line.startswith("MemAvailable:"):
        return int(line.split()[1]) * 1024, "this machine"
  except OSError:
    pass
  try:
    return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"), "this machine"
  except (ValueError, OSError, AttributeError):
    return None, ""


def check_memory(parts: list[tuple[str, ModelInfo]], rows: int, max_len: int, prompt_len: int,
                 devices: int = 1, available=None) -> int:
  """Raises when params + KV caches of ``parts`` (``(name, info)``) exceed the memory there is;
  returns the bytes needed. ``available``: ``(bytes, where)``, default :func:`available_memory`."""
  pieces, total = [], 0
  for name, info in parts:
    params, kv = info.param_bytes(), info.kv_bytes(rows, max_len, prompt_len)
    total += params + kv
    pieces.append(f"{name} {_count_str(info.params)} {info.param_dtype} params = {params / GB:.1f} GB"
                  + (f" + {info.cache_dtype} KV cache {kv / GB:.2f} GB" if kv else ""))
  have, where = available if available is not None else available_memory(devices)
  if have is not None and total > have:
    raise NotEnoughMemory(
        f"not enough memory: this run needs ~{total / GB:.1f} GB ({'; '.join(pieces)}; "
        f"{rows} row{'s' * (rows > 1)} of {max_len} cache slots) but {where} has {have / GB:.1f} GB available. "
        "Plan it without weights: add --dry_run; or run a smaller model, batch_size or max_len")
  return total


class NotEnoughMemory(ValueError):  # a ValueError: the CLI prints it as one line, exit code 2
  pass


def _count_str(n: int) -> str:
  return f"{n / 1e9:.1f}B" if n >= 1e9 else f"{n / 1e6:.0f}M" if n >= 1e6 else f"{n / 1e3:.0f}K"


# ----------------------------------------------------------------------------- context
def cache_length(*, prompt_len: int, max_new_tokens: int, slots: int, requested: int = 0,
                 context: int | None = None, context_source: str = "", prompt_what: str = "the prompt") -> int:
  """The cache length a run needs (``prompt_len + max_new_tokens + slots``), checked: it must fit
  the model's ``context`` and a ``requested`` max_len (0: none). Returns the cache length to use."""
  needed = prompt_len + max_new_tokens + slots
  parts = (f"{prompt_what} ({prompt_len} tokens) + max_new_tokens ({max_new_tokens}) + {slots} verify "
           f"slot{'s' * (slots > 1)} = {needed}")
  check_requested(requested, context, context_source)
  if requested and needed > requested:
    raise ValueError(f"cache too small: {parts} slots, but --config.max_len={requested}; raise max_len to "
                     f"{needed}{_fix(requested, prompt_len, max_new_tokens, slots)}")
  if context is not None and needed > context:
    raise ValueError(f"{parts} exceeds the model's context length {context} ({context_source})"
                     f"{_fix(context, prompt_len, max_new_tokens, slots, first=True)}")
  return requested or needed


def check_requested(requested: int, context: int | None, context_source: str) -> None:
  """A requested max_len past the model's context is an error (known before anything loads)."""
  if context is not None and requested > context:
    raise ValueError(f"max_len={requested} exceeds the model's context length {context} ({context_source}); "
                     f"use --config.max_len={context} or less (0: just what the run needs)")


def _fix(limit: int, prompt_len: int, max_new_tokens: int, slots: int, first: bool = False) -> str:
  room = limit - prompt_len - slots
  lead = "; " if first else ", or "
  if room >= 1:
    return f"{lead}lower --config.max_new_tokens to {room} or less, or shorten the prompt"
  return f"{lead}shorten the prompt to {limit - max_new_tokens - slots} tokens or less"
