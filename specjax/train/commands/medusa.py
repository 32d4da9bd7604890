"""Medusa-1 heads on a frozen target: the demo one, or a real one (--data=real).

  python -m specjax.train medusa                                # demo target -> specjax/assets/demo/medusa
  python -m specjax.run --config=configs/medusa_demo.py
  nice -n 10 python -m specjax.train medusa --data=real         # SmolLM2 -> specjax/assets/smollm2/medusa
  nice -n 10 python -m specjax.train medusa --data=real --target=gemma3-270m --steps=300   # -> assets/gemma3

``--data=generated`` (the demo): held-out prompts (specjax.data.code_corpus, or random ids for a
non-byte-level target) -> the target continues them (specjax.generate) -> one frozen target pass
gives the hidden states -> the heads train on them (resumes from --workdir) -> per-head top-1
accuracy on held-out generated sequences, before and after, goes to stdout and into ``<out>/config.json``
(the heads are a head bundle: config.json + model.safetensors).
``--data=real``: KL to the target over a truncated vocabulary on the ``data`` task's generations,
float16 heads + ``vocab_subset.npy`` (:mod:`specjax.train.commands.real_heads`).
"""
from __future__ import annotations

import json
import pathlib
import time

import numpy as np

from specjax import checkpoint
from specjax import tree as tree_lib
from specjax.data.tokenizer import ByteTokenizer
from specjax.drafters import medusa as medusa_lib
from specjax.train import heads as train_heads
from specjax.train import loop
from specjax.train import medusa as medusa_train
from specjax.train.commands import real_heads

FLAG_TABLE = real_heads.head_flags(  # flag: (kind, demo default, --data=real default, help)
    "medusa", "the head bundle folder (config.json + model.safetensors)",
    num_heads=("integer", 4, 3, "Medusa heads (head k predicts k + 2 tokens ahead)"),
    steps=("integer", 1500, 400, "optimizer steps"),
    batch=("integer", 16, 8, "sequences per step"))
DEMO_FLAGS = ("num_sequences", "prompt_len", "gen_tokens", "gen_temperatures")


def prompts_for(target, n, prompt_len, seed):
  if target.vocab_size == ByteTokenizer().vocab_size:
    from specjax.data import code_corpus  # pylint: disable=import-outside-toplevel
    return np.stack(code_corpus.held_out_prompts(n, prompt_len, seed=seed + 1000)).astype(np.int32)
  return np.random.RandomState(seed).randint(3, target.vocab_size, size=(n, prompt_len)).astype(np.int32)


def train_demo(opt) -> int:
  """Heads on a frozen target folder from its continuations of held-out prompts."""
  t0 = time.time()
  target = checkpoint.load_model(opt.target)
  prompts = prompts_for(target, opt.num_sequences, opt.prompt_len, opt.seed)
  print(f"generating {len(prompts)} x {opt.gen_tokens} tokens with the target ...")
  temps = [float(t) for t in opt.gen_temperatures]
  tokens = train_heads.generated_text_over(target, prompts, opt.gen_tokens, temps, seed=opt.seed)
  tokens = tokens[np.random.RandomState(opt.seed).permutation(len(tokens))]  # held-out rows from every temperature
  hidden = medusa_train.hidden_states(target, tokens)
  n_train = len(tokens) - max(len(tokens) // 8, 1)
  cfg = loop.TrainConfig(steps=opt.steps, learning_rate=opt.learning_rate, warmup_steps=50, weight_decay=0.0,
                         checkpoint_every=250)
  lm_head = medusa_lib.target_lm_head(target)
  zero = medusa_lib.init_heads(None, opt.num_heads, hidden.shape[-1])
  before = medusa_train.head_accuracy(zero, lm_head, hidden[n_train:], tokens[n_train:], opt.prompt_len)
  heads = medusa_train.train_heads(target, tokens[:n_train], hidden[:n_train], num_heads=opt.num_heads,
                                   label_from=opt.prompt_len, cfg=cfg, workdir=opt.workdir,
                                   batch_size=opt.batch, seed=opt.seed)
  after = medusa_train.head_accuracy(heads, lm_head, hidden[n_train:], tokens[n_train:], opt.prompt_len)
  report = {"target": str(opt.target), "steps": opt.steps, "train_sequences": int(n_train),
            "held_out_sequences": int(len(tokens) - n_train), "gen_tokens": opt.gen_tokens,
            "temperatures": temps, "held_out_top1_before": before, "held_out_top1_after": after,
            "wall_s": round(time.time() - t0, 1)}
  medusa_lib.save_heads(heads, opt.out, **report)
  print(json.dumps(report, indent=2))
  print(f"wrote {pathlib.Path(opt.out) / 'model.safetensors'}")
  return 0


def real_paths(opt):
  """``--data=real``: the trees measured after training, a chain over every head and a small 2-wide tree."""
  return tree_lib.parse_chain_paths(f"chain{opt.num_heads}+1x{opt.num_heads - 1}")


def make_real(opt, target, subset):
  """``--data=real``: ``--num_heads`` residual heads on the target's LM head
  (:func:`medusa_train.medusa_kl_loss`), saved in float16."""
  init = medusa_lib.init_heads(None, opt.num_heads, target.config.d_model)
  drafter_fn = lambda p: medusa_lib.Medusa.create(target, p, real_paths(opt), subset_K=subset)  # noqa: E731
  save_fn = lambda p, folder: medusa_lib.save_heads(p, folder, dtype="float16", k=opt.k)  # noqa: E731
  lm_head = drafter_fn(init).lm_head_ExV  # the target's LM head, its subset's columns when truncated
  return init, medusa_train.medusa_kl_loss(lm_head, opt.num_heads), drafter_fn, save_fn


# acceptance at the depth of the trees measured
REAL = real_heads.RealHeadRecipe("medusa", make_real, eval_gammas=lambda opt: [max(map(len, real_paths(opt)))])


def define_own(d) -> None:
  d("float", "learning_rate", 3e-3, "peak learning rate")
  d("integer", "seed", 0, "seed for prompts and data order")
  d("integer", "num_sequences", 384, "--data=generated: self-distillation sequences (the last 1/8 held out)")
  d("integer", "prompt_len", 64, "--data=generated: prompt tokens per sequence")
  d("integer", "gen_tokens", 192, "--data=generated: tokens the target generates per sequence")
  d("list", "gen_temperatures", ["0"], "--data=generated: generation temperatures for the data, sequences "
    "split evenly. 0 (greedy, the shipped heads); 0,1 trades greedy acceptance for sampled: "
    "benchmarks/families/medusa_data_mix.md")


def main(argv) -> int:
  return real_heads.head_task(argv, __doc__, REAL, FLAG_TABLE, DEMO_FLAGS, train_demo, define_own)
