"""MTP, Medusa-1 or DFlash on a FROZEN real target, from its own generations (``--data=real``).

The ``mtp``, ``medusa`` and ``dflash`` tasks come here with ``--data=real``:

  nice -n 10 python -m specjax.train data                                  # the data (once)
  nice -n 10 python -m specjax.train mtp --data=real       # -> specjax/assets/smollm2/mtp
  nice -n 10 python -m specjax.train medusa --data=real    # -> specjax/assets/smollm2/medusa
  nice -n 10 python -m specjax.train dflash --data=real --steps=1600 --out=runs/smollm2_dflash/head
  nice -n 10 python -m specjax.train data --target=gemma3-270m --minutes=40
  nice -n 10 python -m specjax.train medusa --data=real --target=gemma3-270m --steps=300  # -> assets/gemma3
  python -m specjax.run --config=configs/smollm2_135m.py:mtp

Data: crops of ``--crop`` tokens of the ``data`` task's generations (code / translation / text; the
last quarter-crop of each prompt and the continuation after it). The target's final hidden states
(and, for DFlash, the outputs of the layers it fuses) over them are computed once and cached beside
the data (``features_crop<N>[_layers...].npz``), so the next run reuses them. Every family learns
the target's soft next-token distributions (KL) over a truncated vocabulary: the ``--k`` most
frequent tokens of the target's generations, saved as ``vocab_subset.npy`` beside the weights (FR-Spec;
never-proposed tokens still come out of the residual, so decoding stays exact).

* ``mtp``: :class:`specjax.models.heads.MTPHead` unrolled ``--depth`` steps
  (:func:`specjax.train.heads.mtp_loss`).
* ``medusa``: ``--num_heads`` residual heads on the target's LM head
  (:func:`specjax.train.medusa.medusa_kl_loss`), saved in float16.
* ``dflash``: :class:`specjax.models.block_drafter.BlockDrafter` with blocks of ``--block_size``
  (gamma = block_size - 1), ``--anchors`` random blocks per row (:func:`specjax.train.heads.dflash_loss`).

Seeded; resumes from ``--workdir``'s orbax checkpoints (default ``runs/<target>_<family>``); writes
the weights (default ``specjax/assets/<target>/<family>``) and ``training.json`` (held-out metrics
before/after, the curve, greedy acceptance on held-out prompts) beside them.
"""
from __future__ import annotations

import json
import pathlib
import time

import jax.numpy as jnp
import numpy as np
from tqdm.auto import tqdm

import specjax
from specjax import tree as tree_lib
from specjax.data import generated
from specjax.drafters import medusa as medusa_lib
from specjax.drafters import vocab
from specjax.models import block_drafter, heads, store
from specjax.train import heads as train_heads
from specjax.train import loop
from specjax.train import medusa as medusa_train
from specjax.train.commands import common

FLAGS = ("data_dir", "k", "crop")  # the flags only --data=real reads


def define_flags(fv) -> None:
  """``--data_dir``, ``--k`` and ``--crop``: the data of a real target."""
  common.define(fv, "string", "data_dir", "", "--data=real: the data task's folder (default: its default for --target)")
  common.define(fv, "integer", "k", 4096, "--data=real: draft vocabulary, the K most frequent generated tokens (0: all)")
  common.define(fv, "integer", "crop", 128, "--data=real: tokens per training row")


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
           for i in tqdm(range(0, len(rows_NxT), 64), desc=f"target features -> {path.name}", mininterval=10)]
  pool = {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}
  tmp = path.with_name(path.stem + ".tmp.npz")
  np.savez(tmp, **{k: v if k == "tokens" else v.view(np.uint16) for k, v in pool.items()})
  tmp.rename(path)
  print(f"features of {rows_NxT.shape} in {time.time() - t0:.0f}s", flush=True)
  return pool


def make_family(opt, family, target, subset):
  """``(params, loss_fn, drafter_fn(params) -> drafter, save_fn(params, folder))`` for ``family``."""
  tc = target.config
  if family == "dflash":
    module = block_drafter.BlockDrafter(block_drafter.BlockDrafterConfig(
        vocab_size=tc.vocab_size, d_model=tc.d_model, num_layers=opt.num_layers, num_heads=tc.num_heads,
        num_kv_heads=tc.num_kv_heads, head_dim=tc.head_dim, mlp_dim=opt.mlp_dim,
        target_layers=dflash_layers(opt, target), block_size=opt.block_size, rope_theta=tc.rope_theta,
        norm_eps=tc.norm_eps))
    init = heads.init_head(module, opt.seed)
    drafter_fn = lambda p: specjax.drafters.DFlash(init.replace(params=p), subset)
    save_fn = lambda p, folder: heads.save_head(init.replace(params=p), folder, dtype="bfloat16")
    return init.params, train_heads.dflash_loss(module, target, opt.decay, subset_K=subset), drafter_fn, save_fn
  if family == "mtp":
    module = heads.MTPHead(heads.MTPConfig(vocab_size=tc.vocab_size, d_model=tc.d_model, mlp_dim=opt.mlp_dim,
                                           num_blocks=opt.num_blocks, norm_eps=tc.norm_eps))
    init = heads.init_head(module, opt.seed)
    drafter_fn = lambda p: specjax.drafters.MTP(init.replace(params=p), subset)
    save_fn = lambda p, folder: heads.save_head(init.replace(params=p), folder, dtype="bfloat16")
    return init.params, train_heads.mtp_loss(module, target, opt.depth, subset_K=subset), drafter_fn, save_fn
  init = medusa_lib.init_heads(None, opt.num_heads, tc.d_model)
  drafter_fn = lambda p: medusa_lib.Medusa.create(target, p, medusa_paths(opt), subset_K=subset)
  save_fn = lambda p, folder: medusa_lib.save_heads(p, folder, dtype="float16", k=opt.k)
  lm_head = drafter_fn(init).lm_head_ExV  # the target's LM head, its subset's columns when truncated
  return init, medusa_train.medusa_kl_loss(lm_head, opt.num_heads), drafter_fn, save_fn


