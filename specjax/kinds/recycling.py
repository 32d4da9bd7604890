"""The ``recycling`` kind: Token Recycling (:class:`specjax.drafters.recycling.Recycling`), a successor
table learned from the verify passes, no weights."""
from __future__ import annotations

import dataclasses

from specjax import drafters
from specjax.drafters.recycling import DEFAULT_BUDGETS, DEFAULT_PATHS, Recycling


@dataclasses.dataclass(frozen=True)
class RecyclingOptions(drafters.Options):
  """``gamma``: the template's depth (4 for the default paths)."""
  k: int = 8                      # successors kept per token (the table's width, the verify's top-k)
  paths: tuple = DEFAULT_PATHS    # the tree template: successor ranks from the last token
  budgets: tuple = DEFAULT_BUDGETS  # node budgets chosen per round with the adaptive loop (0: a plain step)
  corpus: str = ""                # a `python -m specjax.train data` folder: the table starts from its successors
  learn_from: str = "path"        # path: the accepted path's top-k only; tree: every scored node's, then the path's

  def __post_init__(self):
    super().__post_init__()
    if isinstance(self.k, bool) or not isinstance(self.k, int) or self.k < 1:
      raise ValueError(f"recycling k must be a positive integer (successors per token), got {self.k!r}")


def build(options: RecyclingOptions, target) -> Recycling:
  drafter = Recycling.create(target.vocab_size, options.k, tuple(map(tuple, options.paths)), tuple(options.budgets),
                             options.learn_from)
  if options.corpus:
    from specjax.data import generated  # pylint: disable=import-outside-toplevel
    from specjax.drafters import recycling  # pylint: disable=import-outside-toplevel
    drafter = drafter.with_memory(recycling.table_from_text(target.vocab_size, options.k,
                                                            generated.corpus_docs(options.corpus)))
  depth = drafter.tree.max_depth
  if options.gamma != depth:
    raise ValueError(f"drafter gamma={options.gamma} must equal the depth of the recycling template ({depth}); "
                     f"set drafter.gamma={depth}")
  return drafter


# the matrix's template (its depth is the matrix's GAMMA, 2): two distinct siblings at the root and at its
# first child
MATRIX_PATHS = ((0,), (1,), (0, 0), (1, 0), (0, 1))


def cases() -> tuple[drafters.Case, ...]:
  """The successor table starts from the target's own text (``corpus``), or as ids 0..k-1 in every row,
  and learns inside each cell's loop (shared by every row); with ``adaptive`` each round verifies the
  first 0, 2 or all 5 nodes, and the table learns from every node each round scored (``learn_from``)."""
  make = lambda k, budgets: lambda m: Recycling.create(m.target.vocab_size, k, MATRIX_PATHS, budgets, "tree")
  return (
      drafters.Case("recycling/k=3", ("k", "paths", "corpus"), from_text),
      drafters.Case("recycling/k=2,budgets=0,2,5/adaptive", ("k", "paths", "budgets", "adaptive", "learn_from"),
                    make(2, (0, 2, 5)), adaptive=True),
  )


def from_text(m):
  """The table counted from the target's own greedy text on the matrix prompts (``corpus``)."""
  from specjax.drafters import recycling  # pylint: disable=import-outside-toplevel
  drafter = Recycling.create(m.target.vocab_size, 3, MATRIX_PATHS, ())
  return drafter.with_memory(recycling.table_from_text(m.target.vocab_size, 3, list(m.corpus)))


SPEC = drafters.register_kind(drafters.KindSpec(
    kind="recycling", build=build, options=RecyclingOptions, label="token recycling", cases=cases))
