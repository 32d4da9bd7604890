"""The ``draft_model`` kind: a separate small model (:class:`specjax.drafters.DraftModel`)."""
from __future__ import annotations

import dataclasses

from specjax import drafters
from specjax.drafters import weights
from specjax.drafters.draft_model import DraftModel


@dataclasses.dataclass(frozen=True)
class DraftModelOptions(drafters.Options):
  """A separate small model (``checkpoint``, required)."""


def build(options: DraftModelOptions, target) -> DraftModel:
  return DraftModel(*weights.small_model(options.checkpoint, target))


def with_model(options: DraftModelOptions, model) -> DraftModel:
  del options
  return DraftModel(model)


def cases() -> tuple[drafters.Case, ...]:
  return (
      drafters.Case("draft_model", (), lambda m: DraftModel(m.small)),
      drafters.Case("draft_model/subset", ("subset_K",), lambda m: DraftModel(m.draft_lm, m.subset_K)),
      drafters.Case("draft_model/lenience=0.5", ("lenience",), lambda m: DraftModel(m.small), lossy_sampled=True,
                    lenience=0.5),
      drafters.Case("draft_model/adaptive", ("adaptive",), lambda m: DraftModel(m.small), adaptive=True),
  )



SPEC = drafters.register_kind(drafters.KindSpec(
    kind="draft_model", build=build, options=DraftModelOptions, label="draft model", cases=cases,
    small_model=with_model, full_vocab_twin=weights.full_vocab_small_model, train="specjax.train.commands.draft_model", demos=(drafters.Demo("draft_model", "demo.py"),),
    rows=(drafters.Row("draft_lm", "draft_model:smollm2/draft_lm", ("draft_model.gamma=5",), order=10, default=True),)))
