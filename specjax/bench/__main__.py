"""``python -m specjax.bench <task> [flags]``: one entry point for every measurement.

``TASKS`` maps a task name to a module with ``main(argv) -> int``; the module is imported only when
its task runs (``--help`` reads each one's first docstring line from its source, importing nothing).
"""
from __future__ import annotations

import ast
import importlib
import importlib.util
import sys

TASKS = {
    "specbench": "specjax.bench.specbench",
    "exactness": "specjax.bench.exactness",
    "gamma": "specjax.bench.gamma",
    "families": "specjax.bench.families",
    "batch": "specjax.bench.batch",
    "large_vocab": "specjax.bench.large_vocab",
    "profile": "specjax.bench.profile",
    "walltime": "specjax.bench.walltime",
    "hf": "specjax.bench.hf",
    "peers": "specjax.bench.peers",
    "tables": "specjax.bench.tables",
}


def _summary(module: str) -> str:
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
  lines = ["usage: python -m specjax.bench <task> [flags]   (python -m specjax.bench <task> --help: its flags)",
           "", "tasks:"]
  lines += [f"  {name:<{width}}  {_summary(module)}" for name, module in TASKS.items()]
  return "\n".join(lines)


def main(argv) -> int:
  if len(argv) < 2 or argv[1] in ("-h", "--help", "help"):
    print(usage())
    return 0 if len(argv) >= 2 else 2
  task = argv[1]
  if task not in TASKS:
    print(f"specjax.bench: unknown task {task!r}; known tasks: {', '.join(TASKS)}", file=sys.stderr)
    return 2
  module = importlib.import_module(TASKS[task])
  return int(module.main([f"python -m specjax.bench {task}", *argv[2:]]) or 0)


if __name__ == "__main__":
  sys.exit(main(sys.argv))
