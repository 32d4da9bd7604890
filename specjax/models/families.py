"""The model families, one table: name -> (module class, config class).

Read by checkpoints (``specjax.checkpoint``), the CLI and the dry run; a family is a module whose
config dataclass says everything about its shapes. ``from_fields`` random-initialises a model from
a config mapping such as a run config's ``target`` (``{"family": "decoder", "d_model": 64, ...}``).
"""
from __future__ import annotations

import dataclasses

from specjax.models import bundle
from specjax.suggest import did_you_mean
from specjax.models.decoder import Decoder, DecoderConfig
from specjax.models.t5 import T5, T5Config

FAMILIES = {"decoder": (Decoder, DecoderConfig), "t5": (T5, T5Config)}


def get(name: str):
  """``(module_cls, config_cls)`` of a family; an unknown name is an error that names it."""
  if name not in FAMILIES:
    raise ValueError(f"unknown model family {name!r}{did_you_mean(name, FAMILIES)}; expected one of {sorted(FAMILIES)}")
  return FAMILIES[name]


def family_of(module) -> str:
  for name, (module_cls, _) in FAMILIES.items():
    if isinstance(module, module_cls):
      return name
  raise ValueError(f"no registered family for module {type(module).__name__}")


def config_from_fields(fields: dict):
  """``(family, config)`` from a mapping of a family's config fields (``family`` defaults to decoder)."""
  fields = dict(fields)
  family = fields.pop("family", "decoder")
  fields.pop("checkpoint", None)
  module_cls, config_cls = get(family)
  names = {f.name for f in dataclasses.fields(config_cls)}
  unknown = sorted(set(fields) - names)
  if unknown:
    raise ValueError(f"{family} model config has no field {unknown[0]!r}{did_you_mean(unknown[0], names)}")
  return module_cls, config_cls(**fields)


def from_fields(fields: dict, seed: int = 0) -> bundle.Model:
  """A random-initialised model from its family's config fields."""
  module_cls, cfg = config_from_fields(fields)
  return bundle.init_model(module_cls(cfg), seed)
