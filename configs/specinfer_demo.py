"""SpecInfer token tree on the demo pair: the demo drafter expands <1,1,3,1,1,1,1,1>, greedy.

  python -m specjax.run --config=configs/specinfer_demo.py
  python -m specjax.run --config=configs/specinfer_demo.py --config.specinfer_children=5,2,1 --config.gamma=3
  python -m specjax.run --config=configs/specinfer_demo.py --config.temperature=1.0 \
      --config.specinfer_siblings=without_replacement

gamma must equal the tree's depth (len(specinfer_children)). Siblings: iid | without_replacement
(both lossless at any temperature) | topk (greedy only) | topk_lossy. Falls back to a tiny random
pair (and says so) when the demo weights are missing.
"""
import ml_collections


def get_config(arg: str | None = None):
  del arg
  c = ml_collections.ConfigDict()
  c.target = ml_collections.ConfigDict({"checkpoint": "demo/target"})
  c.drafter = ml_collections.ConfigDict({"checkpoint": "demo/drafter"})
  c.drafter_kind = "specinfer"
  c.specinfer_children = (1, 1, 3, 1, 1, 1, 1, 1)  # the paper's expansion; children per depth
  c.specinfer_siblings = "iid"
  c.gamma = 8           # the tree's depth
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
