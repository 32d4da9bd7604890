"""Trains Medusa-1 heads, the shared MTP head or a DFlash block drafter on a FROZEN real target.

  nice -n 10 python scripts/make_real_data.py                                  # the data (once)
  nice -n 10 python scripts/train_real_heads.py --family=mtp      # -> specjax/assets/smollm2/mtp
  nice -n 10 python scripts/train_real_heads.py --family=medusa   # -> specjax/assets/smollm2/medusa
  nice -n 10 python scripts/train_real_heads.py --family=dflash --steps=1600 --out=runs/smollm2_dflash/head
  nice -n 10 python scripts/make_real_data.py --target=gemma3-270m --minutes=40
  nice -n 10 python scripts/train_real_heads.py --family=medusa --target=gemma3-270m --steps=300  # -> assets/gemma3
  python -m specjax.run --config=configs/smollm2_135m.py:mtp

Data: crops of ``--crop`` tokens of ``scripts/make_real_data.py``'s generations (code / translation
/ text; the last quarter-crop of each prompt and the continuation after it). The target's final
hidden states (and, for DFlash, the outputs of the layers it fuses) over them are computed once and
cached beside the data (``features_crop<N>[_layers...].npz``), so the next run reuses them.
Every family learns the target's soft next-token distributions (KL) over a truncated vocabulary:
the ``--k`` most frequent tokens of the target's generations, saved as ``subset.npy`` beside the
weights (FR-Spec; never-proposed tokens still come out of the residual, so decoding stays exact).

* ``mtp``: :class:`specjax.models.heads.MTPHead` unrolled ``--depth`` steps
  (:func:`specjax.train.heads.mtp_loss`).
* ``medusa``: ``--num_heads`` residual heads on the target's LM head
  (:func:`specjax.train.medusa.medusa_kl_loss`), saved in float16.
* ``dflash``: :class:`specjax.models.block_drafter.BlockDrafter` with blocks of ``--block_size``
  (gamma = block_size - 1), ``--anchors`` random blocks per row (:func:`specjax.train.heads.dflash_loss`).

Seeded; resumes from ``--workdir``'s orbax checkpoints; writes ``training.json`` (held-out metrics
before/after, the curve, greedy acceptance on held-out prompts) beside the weights.
"""
from __future__ import annotations

import json
import pathlib
import time

from absl import app, flags
import jax
import jax.numpy as jnp
import numpy as np

import specjax
from specjax import tree as tree_lib
from specjax.data import generated
from specjax.drafters import medusa as medusa_lib
from specjax.drafters import vocab
from specjax.models import block_drafter, heads
from specjax.train import heads as train_heads
from specjax.train import loop
from specjax.train import medusa as medusa_train

FLAGS = flags.FLAGS
flags.DEFINE_enum("family", "mtp", ["mtp", "medusa", "dflash"], "which drafter to train")
flags.DEFINE_string("target", "smollm2-135m-instruct", "checkpoint (anything load_pretrained takes)")
flags.DEFINE_string("data", "", "make_real_data.py's folder (default: its default for --target)")
flags.DEFINE_string("workdir", "", "checkpoints and metrics (default runs/<target>_<family>)")
flags.DEFINE_string("out", "", "where the weights go (default specjax/assets/smollm2/<family>)")
flags.DEFINE_integer("k", 4096, "draft vocabulary: the K most frequent generated tokens (0: all)")
flags.DEFINE_integer("crop", 128, "tokens per training row")
flags.DEFINE_integer("steps", 400, "optimizer steps")
flags.DEFINE_integer("batch", 8, "rows per step")
flags.DEFINE_float("learning_rate", 3e-3, "peak learning rate")
flags.DEFINE_integer("depth", 4, "mtp: steps unrolled in training")
flags.DEFINE_integer("mlp_dim", 1152, "mtp / dflash: MLP width")
flags.DEFINE_integer("num_heads", 3, "medusa: heads (head k predicts k + 2 tokens ahead)")
flags.DEFINE_integer("block_size", 4, "dflash: anchor + block_size - 1 masks")
flags.DEFINE_integer("anchors", 8, "dflash: random blocks per row per step")
flags.DEFINE_integer("num_feature_layers", 3, "dflash: target layers fused into its context feature")
flags.DEFINE_list("eval_gammas", ["2", "3", "4"], "mtp: draft lengths measured on held-out prompts")
flags.DEFINE_integer("seed", 0, "init and data order")


