"""The model families, each declared once (:class:`Family`): module and config class, encoder-decoder
or not, which config fields give the KV cache's shape and the depths, and the HF ``model_type``s it
imports. Checkpoints (``specjax.checkpoint``), the CLI, preflight and the dry run read these
declarations instead of asking a family's name; a family is a module whose config dataclass says
everything about its shapes. ``from_fields`` random-initialises a model from
a config mapping such as a run config's ``target`` (``{"family": "decoder", "d_model": 64, ...}``).
"""
from __future__ import annotations

import dataclasses

from specjax.models import bundle
from specjax.suggest import did_you_mean
from specjax.models.decoder import Decoder, DecoderConfig
from specjax.models.t5 import T5, T5Config



@dataclasses.dataclass(frozen=True)
class Family:
  """One model family. ``cache_fields``: the config fields of the decoder's KV cache shape (layers,
  KV heads, head width); ``layer_fields``: every depth field (parameter counts extrapolate over them)."""
  name: str
  module: type
  config: type
  encoder_decoder: bool = False
  cache_fields: tuple = ("num_layers", "num_kv_heads", "head_dim")
  layer_fields: tuple = ("num_layers",)
  hf_model_types: tuple = ()  # config.json ``model_type``s of HF checkpoints of this family

  def cache_shape(self, fields: dict) -> tuple:
    """``(layers, kv_heads, head_dim)`` from a mapping of config fields (0 for a missing one)."""
    return tuple(int(fields.get(f, 0) or 0) for f in self.cache_fields)

  def decoder_layers_field(self) -> str:
    return self.cache_fields[0]


_DECLARED: dict = {}


def declare(family: Family) -> Family:
  """Registers a model family under its name (its checkpoints' ``family``)."""
  _DECLARED[family.name] = family
  return family


declare(Family("decoder", Decoder, DecoderConfig,
               hf_model_types=("llama", "mistral", "qwen2", "qwen3", "gemma3_text")))
declare(Family("t5", T5, T5Config, encoder_decoder=True,
               cache_fields=("num_decoder_layers", "num_heads", "head_dim"),
               layer_fields=("num_encoder_layers", "num_decoder_layers"), hf_model_types=("t5",)))


def names() -> tuple:
  return tuple(_DECLARED)


def family(name: str) -> Family:
  """The declaration of a family; an unknown name is an error that names it."""
  if name not in _DECLARED:
    raise ValueError(f"unknown model family {name!r}{did_you_mean(name, _DECLARED)}; expected one of {sorted(_DECLARED)}")
  return _DECLARED[name]


def of_hf_model_type(model_type) -> Family | None:
  """The family that imports HF checkpoints of ``model_type`` (None: none declares it)."""
  return next((f for f in _DECLARED.values() if model_type in f.hf_model_types), None)


def of_config(config) -> Family:
  """The family whose config class ``config`` is an instance of."""
  for f in _DECLARED.values():
    if isinstance(config, f.config):
      return f
  raise ValueError(f"no registered family for config {type(config).__name__}")


def layer_fields() -> tuple:
  """Every declared family's depth fields."""
  return tuple(dict.fromkeys(name for f in _DECLARED.values() for name in f.layer_fields))


def get(name: str):
  """``(module_cls, config_cls)`` of a family; an unknown name is an error that names it."""
  f = family(name)
  return f.module, f.config


def family_of(module) -> str:
  for f in _DECLARED.values():
    if isinstance(module, f.module):
      return f.name
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
