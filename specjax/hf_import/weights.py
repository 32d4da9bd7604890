"""Tensors by name for the importers: safetensors files read lazily (the small reader of
:mod:`specjax.models.store`), or arrays already in memory (GGUF). Every read is checked against the
shape the config implies.

safetensors: an 8-byte header length, a JSON header and raw little-endian tensor bytes;
safetensors' numpy backend cannot represent bfloat16 (most released checkpoints), so dtypes map
through ``ml_dtypes``. Pickle checkpoints (``pytorch_model.bin``) are never loaded: unpickling
runs arbitrary code.
"""
from __future__ import annotations

import json
import pathlib
from typing import Callable

import ml_dtypes
import numpy as np

from specjax.checkpoint import CheckpointError
from specjax.models.store import SAFETENSORS_DTYPES as _DTYPES
from specjax.models.store import lazy_tensor, read_safetensors_header  # noqa: F401  (read_safetensors_header re-exported)

_PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".ckpt", ".pkl")


def read_json(path: pathlib.Path) -> dict:
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
    weight_map = read_json(index).get("weight_map")
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


def safetensors_weights(folder: pathlib.Path) -> "Weights":
  """The tensors of an HF folder's ``model.safetensors`` (or its shards), read lazily."""
  index = _weight_index(folder)

  def read(name):
    path, entry, start = index[name]
    dtype = _DTYPES[entry["dtype"]]
    if not (np.issubdtype(dtype, np.floating) or dtype == ml_dtypes.bfloat16):
      raise CheckpointError(f"{path}: tensor {name!r} has dtype {entry['dtype']}, expected a float")
    return lazy_tensor(path, entry, start)  # read when placed: whole, or only this process's slices

  return Weights({n: tuple(e["shape"]) for n, (_, e, _) in index.items()}, read,
                 {n: str(p) for n, (p, _, _) in index.items()})


def array_weights(arrays: dict, source: str) -> "Weights":
  """Tensors already in memory (e.g. dequantized from a GGUF file), HF-named."""
  return Weights({n: tuple(a.shape) for n, a in arrays.items()}, arrays.__getitem__,
                 {n: source for n in arrays})


class Weights:
  """The checkpoint's tensors by name; records what was used and what was missing."""

  def __init__(self, shapes: dict, read: Callable[[str], np.ndarray], where: dict, dtype=np.float32):
    self.shapes, self.read, self.where, self.used, self.missing = shapes, read, where, set(), []
    self.dtype = np.dtype(dtype)  # storage dtype of 2+-dim tensors; 1-D ones stay float32
    self.mesh = None  # where the importer places each param as it is taken (specjax.placement); None: one device

  def __contains__(self, name):
    return name in self.shapes

  def take(self, name, shape_hf):
    """Tensor ``name`` (``self.dtype``; float32 if 1-D), checked against the shape the config implies."""
    if name not in self.shapes:
      if name not in self.missing:
        self.missing.append(name)
      return np.zeros(shape_hf, np.float32)  # placeholder; finish() raises
    self.used.add(name)
    if tuple(self.shapes[name]) != tuple(shape_hf):
      raise CheckpointError(f"{self.where[name]}: tensor {name!r} has shape {tuple(self.shapes[name])}, but the "
                            f"config implies {tuple(shape_hf)}")
    x = self.read(name)  # numpy, or a specjax.models.lazy.Lazy that the placement reads
    want = self.dtype if x.ndim >= 2 else np.dtype(np.float32)
    return x if x.dtype == want else x.astype(np.float32).astype(want)  # no float32 detour for bf16 -> bf16

  def finish(self, source, ignored=lambda name: False):
    if self.missing:
      raise CheckpointError(f"{source}: missing tensors {self.missing[:8]}"
                            + (f" and {len(self.missing) - 8} more" if len(self.missing) > 8 else ""))
    extra = sorted(n for n in set(self.shapes) - self.used if not ignored(n))
    if extra:  # a tensor we do not map means a feature specjax would silently drop
      raise CheckpointError(f"{source}: unexpected tensors {extra[:8]} (a feature specjax does not model?)")
