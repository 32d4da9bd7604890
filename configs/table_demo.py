"""The demo target with a bigram table drafter counted from the stdlib train split (c ~ 0), gamma 3.

  python -m specjax.run --config=configs/table_demo.py
  python -m specjax.run --config=configs/table_demo.py --config.table_order=1 --config.temperature=1.0

Leviathan et al. §4.2: a near-free bigram drafter still gave 1.25X. The table follows its argmax
(greedy) or samples its conditional distribution after the same temperature/top-k/top-p as the
target, and hands that q to the lossless rule. Needs no drafter weights; without the demo target a
tiny random target runs instead, and the run says so.
"""
import ml_collections

from specjax.config_util import sibling_config


def get_config(arg: str | None = None):
  c = sibling_config(__file__, "demo", arg)  # every key not set here is demo.py's
  c.drafter = ml_collections.ConfigDict({})  # no weights: the table is counted at startup
  c.drafter_kind = "table"
  c.table_order = 2     # 1: unigram, 2: bigram
  c.gamma = 3
  return c