def cached_pool(target, rows_NxT, path: pathlib.Path, layers=()) -> dict:
  """:func:`train_heads.feature_pool` (final hidden states, and ``layers``' outputs as ``feat``;
  bf16), cached in ``path``."""
  import ml_dtypes  # pylint: disable=import-outside-toplevel
  if path.is_file():
    with np.load(path) as f:
      if f["tokens"].shape == rows_NxT.shape and np.array_equal(f["tokens"], rows_NxT):
        return {k: f[k] if k == "tokens" else f[k].view(ml_dtypes.bfloat16) for k in f.files}
  t0 = time.time()
  parts = [train_heads.feature_pool(target, rows_NxT[i:i + 64], layers)
           for i in _progress(range(0, len(rows_NxT), 64), f"target features -> {path.name}")]
  pool = {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}
  tmp = path.with_name(path.stem + ".tmp.npz")
  np.savez(tmp, **{k: v if k == "tokens" else v.view(np.uint16) for k, v in pool.items()})
  tmp.rename(path)
  print(f"features of {rows_NxT.shape} in {time.time() - t0:.0f}s", flush=True)
  return pool


def _progress(it, desc):
  from tqdm.auto import tqdm  # pylint: disable=import-outside-toplevel
  return tqdm(it, desc=desc, mininterval=10)


def make_family(target, subset):
  """``(params, loss_fn, drafter_fn(params) -> drafter, save_fn(params, folder))`` for --family."""
  tc = target.config
  if FLAGS.family == "dflash":
    module = block_drafter.BlockDrafter(block_drafter.BlockDrafterConfig(
        vocab_size=tc.vocab_size, d_model=tc.d_model, num_heads=tc.num_heads, num_kv_heads=tc.num_kv_heads,
        head_dim=tc.head_dim, mlp_dim=FLAGS.mlp_dim, target_layers=dflash_layers(target),
        block_size=FLAGS.block_size, rope_theta=tc.rope_theta, norm_eps=tc.norm_eps))
    init = heads.init_head(module, FLAGS.seed)
    drafter_fn = lambda p: specjax.drafters.DFlash(init.replace(params=p), subset)
    save_fn = lambda p, folder: heads.save_head(init.replace(params=p), folder, dtype="bfloat16")
    return init.params, train_heads.dflash_loss(module, target, subset_K=subset), drafter_fn, save_fn
  if FLAGS.family == "mtp":
    module = heads.MTPHead(heads.MTPConfig(vocab_size=tc.vocab_size, d_model=tc.d_model, mlp_dim=FLAGS.mlp_dim,
                                           norm_eps=tc.norm_eps))
    init = heads.init_head(module, FLAGS.seed)
    drafter_fn = lambda p: specjax.drafters.MTP(init.replace(params=p), subset)
    save_fn = lambda p, folder: heads.save_head(init.replace(params=p), folder, dtype="bfloat16")
    return init.params, train_heads.mtp_loss(module, target, FLAGS.depth, subset_K=subset), drafter_fn, save_fn
  init = medusa_lib.init_heads(None, FLAGS.num_heads, tc.d_model)
  drafter_fn = lambda p: medusa_lib.Medusa.create(target, p, medusa_paths(), subset_K=subset)
  save_fn = lambda p, folder: medusa_lib.save_heads(p, folder, dtype="float16", k=FLAGS.k)
  lm_head = drafter_fn(init).lm_head_ExV  # the target's LM head, its subset's columns when truncated
  return init, medusa_train.medusa_kl_loss(lm_head, FLAGS.num_heads), drafter_fn, save_fn


def dflash_layers(target) -> tuple:
  return block_drafter.spaced_layers(target.config.num_layers, FLAGS.num_feature_layers)


