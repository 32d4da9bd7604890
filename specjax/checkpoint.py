"""Save and load model bundles as safetensors + config.json (no pickle anywhere).

Layout of a model folder: ``config.json`` ({"family": ..., "config": {...}}) and
``model.safetensors`` with params flattened to '/'-joined names, stored in float32 or bfloat16.
Loading reads one tensor at a time and casts it to the chosen storage dtype as it goes
(:mod:`specjax.precision`), so host memory peaks near the loaded params plus one tensor, not at
whole-file copies. HF imports live in ``specjax.hf_import``.
"""
from __future__ import annotations

import dataclasses
import json
import pathlib

import jax
import numpy as np
from flax import traverse_util

from specjax.models.bundle import Model

class CheckpointError(ValueError):
  pass


def save_model(model: Model, folder, dtype: str = "float32") -> pathlib.Path:
  from safetensors.numpy import save_file  # pylint: disable=import-outside-toplevel
  folder = pathlib.Path(folder)
  folder.mkdir(parents=True, exist_ok=True)
  flat = traverse_util.flatten_dict(jax.device_get(model.params), sep="/")
  arrays = {k: np.asarray(v, dtype=np.float32).astype(_np_dtype(dtype)) for k, v in flat.items()}
  save_file(arrays, str(folder / "model.safetensors"))
  from specjax.models import families  # pylint: disable=import-outside-toplevel
  meta = {"family": families.family_of(model.module), "config": dataclasses.asdict(model.config)}
  (folder / "config.json").write_text(json.dumps(meta, indent=2) + "\n")
  return folder


def _np_dtype(name):
  import ml_dtypes  # pylint: disable=import-outside-toplevel
  return {"float32": np.float32, "bfloat16": ml_dtypes.bfloat16}[name]


def load_model(folder, param_dtype: str | None = "auto", **config_overrides) -> Model:
  """Loads a specjax model folder, params in ``param_dtype`` (``specjax.precision``; ``"auto"``:
  float32 on CPU, bfloat16 on accelerators); every failure names the file and what is wrong."""
  from specjax import precision  # pylint: disable=import-outside-toplevel
  folder = pathlib.Path(folder)
  cfg_path, weights_path = folder / "config.json", folder / "model.safetensors"
  for p in (cfg_path, weights_path):
    if not p.is_file():
      raise CheckpointError(f"checkpoint file missing: {p}")
  dtype = precision.storage_dtype(param_dtype)
  try:
    meta = json.loads(cfg_path.read_text())
    from specjax.models import families  # pylint: disable=import-outside-toplevel
    module_cls, config_cls = families.FAMILIES[meta["family"]]
    cfg = config_cls(**{**meta["config"], **config_overrides})
  except (json.JSONDecodeError, KeyError, TypeError) as e:
    raise CheckpointError(f"{cfg_path}: not a valid specjax config ({type(e).__name__}: {e})") from e
  return from_flat_params(module_cls(cfg), read_safetensors(weights_path, dtype), source=str(weights_path))


def read_safetensors(path, dtype) -> dict:
  """``{name: array}`` of a safetensors file, each tensor read alone and cast (``precision.cast_leaf``)."""
  from safetensors import SafetensorError, safe_open  # pylint: disable=import-outside-toplevel
  from specjax import precision  # pylint: disable=import-outside-toplevel
  flat = {}
  try:
    with safe_open(str(path), framework="flax") as f:
      for name in f.keys():
        flat[name] = precision.cast_leaf(f.get_tensor(name), dtype)
  except (SafetensorError, OSError, ValueError, TypeError) as e:
    raise CheckpointError(f"{path}: corrupt or truncated safetensors file ({e})") from e
  return flat


def from_flat_params(module, flat: dict, source: str = "<params>") -> Model:
  """Checks names and shapes against the module's abstract params, then builds the bundle. Empties
  ``flat`` as it moves each array to the device, so host copies are not all held at once."""
  from specjax.models.bundle import _dummy_inputs  # pylint: disable=import-outside-toplevel
  import flax.linen as nn  # pylint: disable=import-outside-toplevel
  args, kwargs = _dummy_inputs(module)
  abstract = nn.unbox(jax.eval_shape(lambda: module.init(jax.random.PRNGKey(0), *args, **kwargs))["params"])
  expected = traverse_util.flatten_dict(abstract, sep="/")
  missing = sorted(set(expected) - set(flat))
  extra = sorted(set(flat) - set(expected))
  if missing or extra:
    raise CheckpointError(f"{source}: params do not match the config: missing {missing[:5]}, "
                          f"unexpected {extra[:5]}")
  for k, spec in expected.items():
    if tuple(flat[k].shape) != tuple(spec.shape):
      raise CheckpointError(f"{source}: param {k!r} has shape {tuple(flat[k].shape)}, "
                            f"config expects {tuple(spec.shape)}")
  params = traverse_util.unflatten_dict({k: jax.numpy.asarray(flat.pop(k)) for k in list(flat)}, sep="/")
  return Model(module=module, params=params)
