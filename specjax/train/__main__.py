"""``python -m specjax.train <task> [flags]``: one entry point for every training run (:mod:`specjax.cli`).

A drafter kind's task also takes the name the drafter is run by, ``KIND:CHECKPOINT``: ``python -m
specjax.train mtp:runs/mtp`` trains into ``runs/mtp`` (``--out``), and ``--drafters=mtp:runs/mtp``
(``bench``) or ``--config.drafter.checkpoint=runs/mtp`` (``run``) then drafts with it.
"""
from __future__ import annotations

import sys

from specjax import cli, drafters

# task -> module: the training commands of no drafter kind, then every kind's own (``KindSpec.train``)
TASKS = {"demo": "specjax.train.commands.demo",
         **{spec.kind: spec.train for spec in drafters.specs() if spec.train},
         "data": "specjax.train.commands.data",
         "t5_ende": "specjax.train.commands.t5_ende"}

summary = cli.summary


SYNOPSIS = "<task | KIND:CHECKPOINT>"


def usage() -> str:
  return cli.usage("specjax.train", TASKS, SYNOPSIS)


def task_args(argv) -> list:
  """``argv`` with a ``KIND:CHECKPOINT`` task split into the kind's task and ``--out=CHECKPOINT``
  (a name under specjax/assets where one exists, as the drafter loaders resolve it)."""
  from specjax.models import heads  # pylint: disable=import-outside-toplevel
  task, _, checkpoint = argv[1].partition(":")
  trained = [k for k in TASKS if k in drafters.kinds()]
  if task not in trained:
    raise cli.UsageError(f"{argv[1]!r}: KIND:CHECKPOINT names a drafter kind with a training task "
                         f"({', '.join(trained)}); {task!r} is not one")
  if not checkpoint:
    raise cli.UsageError(f"{argv[1]!r}: no checkpoint after the colon")
  if any(a == "--out" or a.startswith("--out=") for a in argv[2:]):
    raise cli.UsageError(f"{argv[1]!r} names the output folder already; drop --out")
  return [argv[0], task, f"--out={heads.resolve(checkpoint) or checkpoint}", *argv[2:]]


def main(argv) -> int:
  if len(argv) >= 2 and ":" in argv[1]:
    try:
      argv = task_args(argv)
    except cli.UsageError as e:
      print(f"specjax.train: {e}", file=sys.stderr)
      return 2
  return cli.dispatch("specjax.train", TASKS, argv, synopsis=SYNOPSIS)


if __name__ == "__main__":
  sys.exit(main(sys.argv))
