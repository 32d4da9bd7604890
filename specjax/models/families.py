"""The model families and the checkpoint architectures each imports: the registry and its lookups.

Each family is declared once, in its module of :mod:`specjax.families` (:class:`Family`): module
and config class, encoder-decoder or not, which config fields give the KV cache's shape and the
depths, and the HF / GGUF architectures it imports (:class:`Architecture`: the importer, what sets
the architecture apart as the importer's options, where its ``config.json`` states the cache shape
and context, and what llama.cpp's files of it differ in). Checkpoints (``specjax.checkpoint``), the
CLI, the importers, preflight and the dry run read these declarations instead of asking a family's
or an architecture's name. ``from_fields`` random-initialises a model from a config mapping such as
a run config's ``target`` (``{"family": "decoder", "d_model": 64, ...}``).
"""
from __future__ import annotations

import collections.abc
import dataclasses
from typing import Callable

from specjax.models import bundle
from specjax.suggest import did_you_mean


@dataclasses.dataclass(frozen=True)
class HFShape:
  """Where an HF ``config.json`` states the KV cache's shape and the context: per quantity the keys
  to read, the first one set wins."""
  layers: tuple = ("num_hidden_layers",)
  heads: tuple = ("num_attention_heads", "num_heads")
  kv_heads: tuple = ("num_key_value_heads",)  # none set: ``heads``
  head_dim: tuple = ("head_dim",)  # none set: ``width // heads``
  width: str | None = "hidden_size"
  context: str | None = "max_position_embeddings"  # None: no fixed context (relative positions)

  def read(self, meta: dict) -> tuple:
    """``(layers, kv_heads, head_dim, context)``; 0 for a shape field the config lacks, None for no context."""
    heads = int(_first(meta, self.heads) or 1)
    width = int(meta.get(self.width) or 0) if self.width else 0
    context = meta.get(self.context) if self.context else None
    return (int(_first(meta, self.layers) or 0), int(_first(meta, self.kv_heads) or heads),
            int(_first(meta, self.head_dim) or width // heads), int(context) if context else None)


def _first(meta: dict, keys: tuple):
  return next((meta[k] for k in keys if meta.get(k)), None)


@dataclasses.dataclass(frozen=True)
class GGUF:
  """How llama.cpp's files of one ``general.architecture`` differ from the HF checkpoint they convert."""
  name: str  # the file's ``general.architecture``
  permute_qk: bool = False  # Q/K rows interleaved for llama.cpp's RoPE: put back to rotate-half
  ffn_norm: str = "post_attention_layernorm"  # the HF norm that ``blk.N.ffn_norm`` is
  norm_offset: float = 0.0  # norm weights stored as ``offset + w``
  sliding_window: str = "ignored"  # or "optional" / "required": ``<arch>.attention.sliding_window``
  config: dict = dataclasses.field(default_factory=dict, hash=False)  # HF config entries the file does not state

  def __post_init__(self):
    if self.sliding_window not in ("ignored", "optional", "required"):
      raise ValueError(f"GGUF {self.name}: sliding_window={self.sliding_window!r}; expected ignored, optional "
                       f"or required")


@dataclasses.dataclass(frozen=True)
class Architecture:
  """One HF checkpoint architecture a family imports. ``importer(path, source, cfg, weights,
  overrides, **options)`` builds the model; ``options`` are what set this architecture apart from
  others sharing the importer."""
  hf_names: tuple  # config.json ``architectures[0]`` values
  model_type: str  # config.json ``model_type``
  importer: Callable
  options: dict = dataclasses.field(default_factory=dict, hash=False)
  hf_shape: HFShape = HFShape()
  gguf: GGUF | None = None  # None: no GGUF files of it are read

  def load(self, path, source, cfg, weights, overrides):
    return self.importer(path, source, cfg, weights, overrides, **self.options)


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
  architectures: tuple = ()  # the HF / GGUF checkpoints it imports

  @property
  def hf_model_types(self) -> tuple:
    """config.json ``model_type``s of HF checkpoints of this family."""
    return tuple(dict.fromkeys(a.model_type for a in self.architectures))

  def cache_shape(self, fields: dict) -> tuple:
    """``(layers, kv_heads, head_dim)`` from a mapping of config fields (0 for a missing one)."""
    return tuple(int(fields.get(f, 0) or 0) for f in self.cache_fields)

  def decoder_layers_field(self) -> str:
    return self.cache_fields[0]


_DECLARED: dict = {}


def declare(family: Family) -> Family:
  """Registers a model family under its name (its checkpoints' ``family``), replacing an earlier
  declaration of that name. An HF or GGUF architecture name another family imports is an error."""
  others = [f for f in _DECLARED.values() if f.name != family.name]
  for what, table in (("HF architecture", _hf_table), ("GGUF architecture", _gguf_table)):
    taken, own = table(others), table([family])
    clash = sorted(set(taken) & set(own))
    if clash:
      raise ValueError(f"family {family.name!r} declares {what} {clash[0]!r}, which family "
                       f"{taken[clash[0]][0].name!r} imports")
  _DECLARED[family.name] = family
  return family


def names() -> tuple:
  return tuple(_DECLARED)


def family(name: str) -> Family:
  """The declaration of a family; an unknown name is an error that names it."""
  if name not in _DECLARED:
    raise ValueError(f"unknown model family {name!r}{did_you_mean(name, _DECLARED)}; expected one of {sorted(_DECLARED)}")
  return _DECLARED[name]


# ----------------------------------------------------------------------------- architectures
def _hf_table(declared) -> dict:
  return {n: (f, a) for f in declared for a in f.architectures for n in a.hf_names}


def _gguf_table(declared) -> dict:
  return {a.gguf.name: (f, a) for f in declared for a in f.architectures if a.gguf is not None}


def hf_architectures() -> dict:
  """HF architecture name (``architectures[0]``) -> its :class:`Architecture`, every family's."""
  return {n: a for n, (_, a) in _hf_table(_DECLARED.values()).items()}


def gguf_architectures() -> dict:
  """GGUF ``general.architecture`` -> its :class:`Architecture`, every family's."""
  return {n: a for n, (_, a) in _gguf_table(_DECLARED.values()).items()}


def of_hf_config(meta: dict) -> tuple | None:
  """``(family, architecture)`` of an HF ``config.json``: by its ``architectures[0]``, else its
  ``model_type`` (None: no family declares either)."""
  arch = (meta.get("architectures") or [None])[0]
  found = _hf_table(_DECLARED.values()).get(arch)
  if found is None:
    found = next(((f, a) for f in _DECLARED.values() for a in f.architectures
                  if a.model_type == meta.get("model_type")), None)
  return found


class DeclaredView(collections.abc.Mapping):
  """A read-only mapping computed from the declarations at each use, so a family declared after
  the reader was imported is in it."""

  def __init__(self, table: Callable[[], dict]):
    self._table = table

  def __getitem__(self, key):
    return self._table()[key]

  def __iter__(self):
    return iter(self._table())

  def __len__(self):
    return len(self._table())

  def __repr__(self):
    return repr(self._table())


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
