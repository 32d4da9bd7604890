"""Medusa-1 heads on the demo target (no separate drafter), a static sparse tree, greedy.

  python -m specjax.train medusa:demo/medusa --target=specjax/assets/demo/target
  python -m specjax.run --config=configs/medusa_demo.py
  python -m specjax.run --config=configs/medusa_demo.py --config.drafter.tree=mc_sim_7b_63
  python -m specjax.run --config=configs/medusa_demo.py --config.temperature=1.0 --config.drafter.acceptance=typical --config.allow_lossy=True

The dense top-(4,2,2,1) tree verifies 44 nodes per pass; --config.drafter.tree=chain4+1x1 verifies
5 (measured speedups of both: README Results, docs/results.md).
gamma must equal the tree's depth (len(top_k), or 4 for mc_sim_7b_63). Acceptance:
"rejection" (greedy exact match at temperature 0; above it, heads' choices sampled without
replacement and recursive rejection sampling: lossless) or "typical" (Medusa's, LOSSY above 0).
Untrained (zero) heads are used, with a NOTE, when the heads are missing.
"""

from specjax.config_util import sibling_config
from specjax.drafters import drafter_section


def get_config(arg: str | None = None):
  c = sibling_config(__file__, "demo", arg)  # every key not set here is demo.py's
  # tree: "mc_sim_7b_63" (Medusa's 63-node tree), "chain4+1x1", or "" for a dense tree from top_k (head d's
  # top-k at depth d); acceptance: rejection | typical (lossy); gamma: the tree's depth
  c.drafter = drafter_section("medusa", checkpoint="demo/medusa", tree="", top_k=(4, 2, 2, 1), gamma=4)
  return c
