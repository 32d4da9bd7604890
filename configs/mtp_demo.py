"""The demo target with its shared-weight MTP head (Nemotron 3 Super style), greedy, gamma 7.

  python -m specjax.run --config=configs/mtp_demo.py
  python -m specjax.run --config=configs/mtp_demo.py --config.gamma=3 --config.temperature=1.0

The head (specjax/assets/demo/mtp, trained by scripts/train_mtp.py on the frozen target) reads the
target's last hidden state and is applied recursively, so any gamma works; acceptance falls with
depth. Without the trained head a random one runs (exact, rarely accepted); without the demo target
a tiny random pair runs instead, and the run says so. The reported c is 0 (not measured for heads).
"""
import ml_collections


def get_config(arg: str | None = None):
  del arg
  c = ml_collections.ConfigDict()
  c.target = ml_collections.ConfigDict({"checkpoint": "demo/target"})
  c.drafter = ml_collections.ConfigDict({"checkpoint": "demo/mtp"})
  c.drafter_kind = "mtp"
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
