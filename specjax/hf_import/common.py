"""Config helpers shared by the importers: required keys, rejections that name the key, building."""
from __future__ import annotations

from specjax import placement
from specjax.checkpoint import CheckpointError, from_flat_params


def get(cfg, key, path, default=None, required=False):
  if key in cfg and cfg[key] is not None:
    return cfg[key]
  if required:
    raise CheckpointError(f"{path}: missing required key {key!r}")
  return default


def reject(path, what):
  raise CheckpointError(f"{path}: unsupported {what}")


def _config(path, config_cls, fields, overrides):
  try:
    return config_cls(**{**fields, **overrides})
  except (TypeError, ValueError) as e:
    raise CheckpointError(f"{path}: cannot build {config_cls.__name__} ({e})") from e


def placed_params(path, module_cls, config_cls, fields, overrides, mesh):
  """An empty params dict for the importer to fill: each tensor goes to its final sharding on
  ``mesh`` (or the default device) as it is set (:class:`specjax.placement.PlacedParams`). ``fields``
  as far as they are known before reading: they decide names, shapes and shardings only."""
  return placement.PlacedParams(module_cls(_config(path, config_cls, fields, overrides)), mesh)


def build(path, module_cls, config_cls, fields, overrides, flat, source, mesh=None):
  return from_flat_params(module_cls(_config(path, config_cls, fields, overrides)), flat, source=source, mesh=mesh)


def first_id(value):
  return value[0] if isinstance(value, list) and value else value
