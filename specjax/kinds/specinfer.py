"""The ``specinfer`` kind: a token tree drafted by a small model (:class:`specjax.drafters.SpecInfer`)."""
from __future__ import annotations

import dataclasses
import functools

from specjax import drafters
from specjax import tree as tree_lib
from specjax.drafters import weights
from specjax.drafters.specinfer import SpecInfer

LOSSY_SIBLINGS = ("topk", "topk_lossy")  # top-k drafts tested against the softmax q: exact only when greedy


@dataclasses.dataclass(frozen=True)
class SpecInferOptions(drafters.Options):
  children: tuple = (1, 1, 3, 1, 1, 1, 1, 1)  # per depth; ignored when ``paths`` is set
  paths: str = ""                             # "chainDEPTH[+DxLEN...]" (tree.parse_chain_paths)
  siblings: str = "without_replacement"       # iid | without_replacement | topk (greedy) | topk_lossy


def with_model(options: SpecInferOptions, model, subset_K=None) -> SpecInfer:
  paths = tuple(map(tuple, tree_lib.parse_chain_paths(options.paths))) if options.paths else ()
  return SpecInfer(model, tuple(options.children), options.siblings, paths, subset_K)


def build(options: SpecInferOptions, target) -> SpecInfer:
  drafter = with_model(options, *weights.small_model(options.checkpoint, target))
  weights.check_depth(options.gamma, drafter.tree.max_depth, "the SpecInfer token tree")
  return drafter


def row_tree(values: dict) -> tuple[str, int]:
  """A bench row's tree: its ``paths`` or per-depth ``children``, and its depth."""
  options = SpecInferOptions(**values)
  label = options.paths or "children=" + ",".join(map(str, options.children))
  depth = max(map(len, tree_lib.parse_chain_paths(options.paths))) if options.paths else len(options.children)
  return label, depth


def _case(m, children=(2, 2), siblings="without_replacement", paths=(), subset=False, sharp=True):
  return SpecInfer(m.sharp if sharp else m.small, children=children, siblings=siblings, paths=paths,
                   subset_K=m.subset_K if subset else None)


def cases() -> tuple[drafters.Case, ...]:
  c = [drafters.Case(f"specinfer/children=2x2/siblings={s}", ("children", f"siblings={s}"),
                     functools.partial(_case, siblings=s), lossy_sampled=s in LOSSY_SIBLINGS)
       for s in tree_lib.SIBLINGS]
  return tuple(c) + (
      drafters.Case("specinfer/chain/siblings=iid", ("children", "siblings=iid"),
                    functools.partial(_case, children=(1, 1), siblings="iid", sharp=False)),
      drafters.Case("specinfer/paths=chain2+1x1", ("paths", "siblings=without_replacement"),
                    lambda m: _case(m, paths=tuple(map(tuple, tree_lib.parse_chain_paths("chain2+1x1"))))),
      drafters.Case("specinfer/children=2x2/subset", ("children", "subset_K"), functools.partial(_case, subset=True)),
  )


SPEC = drafters.register_kind(drafters.KindSpec(
    kind="specinfer", build=build, options=SpecInferOptions, cases=cases,
    small_model=with_model, row_tree=row_tree, full_vocab_twin=weights.full_vocab_small_model, demos=(drafters.Demo("specinfer", "specinfer_demo.py"),),
    # without replacement: lossless at T > 0; top-k at T = 0 whatever the mode
    rows=(drafters.Row("specinfer", "specinfer:smollm2/draft_lm",
                       ("specinfer.paths=chain4+1x2", "specinfer.siblings=without_replacement"), order=20),)))
