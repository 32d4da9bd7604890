"""The demo target with a bigram table drafter counted from the stdlib train split (c ~ 0), gamma 3.

  python -m specjax.run --config=configs/table_demo.py
  python -m specjax.run --config=configs/table_demo.py --config.table_order=1 --config.temperature=1.0

Leviathan et al. §4.2: a near-free bigram drafter still gave 1.25X. The table follows its argmax
(greedy) or samples its conditional distribution after the same temperature/top-k/top-p as the
target, and hands that q to the lossless rule. Needs no drafter weights; without the demo target a
tiny random target runs instead, and the run says so.
"""
import ml_collections


def get_config(arg: str | None = None):
  del arg
  c = ml_collections.ConfigDict()
  c.target = ml_collections.ConfigDict({"checkpoint": "demo/target"})
  c.drafter = ml_collections.ConfigDict({})  # no weights: the table is counted at startup
  c.drafter_kind = "table"
  c.table_order = 2     # 1: unigram, 2: bigram
  c.gamma = 3
  c.batch_size = 1
  c.prompt_len = 96
  c.max_new_tokens = 192
  c.temperature = 0.0
  c.top_k = 0
  c.top_p = 1.0
  c.lenience = 1.0
  c.eos_id = -1
  c.seed = 0
  c.repeats = 3
  c.mesh = ""
  c.distributed = False
  return c
