"""The default run: the demo pair trained on the Python stdlib (specjax/assets/demo), greedy, gamma 7.

  python -m specjax.run                                   # this config
  python -m specjax.run --config=configs/demo.py --config.drafter.gamma=5 --config.temperature=1.0
  python -m specjax.run --config=configs/demo.py --config.drafter.kind=ngram

Prints generated Python code, the statistics, autoregressive and speculative tokens/s measured in
the same run, and the walltime formula's prediction. If the demo weights are missing it runs a
tiny random pair instead and says so.
"""
import ml_collections

from specjax.drafters import drafter_section


def get_config(arg: str | None = None):
  del arg
  c = ml_collections.ConfigDict()
  c.target = ml_collections.ConfigDict({"checkpoint": "demo/target", "param_dtype": "auto", "cache_dtype": "",
                                        "scan_layers": "auto"})  # auto: layers scanned on accelerators only
  c.drafter = drafter_section("draft_model", checkpoint="demo/drafter", gamma=7)  # kinds: specjax.drafters.kinds()
  c.batch_size = 1
  c.prompt_len = 96
  c.max_new_tokens = 192
  c.temperature = 0.0
  c.top_k = 0
  c.top_p = 1.0
  c.lenience = 1.0      # < 1 is lossy (Leviathan's l); the summary marks the run as lossy
  c.eos_id = -1         # -1: the tokenizer's EOS (the byte-level demo has none: rows run to max_new_tokens)
  c.stop_at_eos = True
  c.prompt = ""         # your own prompt (text); see specjax/prompts.py
  c.prompts_file = ""   # one prompt per line, or JSON chat message lists
  c.chat = False        # apply the tokenizer's chat template to plain prompts
  c.refill = False      # more prompts than batch_size always run batch_size rows at a time, refilled as rows finish
  c.max_len = 0         # cache slots per row; 0: prompt + max_new_tokens + verify slots (checked against the context)
  c.output = ""         # a .jsonl file: one line per prompt (prompt, text, tokens, stop: eos or length)
  c.adaptive = True     # rows submit 0..gamma drafts; the verify pass runs at the smallest width holding them
  c.confidence = 0.4    # a row stops drafting at the drafter's first position it is less sure of (chains, greedy)
  c.sampled_confidence = 0.0  # the same cut when sampling (0: none; the largest probability predicts a greedy match)
  c.acceptance_memory = -1.0  # weight of one observed draft in a row's acceptance estimate; < 0: Adaptive's
  c.verify_slope = -1.0  # verify cost per draft in target steps (a line); < 0: v measured per width before the run
  c.allow_lossy = False  # True runs lossy configurations (lenience < 1, typical acceptance, ...), reported
  c.imports = ()        # modules imported first: a drafter of your own registers itself there
  c.seed = 0
  c.repeats = 3         # timed runs of each decoder after one compile run
  c.mesh = ""           # e.g. "2x4" (data x model); empty: one device
  c.distributed = False
  return c
