"""The one checkpoint layout of every model specjax saves (targets, heads, draft_lm, Medusa).

A checkpoint is a folder with

* ``config.json``: ``{"family": ..., "config": {...}}`` plus optional metadata (a training report);
* ``model.safetensors``: the params flattened to '/'-joined names, stored in float32 or bfloat16
  (float16 too, for heads trained and shipped that way); params a family takes from elsewhere (the
  target's frozen embedding) are left out;
* ``vocab_subset.npy`` (optional): a truncated draft vocabulary, ``K`` distinct int32 token ids.

Reading streams the weights one tensor at a time, each cast to a storage dtype
(:func:`specjax.precision.cast_leaf`), so host memory peaks near the loaded params plus one tensor.
Every failure is a :class:`CheckpointError` that names the file: missing, corrupt, wrong family,
names or shapes that do not match the config. This module sits below the model families on
purpose: it imports numpy, jax, flax, safetensors, json and :mod:`specjax.precision` only.
"""
from __future__ import annotations

import json
import pathlib

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
from flax import traverse_util

from specjax import precision

ASSETS = pathlib.Path(__file__).resolve().parent.parent / "assets"  # the checkpoints shipped with specjax
CONFIG_FILE = "config.json"
WEIGHTS_FILE = "model.safetensors"
SUBSET_FILE = "vocab_subset.npy"
STORAGE_DTYPES = ("float32", "bfloat16", "float16")


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
  for p in (cfg_path, folder / WEIGHTS_FILE):
    if not p.is_file():
      raise CheckpointError(f"checkpoint file missing: {p}")
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


def read_safetensors(path, dtype) -> dict:
  """``{name: array}`` of a safetensors file, each tensor read alone and cast (``precision.cast_leaf``)."""
  from safetensors import SafetensorError, safe_open  # pylint: disable=import-outside-toplevel
  dtype = jnp.dtype(dtype)
  flat = {}
  try:
    with safe_open(str(path), framework="flax") as f:
      for name in f.keys():
        flat[name] = precision.cast_leaf(f.get_tensor(name), dtype)
  except (SafetensorError, OSError, ValueError, TypeError) as e:
    raise CheckpointError(f"{path}: corrupt or truncated safetensors file ({e})") from e
  return flat


def read_params(folder, dtype=jnp.float32) -> dict:
  """The flat params of a checkpoint folder, cast to the storage ``dtype`` as they are read."""
  return read_safetensors(pathlib.Path(folder) / WEIGHTS_FILE, dtype)


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
