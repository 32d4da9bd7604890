"""Trains an EAGLE-3 head on a FROZEN target (training-time test) and writes it to specjax/assets/demo/eagle.

  python scripts/train_eagle.py --workdir=runs/eagle          # demo target, ~10 min on 2 CPU cores
  python scripts/train_eagle.py --eval_only                   # acceptance at gamma 1..7 (chain, greedy)

Data: continuations the target itself generates from stdlib prompts (self-distillation), with the
target's features of the head's three layers computed once. The head is unrolled ``--depth``
steps (specjax.train.eagle.eagle_loss: KL to the target's distribution, step weights 0.8^(j-1)).
Seeded; resumes from its orbax checkpoints; writes training.json (curve summary, acceptance) and
the loss plot beside the weights.
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
from specjax.drafters.eagle import Eagle
from specjax.models import eagle_head, heads
from specjax.train import eagle as train_eagle
from specjax.train import heads as train_heads
from specjax.train import loop

FLAGS = flags.FLAGS
flags.DEFINE_string("target", "specjax/assets/demo/target", "frozen target model folder")
flags.DEFINE_string("workdir", "runs/eagle", "checkpoints and metrics")
flags.DEFINE_string("out", "specjax/assets/demo/eagle", "where the trained head goes")
flags.DEFINE_integer("steps", 300, "optimizer steps")
flags.DEFINE_integer("batch", 8, "sequences per step")
flags.DEFINE_integer("depth", 5, "draft steps unrolled in training (training-time test)")
flags.DEFINE_integer("mlp_dim", 768, "head MLP width")
flags.DEFINE_float("learning_rate", 2e-3, "peak learning rate")
flags.DEFINE_integer("pool", 256, "training sequences (target features computed once)")
flags.DEFINE_integer("seq_len", 128, "tokens per training sequence")
flags.DEFINE_list("gen_temperatures", ["0.0", "0.7"], "temperatures the generated pool is split over")
flags.DEFINE_list("eval_gammas", [str(g) for g in range(1, 8)], "draft lengths to measure")
flags.DEFINE_bool("eval_only", False, "skip training; evaluate the head at --out")
flags.DEFINE_integer("seed", 0, "init and data seed")


def evaluate(target, head):
  prompts = np.stack(code_corpus.held_out_prompts(8, 96, seed=0)).astype(np.int32)
  return train_heads.acceptance_by_gamma(target, Eagle(head), prompts, [int(g) for g in FLAGS.eval_gammas])


def main(_):
  t0 = time.time()
  target = specjax.checkpoint.load_model(FLAGS.target)
  out = pathlib.Path(FLAGS.out)
  if FLAGS.eval_only:
    print(json.dumps(evaluate(target, heads.load_head(out)), indent=2))
    return
  tc = target.config
  module = eagle_head.EagleHead(eagle_head.EagleConfig(
      vocab_size=tc.vocab_size, d_model=tc.d_model, num_heads=tc.num_heads, num_kv_heads=tc.num_kv_heads,
      head_dim=tc.head_dim, mlp_dim=FLAGS.mlp_dim, target_layers=eagle_head.eagle3_layers(tc.num_layers),
      rope_theta=tc.rope_theta))
  init = heads.init_head(module, FLAGS.seed)
  layers = module.cfg.target_layers
  temps = tuple(float(t) for t in FLAGS.gen_temperatures)
  text = train_heads.text_pool(target, code_corpus.load_split("train"), FLAGS.pool, FLAGS.seq_len,
                               temperatures=temps, seed=FLAGS.seed)
  held_text = train_heads.text_pool(target, code_corpus.load_split("held_out"), 32, FLAGS.seq_len,
                                    temperatures=temps, seed=FLAGS.seed + 1)
  pool = train_heads.feature_pool(target, text, layers)
  held = train_heads.feature_pool(target, held_text, layers)
  print(f"data pool ready: {text.shape}, features of layers {layers}, in {time.time() - t0:.0f}s")
  loss_fn = train_eagle.eagle_loss(module, target, FLAGS.depth)
  probe = train_heads.pool_batch(held, 0, 32, 1234)
  metrics = lambda params: {k: round(float(v), 4) for k, v in jax.jit(loss_fn)(params, probe)[1].items()}
  before = metrics(init.params)
  cfg = loop.TrainConfig(steps=FLAGS.steps, learning_rate=FLAGS.learning_rate, warmup_steps=20, checkpoint_every=50)
  params = loop.train(init.params, loss_fn, lambda s: train_heads.pool_batch(pool, s, FLAGS.batch, FLAGS.seed),
                      cfg, FLAGS.workdir, desc="eagle")
  head = init.replace(params=params)
  report = {"params": head.num_params, "steps": FLAGS.steps, "depth": FLAGS.depth, "target_layers": list(layers),
            "pool": list(text.shape), "held_out_before": before, "held_out_after": metrics(params),
            "train_wall_s": round(time.time() - t0, 1)}
  heads.save_head(head, out, dtype="bfloat16")
  loop.plot_loss(FLAGS.workdir, title="EAGLE-3 head on the frozen target")
  curve = loop.read_metrics(FLAGS.workdir)
  report["curve"] = [{k: round(r[k], 4) for k in ("step", "loss", "accept_len")} for r in curve[::max(len(curve) // 30, 1)]]
  report["acceptance_greedy"] = evaluate(target, head)
  (out / "training.json").write_text(json.dumps(report, indent=2) + "\n")
  print(json.dumps(report, indent=2))


if __name__ == "__main__":
  app.run(main)
