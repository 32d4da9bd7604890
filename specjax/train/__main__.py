"""``python -m specjax.train <task> [flags]``: one entry point for every training run (:mod:`specjax.cli`)."""
from __future__ import annotations

import sys

from specjax import cli, drafters

# task -> module: the training commands of no drafter kind, then every kind's own (``KindSpec.train``)
TASKS = {"demo": "specjax.train.commands.demo",
         **{spec.kind: spec.train for spec in drafters.specs() if spec.train},
         "data": "specjax.train.commands.data",
         "t5_ende": "specjax.train.commands.t5_ende"}

summary = cli.summary


def usage() -> str:
  return cli.usage("specjax.train", TASKS)


def main(argv) -> int:
  return cli.dispatch("specjax.train", TASKS, argv)


if __name__ == "__main__":
  sys.exit(main(sys.argv))
