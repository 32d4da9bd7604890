"""The ``ngram`` kind: prompt lookup (:class:`specjax.drafters.NGram`), no weights."""
from __future__ import annotations

import dataclasses

from specjax import drafters
from specjax.drafters.ngram import NGram


@dataclasses.dataclass(frozen=True)
class NGramOptions(drafters.Options):
  n: int = 3          # longest suffix looked up
  min_match: int = 1  # shortest suffix that counts as a match (none shorter: the row drafts nothing)
  periodic: bool = True  # a continuation shorter than gamma is drafted on as a repetition


def build(options: NGramOptions, target) -> NGram:
  del target
  return NGram(options.n, options.min_match, options.periodic)


def cases() -> tuple[drafters.Case, ...]:
  """The exactness matrix's cells: every option, chained and with the adaptive draft length."""
  return (
      drafters.Case("ngram/n=2", ("n",), lambda m: NGram(2)),
      drafters.Case("ngram/n=2,periodic=False", ("n", "periodic"), lambda m: NGram(2, periodic=False)),
      drafters.Case("ngram/n=3,min_match=2/adaptive", ("n", "min_match", "adaptive"), lambda m: NGram(3, 2),
                    adaptive=True),
  )


SPEC = drafters.register_kind(drafters.KindSpec(
    kind="ngram", build=build, options=NGramOptions, label="n-gram", cases=cases,
    demos=(drafters.Demo("ngram", "demo.py", {"drafter.kind": "ngram", "drafter.gamma": 4}),),
    rows=(drafters.Row("ngram", "ngram", ("ngram.n=3", "ngram.gamma=4"), order=30, default=True),)))
