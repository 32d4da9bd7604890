"""The drafter registry: kind name -> (options dataclass, build function).

``register(kind, build, options=Options)`` makes a drafter buildable by name everywhere: the CLI
(``config.drafter.kind``), the dry run and the benchmark commands. ``build(options, target)`` gets
the kind's frozen options dataclass (its defaults are the only defaults) and the loaded target, and
returns a :class:`specjax.drafters.Drafter`. A drafter in a user's own module registers itself at
import; the CLI imports the modules listed in ``config.imports`` before it builds anything.

Every options dataclass has ``gamma`` (drafts per round, or the tree's depth) and ``checkpoint``
(weights, if the family has any; "" means none / random init where that makes sense).
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable

from specjax.suggest import did_you_mean

_REGISTRY: dict[str, tuple[type, Callable]] = {}


@dataclasses.dataclass(frozen=True)
class Options:
  """The fields every drafter kind takes; kinds subclass this with their own."""
  gamma: int = 4
  checkpoint: str = ""
  seed: int = 0

  def __post_init__(self):
    if isinstance(self.gamma, bool) or not isinstance(self.gamma, int) or self.gamma < 1:
      raise ValueError(f"gamma must be an integer >= 1, got {self.gamma!r}")


def register(kind: str, build: Callable[[Any, Any], Any], options: type = Options) -> None:
  """Registers (or replaces) a drafter kind. ``options`` must be a frozen dataclass subclassing Options."""
  if not isinstance(kind, str) or not kind.isidentifier():
    raise ValueError(f"drafter kind must be an identifier-like string, got {kind!r}")
  if not (dataclasses.is_dataclass(options) and issubclass(options, Options)):
    raise TypeError(f"register({kind!r}): options must be a dataclass subclassing "
                    f"specjax.drafters.Options, got {options!r}")
  _REGISTRY[kind] = (options, build)


def kinds() -> tuple[str, ...]:
  return tuple(sorted(_REGISTRY))


def options_class(kind: str) -> type:
  return _entry(kind)[0]


def _entry(kind: str):
  if kind not in _REGISTRY:
    raise ValueError(f"unknown drafter kind {kind!r}{did_you_mean(kind, _REGISTRY)}; registered: {', '.join(kinds())}")
  return _REGISTRY[kind]


def make_options(kind: str, values: dict | None = None):
  """The kind's options from a mapping; an unknown key is an error that names it."""
  cls = _entry(kind)[0]
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


def build(kind: str, options, target):
  """A drafter of a registered kind for ``target``; ``options``: the kind's dataclass or a mapping."""
  cls, fn = _entry(kind)
  if not isinstance(options, cls):
    options = make_options(kind, options if isinstance(options, dict) else dataclasses.asdict(options))
  drafter = fn(options, target)
  drafter.check_compatible(target)
  return drafter
