"""``python -m specjax.bench <task> [flags]``: one entry point for every measurement (:mod:`specjax.cli`)."""
from __future__ import annotations

import sys

from specjax import cli

TASKS = {
    "specbench": "specjax.bench.specbench",
    "specbench_hf": "specjax.bench.specbench_hf",
    "exactness": "specjax.conformance.command",  # the conformance suite, listed with the measurements
    "gamma": "specjax.bench.gamma",
    "families": "specjax.bench.families",
    "batch": "specjax.bench.batch",
    "large_vocab": "specjax.bench.large_vocab",
    "load_memory": "specjax.bench.load_memory",
    "compile_depth": "specjax.bench.compile_depth",
    "precision": "specjax.bench.precision",
    "profile": "specjax.bench.profile",
    "walltime": "specjax.bench.walltime",
    "hf": "specjax.bench.hf",
    "peers": "specjax.bench.peers",
}
MOVED = {"tables": "python tools/tables.py (a tool of the repository: it renders the docs' tables)"}

summary = cli.summary


def usage() -> str:
  return cli.usage("specjax.bench", TASKS)


def main(argv) -> int:
  return cli.dispatch("specjax.bench", TASKS, argv, moved=MOVED)


if __name__ == "__main__":
  sys.exit(main(sys.argv))