def medusa_paths():
  """The trees measured after training: a chain over every head and a small 2-wide tree."""
  return tree_lib.parse_chain_paths(f"chain{FLAGS.num_heads}+1x{FLAGS.num_heads - 1}")


def acceptance(target, drafter, prompts):
  """Greedy acceptance on held-out prompts: MTP at each ``--eval_gammas``, the others at their own depth."""
  gammas = {"mtp": [int(g) for g in FLAGS.eval_gammas], "dflash": [FLAGS.block_size - 1],
            "medusa": [max(map(len, medusa_paths()))]}[FLAGS.family]
  return train_heads.acceptance_by_gamma(target, drafter, prompts, gammas, max_new_tokens=64)


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments: {argv[1:]}")
  t0 = time.time()
  target, _ = specjax.load_pretrained(FLAGS.target)
  name = pathlib.Path(FLAGS.target).name.split("-")[0]
  workdir = FLAGS.workdir or f"runs/{name}_{FLAGS.family}"
  out = pathlib.Path(FLAGS.out or f"specjax/assets/{name}/{FLAGS.family}")
  folder = pathlib.Path(FLAGS.data or generated.default_out(FLAGS.target)).expanduser()
  train_rows, _ = generated.crops(folder, "shards", FLAGS.crop)
  held_rows, held_data = generated.crops(folder, "held_out", FLAGS.crop)
  counts = generated.token_counts(folder, target.vocab_size)
  subset = jnp.asarray(vocab.top_k_subset(counts, FLAGS.k)) if FLAGS.k else None
  layers = dflash_layers(target) if FLAGS.family == "dflash" else ()
  suffix = f"crop{FLAGS.crop}" + "".join(f"_{i}" for i in layers)
  pool = cached_pool(target, train_rows, folder / f"features_{suffix}.npz", layers)
  held = cached_pool(target, held_rows, folder / f"features_held_out_{suffix}.npz", layers)
  anchors = (FLAGS.block_size, FLAGS.anchors) if FLAGS.family == "dflash" else None
  params, loss_fn, drafter_fn, save_fn = make_family(target, subset)
  probe = train_heads.pool_batch(held, 0, 32, 1234, anchors)
  metrics = lambda p: {k: round(float(v), 4) for k, v in jax.jit(loss_fn)(p, probe)[1].items()}
  before = metrics(params)
  print(f"{FLAGS.family}: {len(train_rows)} train rows x {FLAGS.crop}; held-out before {before}", flush=True)
  cfg = loop.TrainConfig(steps=FLAGS.steps, learning_rate=FLAGS.learning_rate, warmup_steps=20,
                         weight_decay=0.0, checkpoint_every=50, log_every=10)
  params = loop.train(params, loss_fn, lambda s: train_heads.pool_batch(pool, s, FLAGS.batch, FLAGS.seed, anchors),
                      cfg, workdir, desc=f"{FLAGS.family} on {FLAGS.target}")
  drafter = drafter_fn(params)
  report = {"family": FLAGS.family, "target": FLAGS.target, "params": drafter.num_params, "k": FLAGS.k,
            "subset_coverage": None if subset is None else round(vocab.coverage(counts, np.asarray(subset)), 4),
            "steps": FLAGS.steps, "batch": FLAGS.batch, "crop": FLAGS.crop, "train_rows": len(train_rows),
            "seed": FLAGS.seed, "held_out_before": before, "held_out_after": metrics(params)}
  save_fn(params, out)
  if subset is not None:
    np.save(out / "subset.npy", np.asarray(subset, np.int32))
  report["acceptance_greedy"] = acceptance(target, drafter, generated.eval_prompts(held_data))
  report["wall_s"] = round(time.time() - t0, 1)
  curve = loop.read_metrics(workdir)
  report["curve"] = [{k: round(r[k], 4) for k in ("step", "loss", "accept_len")}
                     for r in curve[::max(len(curve) // 30, 1)]]
  (out / "training.json").write_text(json.dumps(report, indent=2) + "\n")
  print(json.dumps({k: v for k, v in report.items() if k != "curve"}, indent=2))


if __name__ == "__main__":
  app.run(main)
