"""SpecInfer token tree on the demo pair: the demo drafter expands <1,1,3,1,1,1,1,1>, greedy.

  python -m specjax.run --config=configs/specinfer_demo.py
  python -m specjax.run --config=configs/specinfer_demo.py --config.drafter.children=5,2,1 --config.drafter.gamma=3
  python -m specjax.run --config=configs/specinfer_demo.py --config.drafter.paths=chain8+1x2
  python -m specjax.run --config=configs/specinfer_demo.py --config.temperature=1.0 \
      --config.drafter.siblings=without_replacement

The paper's tree has 20 nodes; --config.drafter.paths=chain8+1x2 has 10 (measured speedups of
both: README Results, docs/results.md). gamma must equal the tree's depth
(len(children), or the paths' depth). Siblings: iid | without_replacement
(both lossless at any temperature) | topk (greedy only) | topk_lossy. Falls back to a tiny random
pair (and says so) when the demo weights are missing.
"""
from specjax.config_util import sibling_config
from specjax.drafters import drafter_section


def get_config(arg: str | None = None):
  c = sibling_config(__file__, "demo", arg)  # every key not set here is demo.py's
  # children: the paper's expansion per depth; paths: a sparse tree instead, e.g. "chain8+1x2" (a chain
  # of 8, the second choice at depth 1 and one more); gamma: the tree's depth
  c.drafter = drafter_section("specinfer", checkpoint="demo/drafter", children=(1, 1, 3, 1, 1, 1, 1, 1),
                              siblings="iid", gamma=8)
  return c
