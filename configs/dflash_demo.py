"""The demo target with its DFlash block drafter, greedy, gamma 7 (block size 8).

  python -m specjax.run --config=configs/dflash_demo.py
  python -m specjax.run --config=configs/dflash_demo.py --config.temperature=1.0

The drafter (specjax/assets/demo/dflash, trained by scripts/train_dflash.py on the frozen target
with block size 8) fills gamma = 7 masks after the anchor in ONE pass, reading fused features of
target layers as extra keys/values. Other gammas run exactly but were not trained for (the run
notes it). Without the trained drafter a random one runs (exact, rarely accepted); without the demo
target a tiny random pair runs instead, and the run says so. The reported c is 0 (not measured).
"""
import ml_collections


def get_config(arg: str | None = None):
  del arg
  c = ml_collections.ConfigDict()
  c.target = ml_collections.ConfigDict({"checkpoint": "demo/target"})
  c.drafter = ml_collections.ConfigDict({"checkpoint": "demo/dflash"})
  c.drafter_kind = "dflash"
  c.gamma = 7
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
