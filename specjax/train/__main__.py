"""``python -m specjax.train <task> [flags]``: one entry point for every training run.

``TASKS`` maps a task name to a module with ``main(argv) -> int``; the module is imported only when
its task runs (``--help`` reads each one's first docstring line from its source, importing nothing).
"""
from __future__ import annotations

import ast
import importlib
import importlib.util
import sys

TASKS = {
    "demo": "specjax.train.commands.demo",
    "medusa": "specjax.train.commands.medusa",
    "mtp": "specjax.train.commands.mtp",
    "dflash": "specjax.train.commands.dflash",
    "eagle": "specjax.train.commands.eagle",
    "data": "specjax.train.commands.data",
    "draft_model": "specjax.train.commands.draft_model",
    "t5_ende": "specjax.train.commands.t5_ende",
}


def summary(module: str) -> str:
  """The first docstring line of ``module``, read from its source without importing it."""
  try:
    spec = importlib.util.find_spec(module)
    with open(spec.origin, encoding="utf-8") as f:
      doc = ast.get_docstring(ast.parse(f.read())) or ""
  except (ImportError, AttributeError, OSError, SyntaxError, TypeError):
    return "(module not found)"
  return doc.strip().splitlines()[0] if doc.strip() else ""


def usage() -> str:
  width = max(map(len, TASKS))
  lines = ["usage: python -m specjax.train <task> [flags]   (python -m specjax.train <task> --help: its flags)",
           "", "tasks:"]
  lines += [f"  {name:<{width}}  {summary(module)}" for name, module in TASKS.items()]
  return "\n".join(lines)


def main(argv) -> int:
  if len(argv) < 2 or argv[1] in ("-h", "--help", "help"):
    print(usage())
    return 0 if len(argv) >= 2 else 2
  task = argv[1]
  if task not in TASKS:
    print(f"specjax.train: unknown task {task!r}; known tasks: {', '.join(TASKS)}", file=sys.stderr)
    return 2
  module = importlib.import_module(TASKS[task])
  return int(module.main([f"python -m specjax.train {task}", *argv[2:]]) or 0)


if __name__ == "__main__":
  sys.exit(main(sys.argv))
