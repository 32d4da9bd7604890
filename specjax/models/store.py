"""The one checkpoint layout of every model specjax saves (targets, heads, draft_lm, Medusa).

A checkpoint is a folder with

* ``config.json``: ``{"family": ..., "config": {...}}`` plus optional metadata (a training report);
* ``model.safetensors``: the params flattened to '/'-joined names, stored in float32 or bfloat16
  (float16 too, for heads trained and shipped that way); params a family takes from elsewhere (the
  target's frozen embedding) are left out;
* ``vocab_subset.npy`` (optional): a truncated draft vocabulary, ``K`` distinct int32 token ids.

The checkpoints shipped in ``specjax/assets`` hold ``model.safetensors.xz`` instead (the same bytes,
xz-compressed, so the repository stays small): :func:`specjax.models.packed.weights_folder` unpacks
it once into ``$SPECJAX_CACHE/assets/<sha256>/``, a folder every reader below reads as it reads any.

Reading streams the weights one tensor at a time, each cast to a storage dtype
(:func:`specjax.precision.cast_leaf`), so host memory peaks near the loaded params plus one tensor:
a small reader of our own (:func:`read_safetensors_header`, :func:`read_tensor`) reads each
tensor's bytes alone into memory of its own, where safetensors' ``safe_open`` maps the whole file
(every page read stays in the resident set until it is closed) and cannot give numpy bfloat16.
Every failure is a :class:`CheckpointError` that names the file: missing, corrupt, wrong family,
names or shapes that do not match the config. This module sits below the model families on
purpose: it imports numpy, ml_dtypes, jax, flax, safetensors, json, mmap,
:mod:`specjax.precision` and :mod:`specjax.models.lazy` only.
"""
from __future__ import annotations

import itertools
import json
import mmap
import pathlib

import flax.linen as nn
import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
from flax import traverse_util

from specjax import precision
from specjax.models import lazy

ASSETS = pathlib.Path(__file__).resolve().parent.parent / "assets"  # the checkpoints shipped with specjax
CONFIG_FILE = "config.json"
WEIGHTS_FILE = "model.safetensors"
PACKED_WEIGHTS_FILE = WEIGHTS_FILE + ".xz"  # shipped checkpoints: lossless, unpacked on first read
SUBSET_FILE = "vocab_subset.npy"
STORAGE_DTYPES = ("float32", "bfloat16", "float16")
SAFETENSORS_DTYPES = {"F64": np.dtype("<f8"), "F32": np.dtype("<f4"), "F16": np.dtype("<f2"),
                      "BF16": np.dtype(ml_dtypes.bfloat16), "I64": np.dtype("<i8"), "I32": np.dtype("<i4"),
                      "I16": np.dtype("<i2"), "I8": np.dtype("i1"), "U8": np.dtype("u1"), "BOOL": np.dtype("?")}


class CheckpointError(ValueError):
  """A checkpoint that cannot be loaded; the message names the file and what is wrong."""


def np_dtype(name: str):
  """The numpy dtype of a storage dtype name (``float32``, ``bfloat16``, ``float16``)."""
  import ml_dtypes  # pylint: disable=import-outside-toplevel
  table = {"float32": np.float32, "bfloat16": ml_dtypes.bfloat16, "float16": np.float16}
  if name not in table:
    raise ValueError(f"storage dtype {name!r}; expected one of {', '.join(STORAGE_DTYPES)}")
  return table[name]


# ----------------------------------------------------------------------------- save
def save(folder, family: str, config: dict, params, dtype: str = "float32", skip=(), subset=None,
         extra: dict | None = None) -> pathlib.Path:
  """Writes a checkpoint folder: every param but those named in ``skip`` in ``dtype`` storage, the
  config (with ``extra`` beside it in config.json) and, when given, the vocab subset."""
  from safetensors.numpy import save_file  # pylint: disable=import-outside-toplevel
  extra = dict(extra or {})
  clash = sorted({"family", "config"} & set(extra))
  if clash:
    raise ValueError(f"checkpoint metadata may not override {clash}")
  folder = pathlib.Path(folder)
  folder.mkdir(parents=True, exist_ok=True)
  storage = np_dtype(dtype)
  flat = unstack_layers(traverse_util.flatten_dict(jax.device_get(params), sep="/"))
  save_file({k: np.asarray(v, np.float32).astype(storage) for k, v in flat.items() if k not in set(skip)},
            str(folder / WEIGHTS_FILE))
  if subset is not None:
    np.save(folder / SUBSET_FILE, np.asarray(subset, np.int32))
  meta = {"family": family, "config": dict(config), **extra}
  (folder / CONFIG_FILE).write_text(json.dumps(meta, indent=2) + "\n")
  return folder


