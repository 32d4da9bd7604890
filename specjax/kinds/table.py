"""The ``table`` kind: a unigram or bigram table counted from a corpus (:class:`specjax.drafters.TableDrafter`)."""
from __future__ import annotations

import dataclasses
import pathlib

import numpy as np

from specjax import drafters
from specjax.drafters.table import TableDrafter


@dataclasses.dataclass(frozen=True)
class TableOptions(drafters.Options):
  order: int = 2    # 1: unigram, 2: bigram
  corpus: str = ""  # a python -m specjax.train data folder (the target's own prompts + text); "": the stdlib train split
  k: int = 0        # a truncated vocabulary: the corpus's k most frequent generated tokens (0: the whole vocabulary)


def corpus_tokens(options: TableOptions, vocab_size: int) -> tuple[np.ndarray, np.ndarray | None]:
  """``(tokens, subset_K)``: the ids the table is counted from and, with ``k``, its truncated vocabulary."""
  from specjax.data import code_corpus, generated  # pylint: disable=import-outside-toplevel
  from specjax.drafters import vocab  # pylint: disable=import-outside-toplevel
  if options.corpus:  # prompt + continuation rows; the subset: the target's generated tokens only
    folder = pathlib.Path(options.corpus).expanduser()
    tokens, _ = generated.joined(generated.load_shards(folder))
    counts_V = generated.token_counts(folder, vocab_size) if options.k else None
  else:
    tokens = code_corpus.load_split("train")
    counts_V = np.bincount(tokens, minlength=vocab_size) if options.k else None
  return tokens, None if counts_V is None else vocab.top_k_subset(counts_V, options.k)


def build(options: TableOptions, target) -> TableDrafter:
  tokens, subset_K = corpus_tokens(options, target.vocab_size)
  return TableDrafter.from_corpus(tokens, target.vocab_size, order=options.order, subset_K=subset_K)


def row_values(values: dict, data) -> dict:
  """A bench row counts its table from the target's ``train data`` folder unless given a corpus."""
  return values if values.get("corpus") else {**values, "corpus": str(data)}


def cases() -> tuple[drafters.Case, ...]:
  def table(order, subset=False):
    return lambda m: TableDrafter.from_corpus(m.corpus, m.target.vocab_size, order=order,
                                              subset_K=np.asarray(m.subset_K) if subset else None)
  return (
      drafters.Case("table/order=2", ("order",), table(2)),
      drafters.Case("table/order=1", ("order",), table(1)),
      # corpus and k only choose the counted text and which ids the subset keeps: any subset is exact
      drafters.Case("table/order=2/subset", ("order", "subset_K", "corpus", "k"), table(2, subset=True)),
  )


SPEC = drafters.register_kind(drafters.KindSpec(
    kind="table", build=build, options=TableOptions, cases=cases, row_values=row_values,
    demos=(drafters.Demo("table", "table_demo.py"),),
    # a bigram table over the most frequent tokens of the target's training generations (corpus: --data)
    rows=(drafters.Row("table", "table", ("table.k=4096", "table.gamma=4"), order=40),)))
