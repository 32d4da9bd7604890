"""SpecInfer token tree on the demo pair: the demo drafter expands <1,1,3,1,1,1,1,1>, greedy.

  python -m specjax.run --config=configs/specinfer_demo.py
  python -m specjax.run --config=configs/specinfer_demo.py --config.specinfer_children=5,2,1 --config.gamma=3
  python -m specjax.run --config=configs/specinfer_demo.py --config.specinfer_paths=chain8+1x2 --config.gamma=8
  python -m specjax.run --config=configs/specinfer_demo.py --config.temperature=1.0 \
      --config.specinfer_siblings=without_replacement

Measured on 2 CPU cores (README Results): the paper's tree (20 nodes) gets 2.57x greedy at batch 1;
--config.specinfer_paths=chain8+1x2 (10 nodes) gets 3.23x. gamma must equal the tree's depth
(len(specinfer_children), or the paths' depth). Siblings: iid | without_replacement
(both lossless at any temperature) | topk (greedy only) | topk_lossy. Falls back to a tiny random
pair (and says so) when the demo weights are missing.
"""
from specjax.config_util import sibling_config


def get_config(arg: str | None = None):
  c = sibling_config(__file__, "demo", arg)  # every key not set here is demo.py's
  c.drafter_kind = "specinfer"
  c.specinfer_children = (1, 1, 3, 1, 1, 1, 1, 1)  # the paper's expansion; children per depth
  c.specinfer_paths = ""  # a sparse tree instead, e.g. "chain8+1x2" (chain of 8, second choice at depth 1 + 1 more)
  c.specinfer_siblings = "iid"
  c.gamma = 8           # the tree's depth
  return c