# ----------------------------------------------------------------------------- read
def read_meta(folder, families=None, what: str = "specjax") -> dict:
  """config.json of a checkpoint folder (whose model.safetensors must exist too); ``families``: the
  family names the caller can load (any, when None)."""
  folder = pathlib.Path(folder)
  cfg_path = folder / CONFIG_FILE
  if not cfg_path.is_file():
    raise CheckpointError(f"checkpoint file missing: {cfg_path}")
  if not ((folder / WEIGHTS_FILE).is_file() or (folder / PACKED_WEIGHTS_FILE).is_file()):
    raise CheckpointError(f"checkpoint file missing: {folder / WEIGHTS_FILE}")
  try:
    meta = json.loads(cfg_path.read_text())
    if not isinstance(meta, dict) or not isinstance(meta.get("config"), dict) or "family" not in meta:
      raise KeyError("expected a JSON object with 'family' and a 'config' object")
  except (json.JSONDecodeError, UnicodeDecodeError, KeyError) as e:
    raise CheckpointError(f"{cfg_path}: not a valid specjax config ({type(e).__name__}: {e})") from e
  if families is not None and meta["family"] not in families:
    raise CheckpointError(f"{cfg_path}: family {meta['family']!r} is not a {what} family; "
                          f"expected one of {sorted(families)}")
  return meta


def read_family(folder) -> str | None:
  """The family named by ``folder/config.json``, or None when there is no readable one."""
  try:
    meta = json.loads((pathlib.Path(folder) / CONFIG_FILE).read_text())
  except (OSError, json.JSONDecodeError, UnicodeDecodeError):
    return None
  return meta.get("family") if isinstance(meta, dict) else None


def make_config(config_cls, meta: dict, folder, **overrides):
  """``config_cls`` from a checkpoint's config (plus ``overrides``); a bad field names config.json."""
  try:
    return config_cls(**{**meta["config"], **overrides})
  except (TypeError, ValueError) as e:
    raise CheckpointError(f"{pathlib.Path(folder) / CONFIG_FILE}: not a valid {meta['family']} config "
                          f"({type(e).__name__}: {e})") from e


def read_safetensors_header(path) -> dict:
  """Validated header: ``{name: (entry, data_start)}``; a truncated or corrupt file raises."""
  path = pathlib.Path(path)
  size = path.stat().st_size
  with open(path, "rb") as fh:
    head = fh.read(8)
    if len(head) < 8:
      raise CheckpointError(f"{path}: corrupt or truncated safetensors file ({size} bytes, no header)")
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
  if isinstance(entry, dict) and entry.get("dtype") not in SAFETENSORS_DTYPES:
    raise CheckpointError(f"{path}: tensor {name!r} has dtype {entry.get('dtype')!r}, which specjax does not "
                          f"read (known: {sorted(SAFETENSORS_DTYPES)})")
  try:
    dtype, shape, (a, b) = SAFETENSORS_DTYPES[entry["dtype"]], entry["shape"], entry["data_offsets"]
    want = _numel(shape) * dtype.itemsize
  except (KeyError, TypeError, ValueError) as e:
    raise CheckpointError(f"{path}: corrupt safetensors header entry for {name!r}: {entry!r}") from e
  if b - a != want or a < 0:
    raise CheckpointError(f"{path}: corrupt safetensors header: {name!r} {entry['dtype']}{shape} needs "
                          f"{want} bytes, offsets {a}..{b} give {b - a}")
  if b > data_bytes:
    raise CheckpointError(f"{path}: corrupt or truncated safetensors file: {name!r} ends at byte {b} of the "
                          f"data, which has only {data_bytes}")


def _numel(shape) -> int:
  return int(np.prod(shape, dtype=np.int64))


_OWN_MAPPING_BYTES = 1 << 20


def read_tensor(path, entry: dict, start: int) -> np.ndarray:
  """One tensor of a checked header entry, read from the file alone (numpy; bfloat16 via ml_dtypes).

  A tensor of 1 MiB or more is read into an anonymous memory mapping of its own, which goes back to
  the OS the moment it is freed: malloc would serve these from its heap (its mmap threshold rises
  to 32 MiB as large blocks are freed) and keep the holes they leave between the params already
  placed (``python -m specjax.bench load_memory`` measures what a load keeps).
  """
  a, b = entry["data_offsets"]
  out = _empty(entry["shape"], SAFETENSORS_DTYPES[entry["dtype"]])
  with open(path, "rb") as fh:
    fh.seek(start + a)
    got = fh.readinto(memoryview(out.reshape(-1).view(np.uint8)))
  if got != b - a:  # the header was checked against the file's size: only a file cut meanwhile
    raise CheckpointError(f"{path}: corrupt or truncated safetensors file: read {got} of {b - a} bytes")
  return out


