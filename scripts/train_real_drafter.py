"""Distils a small separate draft model for a real target from the target's own generations.

  nice -n 10 python scripts/make_real_data.py                          # the data (target-generated)
  nice -n 10 python scripts/train_real_drafter.py                      # -> specjax/assets/smollm2/draft_lm
  nice -n 10 python scripts/train_real_drafter.py --steps=600 --k=8192 --d_model=256 --num_layers=2

Sequence-level KD: cross-entropy on the target's greedy continuations (prompt tokens are context
only), so the drafter learns the target's argmax, which is what greedy acceptance asks for.
The drafter (:mod:`specjax.models.draft_lm`) reads the target's frozen embedding through a learned
projection and predicts over the ``--k`` most frequent tokens of the target's generations (FR-Spec
truncation; labels outside the subset are skipped, they are never proposed): with
``--frozen_head`` (default) through the target's own LM-head columns, so it stores only the small
parts (a few MB in bf16). Seeded; resumes from ``--workdir``'s orbax checkpoints; writes the
training curve (``metrics.jsonl``) and ``training.json`` (held-out loss and greedy agreement
before/after, coverage of the subset) beside the weights.
"""
from __future__ import annotations

import json
import pathlib
import time

from absl import app, flags
import jax
import jax.numpy as jnp
import numpy as np
import optax

import specjax
from specjax.data import generated as make_real_data
from specjax.drafters import vocab
from specjax.models import draft_lm
from specjax.train import loop


FLAGS = flags.FLAGS
flags.DEFINE_string("target", "smollm2-135m-instruct", "checkpoint (anything load_pretrained takes)")
flags.DEFINE_string("data", "", "data folder of make_real_data.py (default: its default)")
flags.DEFINE_string("workdir", "runs/smollm2_draft_lm", "checkpoints and metrics")
flags.DEFINE_string("out", "specjax/assets/smollm2/draft_lm", "where the finished bundle goes")
flags.DEFINE_integer("k", 8192, "draft vocabulary: the K most frequent generated tokens")
flags.DEFINE_integer("d_model", 256, "drafter width")
flags.DEFINE_integer("num_layers", 2, "drafter blocks")
flags.DEFINE_integer("num_heads", 4, "attention heads (head_dim 64)")
flags.DEFINE_integer("num_kv_heads", 2, "KV heads")
flags.DEFINE_integer("mlp_dim", 768, "SwiGLU width")
flags.DEFINE_bool("frozen_head", True, "logits through the target's LM-head columns of the subset")
flags.DEFINE_integer("steps", 600, "optimizer steps")
flags.DEFINE_integer("batch_size", 16, "sequences per step")
flags.DEFINE_float("learning_rate", 3e-3, "peak learning rate")
flags.DEFINE_integer("seed", 0, "init and data order")


def sequences(d) -> tuple[np.ndarray, np.ndarray]:
  """``[N, P + T]`` prompt + continuation ids (right-padded) and a mask of continuation tokens."""
  n, p = d["prompts"].shape
  t = d["tokens"].shape[1]
  seq = np.zeros((n, p + t), np.int32)
  gen = np.zeros((n, p + t), bool)
  for i in range(n):
    pl, gl = d["prompt_lengths"][i], d["lengths"][i]
    seq[i, :pl] = d["prompts"][i, :pl]
    seq[i, pl:pl + gl] = d["tokens"][i, :gl]
    gen[i, pl:pl + gl] = True
  return seq, gen


def make_loss(module, frozen, to_k_V):
  """CE of the drafter's K logits on the continuation tokens inside the subset."""
  def loss_fn(params, batch):
    seq, gen = batch
    inputs, labels, weight = seq[:, :-1], seq[:, 1:], gen[:, 1:]
    logits_BxTxK, _, _ = module.apply({"params": {**params, **frozen}}, inputs)
    label_k = to_k_V[labels]
    w = (weight & (label_k >= 0)).astype(jnp.float32)
    nll = optax.softmax_cross_entropy_with_integer_labels(logits_BxTxK, jnp.maximum(label_k, 0))
    norm = jnp.maximum(w.sum(), 1.0)
    agree = (jnp.argmax(logits_BxTxK, -1) == label_k).astype(jnp.float32)
    # greedy agreement over every continuation token (labels outside the subset count as misses)
    all_w = weight.astype(jnp.float32)
    return jnp.sum(nll * w) / norm, {"greedy_agreement": jnp.sum(agree * all_w) / jnp.maximum(all_w.sum(), 1.0)}
  return loss_fn


