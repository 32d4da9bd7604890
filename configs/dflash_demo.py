"""The demo target with its DFlash block drafter, greedy, gamma 7 (block size 8).

  python -m specjax.run --config=configs/dflash_demo.py
  python -m specjax.run --config=configs/dflash_demo.py --config.temperature=1.0

The drafter (specjax/assets/demo/dflash, trained by python -m specjax.train dflash on the frozen target
with block size 8) fills gamma = 7 masks after the anchor in ONE pass, reading fused features of
target layers as extra keys/values. Other gammas run exactly but were not trained for (the run
notes it). Without the trained drafter a random one runs (exact, rarely accepted); without the demo
target a tiny random pair runs instead, and the run says so. c is measured (one drafting pass / gamma).
"""

from specjax.config_util import sibling_config
from specjax.drafters import drafter_section


def get_config(arg: str | None = None):
  c = sibling_config(__file__, "demo", arg)  # every key not set here is demo.py's
  c.drafter = drafter_section("dflash", checkpoint="demo/dflash", gamma=7)
  return c
