"""Trains (heals) a shared-weight MTP head on a FROZEN target and writes it to specjax/assets/demo/mtp.

  python scripts/train_mtp.py --target=specjax/assets/demo/target --workdir=runs/mtp   # ~6 min, 2 CPU cores
  python scripts/train_mtp.py --eval_only                                            # acceptance at gamma 1..7

The target's hidden states over a pool of text (target-generated continuations of stdlib prompts,
or stdlib crops with --data=corpus) are computed once; the head is unrolled ``--depth`` steps from
every position and trained with KL to the target's own next-token distributions
(specjax.train.heads.mtp_loss). Resumes from its orbax checkpoints. Afterwards it measures the
real acceptance length at draft lengths 1..7 with speculative_generate on held-out prompts.
"""
from __future__ import annotations

import json
import pathlib
import time

from absl import app, flags
import jax
import numpy as np

import specjax
from specjax.data import code_corpus
from specjax.models import heads
from specjax.train import heads as train_heads
from specjax.train import loop

FLAGS = flags.FLAGS
flags.DEFINE_string("target", "specjax/assets/demo/target", "frozen target model folder")
flags.DEFINE_string("workdir", "runs/mtp", "checkpoints and metrics")
flags.DEFINE_string("out", "specjax/assets/demo/mtp", "where the trained head goes")
flags.DEFINE_integer("steps", 200, "optimizer steps")
flags.DEFINE_integer("batch", 8, "sequences per step")
flags.DEFINE_integer("depth", 7, "recursive steps unrolled in training")
flags.DEFINE_integer("mlp_dim", 1024, "head MLP width")
flags.DEFINE_integer("num_blocks", 1, "residual MLP blocks in the head")
flags.DEFINE_float("learning_rate", 3e-3, "peak learning rate")
flags.DEFINE_enum("data", "generated", ["generated", "corpus"], "target-generated text or stdlib crops")
flags.DEFINE_integer("pool", 256, "training sequences (target features computed once)")
flags.DEFINE_integer("seq_len", 128, "tokens per training sequence")
flags.DEFINE_list("gen_temperatures", ["0.0", "0.7"], "temperatures the generated pool is split over")
flags.DEFINE_list("eval_gammas", [str(g) for g in range(1, 8)], "draft lengths to measure")
flags.DEFINE_bool("eval_only", False, "skip training; evaluate the head at --out")
flags.DEFINE_integer("seed", 0, "init and data seed")


def evaluate(target, head):
  prompts = np.stack(code_corpus.held_out_prompts(8, 96, seed=0)).astype(np.int32)
  return train_heads.acceptance_by_gamma(target, specjax.drafters.MTP(head), prompts,
                                         [int(g) for g in FLAGS.eval_gammas])


def main(_):
  t0 = time.time()
  target = specjax.checkpoint.load_model(FLAGS.target)
  out = pathlib.Path(FLAGS.out)
  if FLAGS.eval_only:
    print(json.dumps(evaluate(target, heads.load_head(out)), indent=2))
    return
  tc = target.config
  module = heads.MTPHead(heads.MTPConfig(vocab_size=tc.vocab_size, d_model=tc.d_model, mlp_dim=FLAGS.mlp_dim,
                                         num_blocks=FLAGS.num_blocks))
  init = heads.init_head(module, FLAGS.seed)
  temps = tuple(float(t) for t in FLAGS.gen_temperatures)
  text = train_heads.text_pool(target, code_corpus.load_split("train"), FLAGS.pool, FLAGS.seq_len,
                               source=FLAGS.data, temperatures=temps, seed=FLAGS.seed)
  held_text = train_heads.text_pool(target, code_corpus.load_split("held_out"), 32, FLAGS.seq_len,
                                    source=FLAGS.data, temperatures=temps, seed=FLAGS.seed + 1)
  pool, held = train_heads.feature_pool(target, text), train_heads.feature_pool(target, held_text)
  print(f"data pool ready: {text.shape} in {time.time() - t0:.0f}s")
  loss_fn = train_heads.mtp_loss(module, target, FLAGS.depth)
  probe = train_heads.pool_batch(held, 0, 32, 1234)
  metrics = lambda params: {k: round(float(v), 4) for k, v in jax.jit(loss_fn)(params, probe)[1].items()}
  before = metrics(init.params)
  cfg = loop.TrainConfig(steps=FLAGS.steps, learning_rate=FLAGS.learning_rate, warmup_steps=20, checkpoint_every=50)
  params = loop.train(init.params, loss_fn, lambda s: train_heads.pool_batch(pool, s, FLAGS.batch, FLAGS.seed),
                      cfg, FLAGS.workdir, desc="mtp")
  head = init.replace(params=params)
  report = {"params": head.num_params, "steps": FLAGS.steps, "depth": FLAGS.depth, "data": FLAGS.data,
            "pool": list(text.shape), "held_out_before": before, "held_out_after": metrics(params),
            "train_wall_s": round(time.time() - t0, 1)}
  heads.save_head(head, out, dtype="bfloat16")
  loop.plot_loss(FLAGS.workdir, title="MTP head on the frozen demo target")
  report["acceptance_greedy"] = evaluate(target, head)
  (out / "training.json").write_text(json.dumps(report, indent=2) + "\n")
  print(json.dumps(report, indent=2))


if __name__ == "__main__":
  app.run(main)
