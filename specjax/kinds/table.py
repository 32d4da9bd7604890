"""The ``table`` kind: a unigram or bigram table counted from a corpus (:class:`specjax.drafters.TableDrafter`)."""
from __future__ import annotations

import dataclasses

import numpy as np

from specjax import drafters
from specjax.drafters.table import TableDrafter


@dataclasses.dataclass(frozen=True)
class TableOptions(drafters.Options):
  order: int = 2  # 1: unigram, 2: bigram (counted from the stdlib train split)


def build(options: TableOptions, target) -> TableDrafter:
  from specjax.data import code_corpus  # pylint: disable=import-outside-toplevel
  return TableDrafter.from_corpus(code_corpus.load_split("train"), target.vocab_size, order=options.order)


def cases() -> tuple[drafters.Case, ...]:
  def table(order, subset=False):
    return lambda m: TableDrafter.from_corpus(m.corpus, m.target.vocab_size, order=order,
                                              subset_K=np.asarray(m.subset_K) if subset else None)
  return (
      drafters.Case("table/order=2", ("order",), table(2)),
      drafters.Case("table/order=1", ("order",), table(1)),
      drafters.Case("table/order=2/subset", ("order", "subset_K"), table(2, subset=True)),
  )


SPEC = drafters.register_kind(drafters.KindSpec(
    kind="table", build=build, options=TableOptions, cases=cases,
    demos=(drafters.Demo("table", "table_demo.py"),)))
