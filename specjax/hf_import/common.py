"""Config helpers shared by the importers: required keys, rejections that name the key, building."""
from __future__ import annotations

from specjax.checkpoint import CheckpointError, from_flat_params


def get(cfg, key, path, default=None, required=False):
  if key in cfg and cfg[key] is not None:
    return cfg[key]
  if required:
    raise CheckpointError(f"{path}: missing required key {key!r}")
  return default


def reject(path, what):
  raise CheckpointError(f"{path}: unsupported {what}")


def build(path, module_cls, config_cls, fields, overrides, flat, source):
  try:
    cfg = config_cls(**{**fields, **overrides})
  except (TypeError, ValueError) as e:
    raise CheckpointError(f"{path}: cannot build {config_cls.__name__} ({e})") from e
  return from_flat_params(module_cls(cfg), flat, source=source)


def first_id(value):
  return value[0] if isinstance(value, list) and value else value
