"""What the measurement commands share: flag parsing with one-line errors, list flags, output files.

A command's ``main(argv)`` builds its flags on a private ``flags.FlagValues()`` and hands them to
``run_task`` (:mod:`specjax.cli`) with the function that does the work.
"""
from __future__ import annotations

import json
import pathlib

REPO = pathlib.Path(__file__).resolve().parent.parent.parent
from specjax.cli import HELP, UsageError, run_task  # noqa: F401  (the commands use them through common)


def parse_list(values, cast, name: str, ok=lambda x: True) -> list:
  """``cast`` of every item of a list flag, each passing ``ok``; a UsageError naming the flag if not."""
  try:
    out = [cast(v) for v in values]
  except ValueError as e:
    raise UsageError(f"--{name}: cannot parse {list(values)!r} ({e})") from e
  bad = [x for x in out if not ok(x)]
  if not out or bad:
    raise UsageError(f"--{name}: bad value(s) {bad or list(values)!r}")
  return out


def write_json(path, data, indent: int = 2, **kw) -> None:
  pathlib.Path(path).write_text(json.dumps(data, indent=indent, **kw) + "\n")


def write_report(out_path, name: str, header: str, table: str, meta: dict, rows: list) -> None:
  """Prints ``header`` and the markdown ``table``, and writes ``<name>.md`` and ``<name>.json`` under ``out_path``."""
  print("\n" + header + "\n\n" + table)
  out = out_dir(out_path)
  (out / f"{name}.md").write_text(header + "\n\n" + table + "\n")
  (out / f"{name}.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=1) + "\n")


def out_dir(path) -> pathlib.Path:
  out = pathlib.Path(path)
  out.mkdir(parents=True, exist_ok=True)
  return out


def load_config_file(path):
  """``get_config()`` of a config file (``configs/tiny_random.py``; a bare name is looked up in configs/)."""
  import importlib.util  # pylint: disable=import-outside-toplevel
  file = pathlib.Path(path)
  if not file.is_file() and (REPO / "configs" / file.name).is_file():
    file = REPO / "configs" / file.name
  if not file.is_file():
    raise UsageError(f"config file not found: {path}")
  spec = importlib.util.spec_from_file_location(file.stem, file)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module.get_config()
