"""The pieces every measured table is built from: ``Table``, ``Sources`` (the JSON files a table
reads), the ``@table`` registry and the cell formats (``tools/tables.py`` renders them)."""
from __future__ import annotations

import dataclasses
import glob
import json
import os
import pathlib
from typing import Callable


class TableError(ValueError):
  """A table that cannot be rendered (a missing JSON file or key) or a malformed region."""


@dataclasses.dataclass
class Table:
  """A header, rows of cell texts, and a note under the table. A link written ``[text](@/path)``
  (in a cell or the note) is to ``path`` from the repository root; rendering makes it relative."""
  header: list
  rows: list
  note: str = ""
  data_line: bool = True  # False: the rows link their own files


class Sources:
  """Loads JSON files relative to the repository root and remembers which ones a table read."""

  def __init__(self, root: pathlib.Path):
    self.root = root
    self.used: list[str] = []

  def json(self, rel: str):
    path = self.root / rel
    if not path.is_file():
      raise TableError(f"{rel}: not found (a table reads it)")
    if rel not in self.used:
      self.used.append(rel)
    return json.loads(path.read_text(encoding="utf-8"))

  def glob(self, pattern: str) -> list[str]:
    return sorted(os.path.relpath(p, self.root) for p in glob.glob(str(self.root / pattern)))


TABLES: dict[str, tuple[Callable[[Sources], Table], str]] = {}


def table(name: str, about: str):
  def register(fn):
    TABLES[name] = (fn, about)
    return fn
  return register


# ---------------------------------------------------------------------------------------------- formats

def x(v, digits: int = 2) -> str:
  return "–" if v is None else f"{v:.{digits}f}x"


def f(v, digits: int = 2) -> str:
  return "–" if v is None else f"{v:.{digits}f}"


def n(v) -> str:
  return "–" if v is None else f"{int(v):,}"


def same(v, temperature=0.0) -> str:
  """Whether a run gave the autoregressive tokens; a sampled run has nothing to compare."""
  if temperature and temperature > 0:
    return "n/a"
  return {True: "yes", False: "NO", None: "n/a"}[v]


def t(v) -> str:
  return f"{float(v):g}"


def minutes(seconds) -> str:
  return "–" if seconds is None else f"{seconds / 60:.0f} min"


def row_of(rows, **match):
  found = [r for r in rows if all(r.get(k) == v for k, v in match.items())]
  if len(found) != 1:
    raise TableError(f"expected one row with {match}, found {len(found)}")
  return found[0]


# ---------------------------------------------------------------------------------------------- labels

TARGET_NAMES = {"smollm2-135m-instruct": "SmolLM2-135M-Instruct", "gemma3-270m": "Gemma 3 270M (base)",
                "qwen2.5-coder-1.5b-instruct": "Qwen2.5-Coder-1.5B-Instruct"}


def kind_label(kind: str) -> str:
  """A drafter kind's name in tables: its declared label (``KindSpec.label``), else the name itself."""
  from specjax import drafters  # pylint: disable=import-outside-toplevel
  return drafters.spec(kind).display if kind in drafters.kinds() else kind


def drafter_label(name: str) -> str:
  """A specbench row name (``KIND[:CHECKPOINT] adaptive|fixed``) in words."""
  spec, _, mode = name.rpartition(" ") if name.endswith((" adaptive", " fixed")) else (name, "", "")
  kind, _, checkpoint = spec.partition(":")
  words = kind_label(kind) + (f" {checkpoint}" if checkpoint else "")
  return words + (f", {mode} draft length" if mode else "")


def drafter_setting(row: dict) -> str:
  """``γ N`` of a specbench row, and the acceptance estimate's memory where it is not the default."""
  from specjax.adaptive import Adaptive  # pylint: disable=import-outside-toplevel
  memory = (row.get("adaptive") or {}).get("memory", Adaptive.memory)
  return f"γ {row['gamma']}" + ("" if memory == Adaptive.memory else f", memory {memory:g}")
