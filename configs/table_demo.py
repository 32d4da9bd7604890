"""The demo target with a bigram table drafter counted from the stdlib train split (c ~ 0), gamma 3.

  python -m specjax.run --config=configs/table_demo.py
  python -m specjax.run --config=configs/table_demo.py --config.table_order=1 --config.temperature=1.0

Leviathan et al. §4.2: a near-free bigram drafter still gave 1.25X. The table follows its argmax
(greedy) or samples its conditional distribution after the same temperature/top-k/top-p as the
target, and hands that q to the lossless rule. Needs no drafter weights; without the demo target a
tiny random target runs instead, and the run says so.
"""

from specjax.config_util import sibling_config
from specjax.drafters import drafter_section


def get_config(arg: str | None = None):
  c = sibling_config(__file__, "demo", arg)  # every key not set here is demo.py's
  c.drafter = drafter_section("table", order=2, gamma=3)  # order 1: unigram, 2: bigram; counted at startup
  return c