def _empty(shape, dtype) -> np.ndarray:
  """An uninitialised array; from 1 MiB up in an anonymous memory mapping of its own (see
  :func:`read_tensor`)."""
  nbytes = _numel(shape) * np.dtype(dtype).itemsize
  if nbytes < _OWN_MAPPING_BYTES or not hasattr(mmap, "MAP_ANONYMOUS"):
    return np.empty(shape, dtype)
  buf = mmap.mmap(-1, nbytes, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
  return np.frombuffer(buf, dtype=dtype).reshape(shape)


def read_slice(path, entry: dict, start: int, index) -> np.ndarray:
  """The slice ``index`` (one ``(start, stop)`` per dim) of a checked header entry, reading only its
  bytes: one read per contiguous run (the dims after the last partial one are whole), into memory
  of its own like :func:`read_tensor`."""
  dtype, shape = SAFETENSORS_DTYPES[entry["dtype"]], tuple(entry["shape"])
  if all(a == 0 and b == n for (a, b), n in zip(index, shape)):
    return read_tensor(path, entry, start)
  out_shape = tuple(b - a for a, b in index)
  last = max(i for i, ((a, b), n) in enumerate(zip(index, shape)) if (a, b) != (0, n))
  strides = [_numel(shape[i + 1:]) for i in range(len(shape))]
  run = (index[last][1] - index[last][0]) * strides[last] * dtype.itemsize  # bytes
  out = _empty(out_shape, dtype)
  if out.size == 0:
    return out
  view = memoryview(out.reshape(-1).view(np.uint8))
  base = start + entry["data_offsets"][0] + index[last][0] * strides[last] * dtype.itemsize
  with open(path, "rb") as fh:
    for j, lead in enumerate(itertools.product(*(range(a, b) for a, b in index[:last]))):
      fh.seek(base + sum(i * s for i, s in zip(lead, strides)) * dtype.itemsize)
      if fh.readinto(view[j * run:(j + 1) * run]) != run:
        raise CheckpointError(f"{path}: corrupt or truncated safetensors file: short read in {entry!r}")
  return out


def lazy_tensor(path, entry: dict, start: int) -> lazy.Lazy:
  """A checked header entry as a :class:`specjax.models.lazy.Lazy`: read whole or by slices."""
  return lazy.Lazy(entry["shape"], SAFETENSORS_DTYPES[entry["dtype"]],
                   lambda index: read_slice(path, entry, start, index))


def read_safetensors(path, dtype, out: dict | None = None) -> dict:
  """``{name: array}`` of a safetensors file, each tensor read alone and cast (``precision.cast_leaf``).
  Given ``out`` (a :class:`specjax.placement.PlacedParams`), each tensor goes there unread, as a
  :class:`~specjax.models.lazy.Lazy` cast to its storage dtype: the placement reads it whole, or on a
  mesh only the slices this process's devices hold."""
  dtype = jnp.dtype(dtype)
  flat = {} if out is None else out
  for name, (entry, start) in read_safetensors_header(path).items():
    x = lazy_tensor(path, entry, start)
    flat[name] = precision.cast_leaf(x if out is not None else x.read(), dtype)
  return flat


def read_params(folder, dtype=jnp.float32, out: dict | None = None) -> dict:
  """The flat params of a checkpoint folder, cast to the storage ``dtype`` as they are read (into
  ``out`` when given)."""
  return read_safetensors(pathlib.Path(folder) / WEIGHTS_FILE, dtype, out)


def check_subset(subset_K, vocab_size: int, what: str = "drafter") -> None:
  """A clear error for a subset that is not ``K`` distinct ids in ``[0, vocab_size)``."""
  s = np.asarray(subset_K)
  if s.ndim != 1 or s.size == 0:
    raise ValueError(f"{what}: vocab subset must be a non-empty 1-D array of token ids, got shape {s.shape}")
  if not np.issubdtype(s.dtype, np.integer):
    raise ValueError(f"{what}: vocab subset must hold integer token ids, got dtype {s.dtype}")
  if s.size > vocab_size:
    raise ValueError(f"{what}: vocab subset has K={s.size} ids, more than the target's vocab_size={vocab_size}")
  bad = s[(s < 0) | (s >= vocab_size)]
  if bad.size:
    raise ValueError(f"{what}: vocab subset ids out of range [0, vocab_size={vocab_size}): {bad[:5].tolist()}")
  if np.unique(s).size != s.size:
    raise ValueError(f"{what}: vocab subset has repeated ids ({s.size - np.unique(s).size} duplicates)")


def read_subset(folder, vocab_size: int | None = None, required: bool = False) -> np.ndarray | None:
  """``folder/vocab_subset.npy`` as int32 (checked against ``vocab_size`` when given), or None when
  there is none and it is not ``required``."""
  folder = pathlib.Path(folder)
  path = folder / SUBSET_FILE
  if not path.is_file():
    if (folder / "subset.npy").is_file():
      raise CheckpointError(f"{folder / 'subset.npy'}: the vocab subset file is named {SUBSET_FILE} now; rename it")
    if required:
      raise CheckpointError(f"checkpoint file missing: {path}")
    return None
  try:
    subset = np.load(path, allow_pickle=False)
  except (OSError, ValueError) as e:
    raise CheckpointError(f"{path}: corrupt vocab subset file ({e})") from e
  if vocab_size is not None:
    try:
      check_subset(subset, vocab_size, str(path))
    except ValueError as e:
      raise CheckpointError(str(e)) from e
  elif not np.issubdtype(subset.dtype, np.integer) or subset.ndim != 1:
    raise CheckpointError(f"{path}: a vocab subset is a 1-D array of token ids, got {subset.dtype} {subset.shape}")
  return subset.astype(np.int32)


# ----------------------------------------------------------------------------- names and shapes
def expected_shapes(module, *args, **kwargs) -> dict:
  """``{name: shape}`` of ``module``'s params ('/'-joined), from an abstract init on these inputs."""
  abstract = jax.eval_shape(lambda: module.init(jax.random.PRNGKey(0), *args, **kwargs))
  return {k: tuple(v.shape) for k, v in traverse_util.flatten_dict(nn.unbox(abstract["params"]), sep="/").items()}


def check_params(expected: dict, flat: dict, source: str = "<params>") -> None:
  """Every expected name present with its shape, nothing else; the error names ``source``."""
  missing = sorted(set(expected) - set(flat))
  extra = sorted(set(flat) - set(expected))
  if missing or extra:
    raise CheckpointError(f"{source}: params do not match the config: missing {missing[:5]}, "
                          f"unexpected {extra[:5]}")
  for k, shape in expected.items():
    if tuple(flat[k].shape) != tuple(shape):
      raise CheckpointError(f"{source}: param {k!r} has shape {tuple(flat[k].shape)}, "
                            f"config expects {tuple(shape)}")


# scanned layers: params "layers/<name>" [L, ...] <-> "layer_{i}/<name>", the names on disk
_SCANNED = "layers/"


def stack_layers(flat: dict, num_layers: int) -> dict:
  """'/'-joined params with per-layer names ``layer_{i}/...`` -> one ``layers/...`` array ``[L, ...]``
  per name (a decoder with ``scan_layers``). Pops the per-layer arrays as it stacks each name."""
  names = sorted({k.split("/", 1)[1] for k in flat if k.startswith("layer_0/")})
  for name in names:
    keys = [f"layer_{i}/{name}" for i in range(num_layers)]
    missing = [k for k in keys if k not in flat]
    if missing:  # left for check_params to report with the source's name
      continue
    flat[_SCANNED + name] = np.stack([np.asarray(flat.pop(k)) for k in keys])
  return flat


def unstack_layers(flat: dict) -> dict:
  """The inverse of :func:`stack_layers` (a no-op on per-layer params): what checkpoints store."""
  out = {}
  for k, v in flat.items():
    if k.startswith(_SCANNED):
      for i in range(v.shape[0]):
        out[f"layer_{i}/{k[len(_SCANNED):]}"] = v[i]
    else:
      out[k] = v
  return out


def per_layer_params(params) -> dict:
  """Nested params with ``layer_{i}`` subtrees, whether the model scans its layers or not."""
  flat = traverse_util.flatten_dict(params, sep="/")
  return traverse_util.unflatten_dict(unstack_layers(flat), sep="/")


def unflatten(flat: dict) -> dict:
  """Nested params from '/'-joined names. Empties ``flat`` as it moves each array to the device, so
  host copies are not all held at once."""
  return traverse_util.unflatten_dict({k: jnp.asarray(flat.pop(k)) for k in list(flat)}, sep="/")
