"""The drafter registry: kind name -> its :class:`~specjax.drafters.spec.KindSpec`.

``register_kind(spec)`` makes a drafter buildable by name everywhere: the CLI
(``config.drafter.kind``), the dry run, every benchmark command, training and the exactness matrix.
``build(kind, options, target)`` gets the kind's frozen options dataclass (its defaults are the only
defaults) and the loaded target, and returns a :class:`specjax.drafters.Drafter`. A drafter in a
user's own module registers itself at import; the CLI imports the modules listed in
``config.imports`` before it builds anything. ``register(kind, build, options)`` is the older,
shorter form of the same.

Every options dataclass has ``gamma`` (drafts per round, or the tree's depth) and ``checkpoint``
(weights, if the family has any; "" means none / random init where that makes sense).
"""
from __future__ import annotations

import dataclasses
import importlib
from typing import Any, Callable

import ml_collections

from specjax.drafters.spec import KindSpec, Options, check, check_drafter
from specjax.models import heads as heads_lib
from specjax.suggest import did_you_mean

_REGISTRY: dict[str, KindSpec] = {}  # in registration order: the shipped kinds first

__all__ = ["Options", "build", "kinds", "make_options", "options_class", "register", "register_kind", "spec",
           "specs", "import_modules", "drafter_section", "parse_drafter", "option_values"]


def register_kind(kind_spec: KindSpec) -> KindSpec:
  """Registers (or replaces) a drafter kind after checking its declaration; returns it."""
  check(kind_spec)
  if kind_spec.head is not None:
    heads_lib.register_head(kind_spec.head, kind_spec.head_config)
  _REGISTRY[kind_spec.kind] = kind_spec
  return kind_spec


def register(kind: str, build: Callable[[Any, Any], Any], options: type = Options) -> None:
  """Registers (or replaces) a drafter kind from its build function and options dataclass alone."""
  register_kind(KindSpec(kind=kind, build=build, options=options))


def import_modules(modules) -> None:
  """Imports a user's modules (``config.imports``, ``--imports``), which register their own kinds."""
  for module in modules:
    importlib.import_module(module)


def drafter_section(kind: str, **values) -> ml_collections.ConfigDict:
  """A config's ``drafter`` section: ``kind`` and every option of the kind at its default, then
  ``values`` (so each option can be overridden from the command line)."""
  options = dataclasses.asdict(make_options(kind, {}))
  options.pop("seed")
  unknown = set(values) - set(options) - {"model"}
  if unknown:
    make_options(kind, {k: values[k] for k in unknown})  # raises, naming the key
  return ml_collections.ConfigDict({"kind": kind, **options, **values})


def kinds() -> tuple[str, ...]:
  return tuple(sorted(_REGISTRY))


def specs() -> tuple[KindSpec, ...]:
  """Every registered kind's declaration, in registration order."""
  return tuple(_REGISTRY.values())


def spec(kind: str) -> KindSpec:
  if kind not in _REGISTRY:
    raise ValueError(f"unknown drafter kind {kind!r}{did_you_mean(kind, _REGISTRY)}; registered: {', '.join(kinds())}")
  return _REGISTRY[kind]


def options_class(kind: str) -> type:
  return spec(kind).options


def make_options(kind: str, values: dict | None = None):
  """The kind's options from a mapping; an unknown key is an error that names it."""
  cls = options_class(kind)
  values = dict(values or {})
  names = [f.name for f in dataclasses.fields(cls)]
  for key in values:
    if key not in names:
      raise ValueError(f"drafter kind {kind!r} has no option {key!r}{did_you_mean(key, names)}; "
                       f"its options: {', '.join(names)}")
  try:
    return cls(**values)
  except (TypeError, ValueError) as e:
    raise ValueError(f"drafter kind {kind!r}: {e}") from e


def option_values(kind: str, texts) -> dict:
  """``{key: value}`` for ``KIND.KEY=VALUE`` strings (command-line drafter options) naming ``kind``;
  each value is read as the type of the option's default (int, float, bool, str, tuples of these)."""
  fields = {f.name: f for f in dataclasses.fields(options_class(kind))}
  defaults = dataclasses.asdict(make_options(kind, {}))
  values = {}
  for text in texts:
    head, eq, value = text.partition("=")
    owner, dot, key = head.partition(".")
    if not eq or not dot or not owner or not key:
      raise ValueError(f"drafter option {text!r} must read KIND.OPTION=VALUE (e.g. suffix.top=16)")
    if owner != kind:
      continue
    if key not in fields:
      make_options(kind, {key: value})  # raises, naming the key and the kind's options
    values[key] = _read_value(kind, key, value, defaults[key])
  return values


def _read_value(kind: str, key: str, text: str, default):
  import ast  # pylint: disable=import-outside-toplevel
  if isinstance(default, str):
    return text
  if isinstance(default, bool):
    if text.lower() not in ("true", "false", "1", "0"):
      raise ValueError(f"drafter option {kind}.{key} takes true or false, got {text!r}")
    return text.lower() in ("true", "1")
  try:
    value = ast.literal_eval(text)
  except (ValueError, SyntaxError) as e:
    raise ValueError(f"drafter option {kind}.{key}={text!r}: expected {type(default).__name__}") from e
  if isinstance(default, float) and isinstance(value, int) and not isinstance(value, bool):
    value = float(value)
  if isinstance(default, tuple) and isinstance(value, list):
    value = tuple(value)
  if default is not None and not isinstance(value, type(default)):
    raise ValueError(f"drafter option {kind}.{key}={text!r}: expected {type(default).__name__}")
  return value


def parse_drafter(text: str, option_texts=()) -> tuple[str, dict]:
  """``(kind, values)`` for a command-line drafter ``KIND[:CHECKPOINT]`` and ``KIND.OPTION=VALUE``
  strings (those of other kinds are skipped); the values are checked against the kind's options."""
  kind, _, checkpoint = text.partition(":")
  spec(kind)  # an unknown kind names the registered ones
  values = option_values(kind, option_texts)
  if checkpoint:
    values["checkpoint"] = checkpoint
  make_options(kind, values)
  return kind, values


def build(kind: str, options, target, model=None):
  """A drafter of a registered kind for ``target``; ``options``: the kind's dataclass or a mapping.

  ``model``: a small model already in hand, for the kinds that draft with one (``KindSpec.small_model``);
  then ``options.checkpoint`` is not read.
  """
  kind_spec = spec(kind)
  if not isinstance(options, kind_spec.options):
    options = make_options(kind, options if isinstance(options, dict) else dataclasses.asdict(options))
  if model is None:
    drafter = kind_spec.build(options, target)
  elif kind_spec.small_model is None:
    raise ValueError(f"drafter kind {kind!r} drafts without a separate small model; it takes no model")
  else:
    drafter = kind_spec.small_model(options, model)
  check_drafter(kind, drafter)
  drafter.check_compatible(target)
  return drafter
