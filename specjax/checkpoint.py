"""Save and load model bundles (targets and other full models) in specjax's one checkpoint layout.

The layout, shared by every model specjax saves (:mod:`specjax.models.store`): ``config.json``
({"family": ..., "config": {...}}) and ``model.safetensors`` with params flattened to '/'-joined
names, stored in float32 or bfloat16 (no pickle anywhere). Loading reads one tensor at a time and
casts it to the chosen storage dtype as it goes (:mod:`specjax.precision`), so host memory peaks
near the loaded params plus one tensor, not at whole-file copies; with ``mesh=`` each tensor goes
straight to its final sharding (:mod:`specjax.placement`). HF imports live in ``specjax.hf_import``.
"""
from __future__ import annotations

import dataclasses
import pathlib

from specjax import placement
from specjax.models import bundle, store
from specjax.models.bundle import Model
from specjax.models.store import CheckpointError, read_safetensors  # noqa: F401  (re-exported)

_np_dtype = store.np_dtype


def save_model(model: Model, folder, dtype: str = "float32") -> pathlib.Path:
  from specjax.models import families  # pylint: disable=import-outside-toplevel
  return store.save(folder, families.family_of(model.module), dataclasses.asdict(model.config), model.params, dtype)


def load_model(folder, param_dtype: str | None = "auto", mesh=None, **config_overrides) -> Model:
  """Loads a specjax model folder, params in ``param_dtype`` (``specjax.precision``; ``"auto"``:
  float32 on CPU, bfloat16 on accelerators); every failure names the file and what is wrong.

  ``mesh``: a ``jax.sharding.Mesh``; each tensor goes to its final sharding as it is read
  (:mod:`specjax.placement`), equal to ``sharding.shard(load_model(folder), mesh)``.
  """
  from specjax import precision  # pylint: disable=import-outside-toplevel
  from specjax.models import families  # pylint: disable=import-outside-toplevel
  folder = pathlib.Path(folder)
  meta = store.read_meta(folder, families.names(), "model")
  dtype = precision.storage_dtype(param_dtype)
  module_cls, config_cls = families.get(meta["family"])
  module = module_cls(store.make_config(config_cls, meta, folder, **config_overrides))
  flat = store.read_params(folder, dtype, out=placement.PlacedParams(module, mesh))
  return from_flat_params(module, flat, source=str(folder / store.WEIGHTS_FILE), mesh=mesh)


def from_flat_params(module, flat: dict, source: str = "<params>", mesh=None) -> Model:
  """Checks names and shapes against the module's abstract params, then builds the bundle. Empties
  ``flat`` as it moves each array to the device (or to its sharding on ``mesh``), so host copies are
  not all held at once. A name or shape the module does not expect stays as given, for the check
  to report; a value set later into the placed dict (per-layer params stacked for a scanned
  decoder) is placed as it is set."""
  return bundle.from_flat(module, placement.place_flat(module, flat, mesh), source)