def dflash_layers(opt, target) -> tuple:
  return block_drafter.spaced_layers(target.config.num_layers, opt.num_feature_layers)


def medusa_paths(opt):
  """The trees measured after training: a chain over every head and a small 2-wide tree."""
  return tree_lib.parse_chain_paths(f"chain{opt.num_heads}+1x{opt.num_heads - 1}")


def acceptance(opt, family, target, drafter, prompts):
  """Greedy acceptance on held-out prompts: MTP at each ``--eval_gammas``, DFlash at ``--eval_gammas``
  or block_size - 1, Medusa at its trees' depth."""
  if family == "medusa":
    gammas = [max(map(len, medusa_paths(opt)))]
  else:
    gammas = [int(g) for g in opt.eval_gammas]
    if family == "dflash" and not gammas:
      gammas = [opt.block_size - 1]
  return train_heads.acceptance_by_gamma(target, drafter, prompts, gammas, max_new_tokens=64)


def run(opt, family: str) -> int:
  """Trains ``family`` (``mtp``, ``medusa`` or ``dflash``) on ``opt.target``'s generations."""
  t0 = time.time()
  target, _ = specjax.load_pretrained(opt.target)
  name = pathlib.Path(opt.target).name.split("-")[0]
  workdir = opt.workdir or f"runs/{name}_{family}"
  out = pathlib.Path(opt.out or f"specjax/assets/{name}/{family}")
  folder = pathlib.Path(opt.data_dir or generated.default_out(opt.target)).expanduser()
  train_rows, _ = generated.crops(folder, "shards", opt.crop)
  held_rows, held_data = generated.crops(folder, "held_out", opt.crop)
  counts = generated.token_counts(folder, target.vocab_size)
  subset = jnp.asarray(vocab.top_k_subset(counts, opt.k)) if opt.k else None
  layers = dflash_layers(opt, target) if family == "dflash" else ()
  suffix = f"crop{opt.crop}" + "".join(f"_{i}" for i in layers)
  pool = cached_pool(target, train_rows, folder / f"features_{suffix}.npz", layers)
  held = cached_pool(target, held_rows, folder / f"features_held_out_{suffix}.npz", layers)
  anchors = (opt.block_size, opt.anchors) if family == "dflash" else None
  params, loss_fn, drafter_fn, save_fn = make_family(opt, family, target, subset)
  metrics = common.held_out_metrics(loss_fn, held, anchors)
  before = metrics(params)
  print(f"{family}: {len(train_rows)} train rows x {opt.crop}; held-out before {before}", flush=True)
  params = common.train_on_pool(params, loss_fn, pool, opt, workdir, f"{family} on {opt.target}", anchors,
                                weight_decay=0.0)
  drafter = drafter_fn(params)
  report = {"family": family, "target": opt.target, "params": drafter.num_params, "k": opt.k,
            "subset_coverage": None if subset is None else round(vocab.coverage(counts, np.asarray(subset)), 4),
            "steps": opt.steps, "batch": opt.batch, "crop": opt.crop, "train_rows": len(train_rows),
            "seed": opt.seed, "held_out_before": before, "held_out_after": metrics(params)}
  save_fn(params, out)
  if subset is not None:
    np.save(out / store.SUBSET_FILE, np.asarray(subset, np.int32))
  report["acceptance_greedy"] = acceptance(opt, family, target, drafter, generated.eval_prompts(held_data))
  report["wall_s"] = round(time.time() - t0, 1)
  curve = loop.read_metrics(workdir)
  report["curve"] = [{k: round(r[k], 4) for k in ("step", "loss", "accept_len")}
                     for r in curve[::max(len(curve) // 30, 1)]]
  (out / "training.json").write_text(json.dumps(report, indent=2) + "\n")
  print(json.dumps({k: v for k, v in report.items() if k != "curve"}, indent=2))
  return 0
