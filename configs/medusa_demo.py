"""Medusa-1 heads on the demo target (no separate drafter), a static sparse tree, greedy.

  python scripts/train_medusa.py --target=specjax/assets/demo/target --out=specjax/assets/demo/medusa
  python -m specjax.run --config=configs/medusa_demo.py
  python -m specjax.run --config=configs/medusa_demo.py --config.medusa_tree=mc_sim_7b_63 --config.gamma=4
  python -m specjax.run --config=configs/medusa_demo.py --config.temperature=1.0 --config.medusa_acceptance=typical

Measured on 2 CPU cores (README Results): the dense top-(4,2,2,1) tree verifies 44 nodes per pass
and gets 1.45x greedy at batch 1; --config.medusa_tree=chain4+1x1 (5 nodes) gets 2.88x.
gamma must equal the tree's depth (len(medusa_top_k), or 4 for mc_sim_7b_63). Acceptance:
"rejection" (greedy exact match at temperature 0; above it, heads' choices sampled without
replacement and recursive rejection sampling: lossless) or "typical" (Medusa's, LOSSY above 0).
Untrained (zero) heads are used, with a NOTE, when the heads are missing.
"""
import ml_collections

from specjax.config_util import sibling_config


def get_config(arg: str | None = None):
  c = sibling_config(__file__, "demo", arg)  # every key not set here is demo.py's
  c.drafter = ml_collections.ConfigDict({"checkpoint": "demo/target"})  # unused: Medusa has no draft model
  c.drafter_kind = "medusa"
  c.medusa_heads = "demo/medusa"      # a folder, or a name under specjax/assets
  c.medusa_tree = ""                  # "mc_sim_7b_63" (Medusa's 63-node tree), "chain4+1x1", or "" for medusa_top_k
  c.medusa_top_k = (4, 2, 2, 1)       # dense tree: top-k of head d at depth d
  c.medusa_acceptance = "rejection"   # rejection | typical (lossy)
  c.gamma = 4                         # the tree's depth
  return c