def evaluate(loss_fn, params, seq, gen, batch=16):
  rows = [loss_fn(params, (jnp.asarray(seq[i:i + batch]), jnp.asarray(gen[i:i + batch])))
          for i in range(0, len(seq) - batch + 1, batch)]
  return {"loss": float(np.mean([float(r[0]) for r in rows])),
          "greedy_agreement": float(np.mean([float(r[1]["greedy_agreement"]) for r in rows]))}


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments: {argv[1:]}")
  t0 = time.time()
  target, _ = specjax.load_pretrained(FLAGS.target)
  data_dir = pathlib.Path(FLAGS.data or make_real_data.default_out(FLAGS.target)).expanduser()
  train = make_real_data.load_shards(data_dir, "shards")
  held = make_real_data.load_shards(data_dir, "held_out")
  counts = make_real_data.token_counts(data_dir, target.vocab_size)
  subset = vocab.top_k_subset(counts, FLAGS.k)
  held_counts = np.bincount(held["tokens"][np.arange(held["tokens"].shape[1])[None] < held["lengths"][:, None]],
                            minlength=target.vocab_size)
  to_k = np.full((target.vocab_size,), -1, np.int32)
  to_k[subset] = np.arange(FLAGS.k)
  tc = target.config
  cfg = draft_lm.DraftLMConfig(
      vocab_size=tc.vocab_size, embed_dim=tc.d_model, out_vocab=FLAGS.k, frozen_head=FLAGS.frozen_head,
      d_model=FLAGS.d_model, num_layers=FLAGS.num_layers, num_heads=FLAGS.num_heads,
      num_kv_heads=FLAGS.num_kv_heads, head_dim=64, mlp_dim=FLAGS.mlp_dim, rope_theta=tc.rope_theta,
      norm_eps=tc.norm_eps, tie_embeddings=False)
  model = draft_lm.init(cfg, target, FLAGS.seed, subset)
  frozen = {k: v for k, v in model.params.items() if k in draft_lm.FROZEN_KEYS}
  params = {k: v for k, v in model.params.items() if k not in draft_lm.FROZEN_KEYS}
  loss_fn = make_loss(model.module, frozen, jnp.asarray(to_k))
  seq, gen = sequences(train)
  hseq, hgen = sequences(held)
  print(f"train: {len(seq)} sequences, {int(gen.sum())} target tokens; held out: {len(hseq)}, "
        f"{int(hgen.sum())}; K={FLAGS.k} covers {vocab.coverage(counts, subset):.4f} of train tokens, "
        f"{vocab.coverage(held_counts, subset):.4f} of held-out", flush=True)

  def batch_fn(step):
    rows = np.random.default_rng([FLAGS.seed, step]).integers(0, len(seq), FLAGS.batch_size)
    return jnp.asarray(seq[rows]), jnp.asarray(gen[rows])

  eval_fn = jax.jit(loss_fn)
  before = evaluate(eval_fn, params, hseq, hgen)
  tcfg = loop.TrainConfig(steps=FLAGS.steps, learning_rate=FLAGS.learning_rate, warmup_steps=30,
                          checkpoint_every=50, log_every=10)
  params = loop.train(params, loss_fn, batch_fn, tcfg, FLAGS.workdir, desc="draft_lm seq-KD")
  after = evaluate(eval_fn, params, hseq, hgen)
  model = model.replace(params={**params, **frozen})
  report = {
      "target": FLAGS.target, "config": {k: getattr(cfg, k) for k in ("d_model", "num_layers", "num_heads",
                                                                      "num_kv_heads", "mlp_dim", "out_vocab",
                                                                      "frozen_head")},
      "stored_params": draft_lm.DraftLM.stored_params(model.params), "steps": FLAGS.steps,
      "batch_size": FLAGS.batch_size, "seed": FLAGS.seed, "train_sequences": int(len(seq)),
      "train_target_tokens": int(gen.sum()), "tokens_seen": int(FLAGS.steps * FLAGS.batch_size * seq.shape[1]),
      "subset_coverage_train": vocab.coverage(counts, subset), "subset_coverage_held_out":
      vocab.coverage(held_counts, subset), "held_out_before": before, "held_out_after": after,
      "wall_s": round(time.time() - t0, 1), "curve": loop.read_metrics(FLAGS.workdir)}
  out = pathlib.Path(FLAGS.out)
  draft_lm.save(model, subset, out, dtype="bfloat16", extra={"training": {k: v for k, v in report.items()
                                                                          if k != "curve"}})
  (out / "training.json").write_text(json.dumps(report, indent=1) + "\n")
  print(json.dumps({k: v for k, v in report.items() if k != "curve"}, indent=2))


if __name__ == "__main__":
  app.run(main)
