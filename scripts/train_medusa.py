"""Medusa-1: trains K heads on a frozen target with self-distillation data, writes them for run.py.

  python scripts/train_medusa.py --target=specjax/assets/demo/target --out=specjax/assets/demo/medusa
  python -m specjax.run --config=configs/medusa_demo.py

Steps: held-out prompts (specjax.data.code_corpus, or random ids for a non-byte-level target) ->
the target continues them (specjax.generate) -> one frozen target pass gives the hidden states ->
the heads train on them (resumes from --workdir) -> per-head top-1 accuracy on held-out
generated sequences, before and after, goes to stdout and ``<out>/medusa.json``.
"""
from __future__ import annotations

import json
import pathlib
import time

from absl import app, flags
import numpy as np

from specjax import checkpoint
from specjax.data.tokenizer import ByteTokenizer
from specjax.drafters import medusa as medusa_lib
from specjax.train import loop
from specjax.train import heads as train_heads
from specjax.train import medusa as medusa_train

FLAGS = flags.FLAGS
flags.DEFINE_string("target", "specjax/assets/demo/target", "folder of the frozen target (checkpoint.load_model)")
flags.DEFINE_string("out", "specjax/assets/demo/medusa", "where heads.npz and medusa.json go")
flags.DEFINE_string("workdir", "runs/medusa", "checkpoints and metrics")
flags.DEFINE_integer("num_heads", 4, "Medusa heads (head k predicts k + 2 tokens ahead)")
flags.DEFINE_integer("num_sequences", 384, "self-distillation sequences (the last 1/8 held out)")
flags.DEFINE_integer("prompt_len", 64, "prompt tokens per sequence")
flags.DEFINE_integer("gen_tokens", 192, "tokens the target generates per sequence")
flags.DEFINE_list("gen_temperatures", ["0"], "generation temperatures for the data, sequences split evenly. "
                  "0 (greedy, the shipped heads); 0,1 trades greedy acceptance for sampled: "
                  "benchmarks/families/medusa_data_mix.md")
flags.DEFINE_integer("steps", 1500, "optimizer steps")
flags.DEFINE_integer("batch_size", 16, "sequences per step")
flags.DEFINE_float("learning_rate", 3e-3, "peak learning rate")
flags.DEFINE_integer("seed", 0, "seed for prompts and data order")


def prompts_for(target, n, prompt_len, seed):
  if target.vocab_size == ByteTokenizer().vocab_size:
    from specjax.data import code_corpus  # pylint: disable=import-outside-toplevel
    return np.stack(code_corpus.held_out_prompts(n, prompt_len, seed=seed + 1000)).astype(np.int32)
  return np.random.RandomState(seed).randint(3, target.vocab_size, size=(n, prompt_len)).astype(np.int32)


def main(_):
  t0 = time.time()
  target = checkpoint.load_model(FLAGS.target)
  prompts = prompts_for(target, FLAGS.num_sequences, FLAGS.prompt_len, FLAGS.seed)
  print(f"generating {len(prompts)} x {FLAGS.gen_tokens} tokens with the target ...")
  temps = [float(t) for t in FLAGS.gen_temperatures]
  tokens = train_heads.generated_text_over(target, prompts, FLAGS.gen_tokens, temps, seed=FLAGS.seed)
  tokens = tokens[np.random.RandomState(FLAGS.seed).permutation(len(tokens))]  # held-out rows from every temperature
  hidden = medusa_train.hidden_states(target, tokens)
  n_train = len(tokens) - max(len(tokens) // 8, 1)
  cfg = loop.TrainConfig(steps=FLAGS.steps, learning_rate=FLAGS.learning_rate, warmup_steps=50, weight_decay=0.0,
                         checkpoint_every=250)
  lm_head = medusa_lib.target_lm_head(target)
  zero = medusa_lib.init_heads(None, FLAGS.num_heads, hidden.shape[-1])
  before = medusa_train.head_accuracy(zero, lm_head, hidden[n_train:], tokens[n_train:], FLAGS.prompt_len)
  heads = medusa_train.train_heads(target, tokens[:n_train], hidden[:n_train], num_heads=FLAGS.num_heads,
                                   label_from=FLAGS.prompt_len, cfg=cfg, workdir=FLAGS.workdir,
                                   batch_size=FLAGS.batch_size, seed=FLAGS.seed)
  after = medusa_train.head_accuracy(heads, lm_head, hidden[n_train:], tokens[n_train:], FLAGS.prompt_len)
  report = {"target": str(FLAGS.target), "steps": FLAGS.steps, "train_sequences": int(n_train),
            "held_out_sequences": int(len(tokens) - n_train), "gen_tokens": FLAGS.gen_tokens,
            "temperatures": temps, "held_out_top1_before": before, "held_out_top1_after": after,
            "wall_s": round(time.time() - t0, 1)}
  medusa_lib.save_heads(heads, FLAGS.out, **report)
  print(json.dumps(report, indent=2))
  print(f"wrote {pathlib.Path(FLAGS.out) / 'heads.npz'}")


if __name__ == "__main__":
  app.run(main)
