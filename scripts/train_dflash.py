"""Trains a DFlash block drafter on a FROZEN target and writes it to specjax/assets/demo/dflash.

  python scripts/train_dflash.py --target=specjax/assets/demo/target --workdir=runs/dflash   # ~12 min, 2 CPU cores
  python scripts/train_dflash.py --eval_only --eval_gammas=3,7,11                           # block-size mismatch

Data: target-generated continuations of stdlib prompts (DFlash trains on the target's own
responses); the chosen target layers' outputs are computed once for the whole pool. Each step draws
``--anchors`` random anchors per sequence; every anchor opens a block ``[x_a, MASK * (B-1)]`` that sees
the target features of the tokens before it, and the loss (KL to the target) weighs block position i
by exp(-(i-1)/--decay). Afterwards it measures the real acceptance at gamma = B-1 and at mismatched
block sizes with speculative_generate on held-out prompts.
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
from specjax.models import block_drafter, heads
from specjax.train import heads as train_heads
from specjax.train import loop

FLAGS = flags.FLAGS
flags.DEFINE_string("target", "specjax/assets/demo/target", "frozen target model folder")
flags.DEFINE_string("workdir", "runs/dflash", "checkpoints and metrics")
flags.DEFINE_string("out", "specjax/assets/demo/dflash", "where the trained drafter goes")
flags.DEFINE_integer("steps", 1000, "optimizer steps")
flags.DEFINE_integer("batch", 16, "sequences per step")
flags.DEFINE_integer("anchors", 8, "random anchors (blocks) per sequence per step")
flags.DEFINE_integer("block_size", 8, "B: anchor + B-1 masks; decode with gamma = B-1")
flags.DEFINE_integer("num_layers", 1, "draft layers")
flags.DEFINE_integer("mlp_dim", 1024, "draft MLP width")
flags.DEFINE_integer("num_feature_layers", 3, "target layers fused into the context feature")
flags.DEFINE_float("decay", 4.0, "loss weight of block position i: exp(-(i-1)/decay)")
flags.DEFINE_float("learning_rate", 3e-3, "peak learning rate")
flags.DEFINE_integer("pool", 256, "training sequences (target features computed once)")
flags.DEFINE_integer("seq_len", 320, "tokens per training sequence (64 prompt + generated); cover the "
                     "context lengths you decode at: DFlash drafts worse past the positions it saw")
flags.DEFINE_list("gen_temperatures", ["0.0", "0.7"], "temperatures the generated pool is split over")
flags.DEFINE_list("eval_gammas", [], "draft lengths to measure (default: B-1, and B/2-1, 2B-1 for the mismatch)")
flags.DEFINE_bool("eval_only", False, "skip training; evaluate the drafter at --out")
flags.DEFINE_integer("seed", 0, "init and data seed")


def evaluate(target, head):
  b = head.config.block_size
  gammas = [int(g) for g in FLAGS.eval_gammas] or [b - 1, b // 2 - 1, 2 * b - 1]
  prompts = np.stack(code_corpus.held_out_prompts(8, 96, seed=0)).astype(np.int32)
  return train_heads.acceptance_by_gamma(target, specjax.drafters.DFlash(head), prompts, gammas)


def main(_):
  t0 = time.time()
  target = specjax.checkpoint.load_model(FLAGS.target)
  out = pathlib.Path(FLAGS.out)
  if FLAGS.eval_only:
    print(json.dumps(evaluate(target, heads.load_head(out)), indent=2))
    return
  tc = target.config
  layers = block_drafter.spaced_layers(tc.num_layers, FLAGS.num_feature_layers)
  module = block_drafter.BlockDrafter(block_drafter.BlockDrafterConfig(
      vocab_size=tc.vocab_size, d_model=tc.d_model, num_layers=FLAGS.num_layers, num_heads=tc.num_heads,
      num_kv_heads=tc.num_kv_heads, head_dim=tc.head_dim, mlp_dim=FLAGS.mlp_dim, target_layers=layers,
      block_size=FLAGS.block_size, rope_theta=tc.rope_theta))
  init = heads.init_head(module, FLAGS.seed)
  temps = tuple(float(t) for t in FLAGS.gen_temperatures)
  text = train_heads.text_pool(target, code_corpus.load_split("train"), FLAGS.pool, FLAGS.seq_len,
                               temperatures=temps, seed=FLAGS.seed)
  held_text = train_heads.text_pool(target, code_corpus.load_split("held_out"), 32, FLAGS.seq_len,
                                    temperatures=temps, seed=FLAGS.seed + 1)
  pool, held = train_heads.feature_pool(target, text, layers), train_heads.feature_pool(target, held_text, layers)
  print(f"data pool ready: {text.shape}, target layers {layers}, in {time.time() - t0:.0f}s")
  loss_fn = train_heads.dflash_loss(module, target, FLAGS.decay)
  anchors = (FLAGS.block_size, FLAGS.anchors)
  probe = train_heads.pool_batch(held, 0, 32, 1234, anchors)
  metrics = lambda params: {k: round(float(v), 4) for k, v in jax.jit(loss_fn)(params, probe)[1].items()}
  before = metrics(init.params)
  cfg = loop.TrainConfig(steps=FLAGS.steps, learning_rate=FLAGS.learning_rate, warmup_steps=20, checkpoint_every=50)
  params = loop.train(init.params, loss_fn, lambda s: train_heads.pool_batch(pool, s, FLAGS.batch, FLAGS.seed, anchors),
                      cfg, FLAGS.workdir, desc="dflash")
  head = init.replace(params=params)
  report = {"params": head.num_params, "steps": FLAGS.steps, "block_size": FLAGS.block_size,
            "target_layers": list(layers), "pool": list(text.shape), "held_out_before": before,
            "held_out_after": metrics(params), "train_wall_s": round(time.time() - t0, 1)}
  heads.save_head(head, out, dtype="bfloat16")
  loop.plot_loss(FLAGS.workdir, title="DFlash block drafter on the frozen demo target")
  report["acceptance_greedy"] = evaluate(target, head)
  (out / "training.json").write_text(json.dumps(report, indent=2) + "\n")
  print(json.dumps(report, indent=2))


if __name__ == "__main__":
  app.run(main)
