"""``python -m specjax.train <task> [flags]``: one entry point for every training run (:mod:`specjax.cli`)."""
from __future__ import annotations

import sys

from specjax import cli

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

summary = cli.summary


def usage() -> str:
  return cli.usage("specjax.train", TASKS)


def main(argv) -> int:
  return cli.dispatch("specjax.train", TASKS, argv)


if __name__ == "__main__":
  sys.exit(main(sys.argv))
