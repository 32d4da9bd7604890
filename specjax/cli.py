"""What the command-line entry points share: a task dispatcher and one-line errors.

``python -m specjax.bench <task>`` and ``python -m specjax.train <task>`` each map a task name to a
module with ``main(argv) -> int`` (imported only when its task runs; ``--help`` reads each one's
first docstring line from its source, importing nothing). A task builds its flags on a private
``flags.FlagValues()`` and hands them to :func:`run_task`: ``--help`` prints the module docstring
and the flags, and a bad flag or input is one line on stderr with exit code 2.
"""
from __future__ import annotations

import ast
import importlib
import importlib.util
import sys

HELP = ("-h", "--help", "-help", "--helpshort", "--helpfull")


class UsageError(ValueError):
  """A bad flag value or a missing input, reported in one line."""


def summary(module: str) -> str:
  """The first docstring line of ``module``, read from its source without importing it."""
  try:
    spec = importlib.util.find_spec(module)
    with open(spec.origin, encoding="utf-8") as f:
      doc = ast.get_docstring(ast.parse(f.read())) or ""
  except (ImportError, AttributeError, OSError, SyntaxError, TypeError):
    return "(module not found)"
  return doc.strip().splitlines()[0] if doc.strip() else ""


def usage(prog: str, tasks: dict, synopsis: str = "<task>") -> str:
  width = max(map(len, tasks))
  lines = [f"usage: python -m {prog} {synopsis} [flags]   (python -m {prog} <task> --help: its flags)", "", "tasks:"]
  lines += [f"  {name:<{width}}  {summary(module)}" for name, module in tasks.items()]
  return "\n".join(lines)


def dispatch(prog: str, tasks: dict, argv, moved: dict | None = None, synopsis: str = "<task>") -> int:
  """Runs the task named by ``argv[1]`` with the rest of ``argv``; 2 for no or an unknown task (a task
  in ``moved``: one line naming what replaced it)."""
  if len(argv) < 2 or argv[1] in ("-h", "--help", "help"):
    print(usage(prog, tasks, synopsis))
    return 0 if len(argv) >= 2 else 2
  task = argv[1]
  if task in (moved or {}):
    print(f"{prog}: {task!r} is now {moved[task]}", file=sys.stderr)
    return 2
  if task not in tasks:
    print(f"{prog}: unknown task {task!r}; known tasks: {', '.join(tasks)}", file=sys.stderr)
    return 2
  module = importlib.import_module(tasks[task])
  return int(module.main([f"python -m {prog} {task}", *argv[2:]]) or 0)


def run_task(fv, argv, doc: str, name: str, body) -> int:
  """Parses ``argv`` into ``fv`` and runs ``body()``; 0 on success, 2 on a usage or input error."""
  from absl import flags  # pylint: disable=import-outside-toplevel
  from specjax.checkpoint import CheckpointError  # pylint: disable=import-outside-toplevel
  if any(a in HELP for a in argv[1:]):
    print(doc.strip() + "\n\nflags:\n" + fv.get_help())
    return 0
  try:
    rest = fv(list(argv))
    if len(rest) > 1:
      raise UsageError(f"unexpected arguments: {rest[1:]}")
    return int(body() or 0)
  except (flags.Error, UsageError, CheckpointError, FileNotFoundError) as e:
    print(f"{name}: {str(e).splitlines()[0] if str(e) else type(e).__name__}", file=sys.stderr)
    return 2
