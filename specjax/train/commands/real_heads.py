"""A trained head on a FROZEN real target, from its own generations (``--data=real``): the shared pipeline.

A kind's training command (``KindSpec.train``, e.g. :mod:`specjax.train.commands.mtp`) comes here
with ``--data=real`` and a :class:`RealHeadRecipe`, which says what is its own (the module, loss,
drafter and saved format, the draft lengths measured, the target layers it reads)::

  nice -n 10 python -m specjax.train data                                  # the data (once)
  nice -n 10 python -m specjax.train mtp --data=real       # -> specjax/assets/smollm2/mtp
  nice -n 10 python -m specjax.train data --target=gemma3-270m --minutes=40
  nice -n 10 python -m specjax.train medusa --data=real --target=gemma3-270m --steps=300  # -> assets/gemma3
  python -m specjax.run --config=configs/smollm2_135m.py:mtp

Data: crops of ``--crop`` tokens of the ``data`` task's generations (code / translation / text; the
last quarter-crop of each prompt and the continuation after it). The target's final hidden states
(and the outputs of the recipe's ``feature_layers``, if any) over them are computed once and cached
beside the data (``features_crop<N>[_layers...].npz``), so the next run reuses them. Every recipe
learns the target's soft next-token distributions (KL) over a truncated vocabulary: the ``--k`` most
frequent tokens of the target's generations, saved as ``vocab_subset.npy`` beside the weights (FR-Spec;
never-proposed tokens still come out of the residual, so decoding stays exact).

Seeded; resumes from ``--workdir``'s orbax checkpoints (default ``runs/<target>_<family>``); writes
the weights (default ``specjax/assets/<target>/<family>``) and ``training.json`` (held-out metrics
before/after, the curve, greedy acceptance on held-out prompts) beside them.
"""
from __future__ import annotations

import dataclasses
import json
import pathlib
import time
from typing import Callable

from absl import flags
import jax.numpy as jnp
import numpy as np
from tqdm.auto import tqdm

import specjax
from specjax.data import generated
from specjax.drafters import vocab
from specjax.models import store
from specjax.train import heads as train_heads
from specjax.train import loop
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


@dataclasses.dataclass(frozen=True)
class RealHeadRecipe:
  """What one kind's training adds to the shared pipeline of :func:`run` (its command passes one in).

  - ``family``: the name its runs, weights and ``training.json`` go under.
  - ``make(opt, target, subset) -> (params, loss_fn, drafter_fn(params) -> drafter, save_fn(params, folder))``:
    the initial parameters, the loss over the feature pool, the drafter of trained parameters, and how
    its weights are saved.
  - ``eval_gammas(opt) -> [gamma, ...]``: the draft lengths of the greedy acceptance on held-out prompts.
  - ``feature_layers(opt, target) -> (layer, ...)``: target layers whose outputs the loss reads besides
    the final hidden states (they name the feature cache).
  - ``anchors(opt) -> (block_size, anchors per row) | None``: the random blocks a block drafter's rows draw.
  """
  family: str
  make: Callable
  eval_gammas: Callable
  feature_layers: Callable = lambda opt, target: ()
  anchors: Callable = lambda opt: None


def run(opt, recipe: RealHeadRecipe) -> int:
  """Trains ``recipe``'s drafter on ``opt.target``'s generations."""
  t0 = time.time()
  family = recipe.family
  target, _ = specjax.load_pretrained(opt.target)
  name = pathlib.Path(opt.target).name.split("-")[0]
  workdir = opt.workdir or f"runs/{name}_{family}"
  out = pathlib.Path(opt.out or f"specjax/assets/{name}/{family}")
  folder = pathlib.Path(opt.data_dir or generated.default_out(opt.target)).expanduser()
  train_rows, _ = generated.crops(folder, "shards", opt.crop)
  held_rows, held_data = generated.crops(folder, "held_out", opt.crop)
  counts = generated.token_counts(folder, target.vocab_size)
  subset = jnp.asarray(vocab.top_k_subset(counts, opt.k)) if opt.k else None
  layers = tuple(recipe.feature_layers(opt, target))
  suffix = f"crop{opt.crop}" + "".join(f"_{i}" for i in layers)
  pool = cached_pool(target, train_rows, folder / f"features_{suffix}.npz", layers)
  held = cached_pool(target, held_rows, folder / f"features_held_out_{suffix}.npz", layers)
  anchors = recipe.anchors(opt)
  params, loss_fn, drafter_fn, save_fn = recipe.make(opt, target, subset)
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
  report["acceptance_greedy"] = train_heads.acceptance_by_gamma(target, drafter, generated.eval_prompts(held_data),
                                                                  list(recipe.eval_gammas(opt)), max_new_tokens=64)
  report["wall_s"] = round(time.time() - t0, 1)
  curve = loop.read_metrics(workdir)
  report["curve"] = [{k: round(r[k], 4) for k in ("step", "loss", "accept_len")}
                     for r in curve[::max(len(curve) // 30, 1)]]
  (out / "training.json").write_text(json.dumps(report, indent=2) + "\n")
  print(json.dumps({k: v for k, v in report.items() if k != "curve"}, indent=2))
  return 0


def head_flags(family: str, out_help: str, **more) -> tuple[dict, dict]:
  """``(defaults, helps)`` of a head trained on the demo target or a real one, for :func:`head_task`:
  ``--target``, ``--out`` (demo: ``specjax/assets/demo/<family>``; real: from ``--target``), ``--workdir``,
  and ``more``: ``name=(kind, demo default, real default, help)``."""
  defaults = {"target": ("string", "specjax/assets/demo/target", "smollm2-135m-instruct"),
              "out": ("string", f"specjax/assets/demo/{family}", None),
              "workdir": ("string", f"runs/{family}", None),
              **{name: spec[:3] for name, spec in more.items()}}
  helps = {"target": "the frozen target: a model folder, or with --data=real anything load_pretrained takes",
           "out": out_help, "workdir": "checkpoints and metrics", **{name: spec[3] for name, spec in more.items()}}
  return defaults, helps


def head_task(argv, doc: str, recipe: RealHeadRecipe, flag_table: tuple[dict, dict], demo_flags, train_demo,
              define_own: Callable, data_values=("generated", "real"), data_help: str = "") -> int:
  """A head's training command: ``--data`` (``data_values``), the flags whose defaults follow it
  (``flag_table``, from :func:`head_flags`), the command's own (``define_own(define)``, ``define(kind, name,
  default, help)``) and the real target's; ``--data=real`` runs :func:`run` with ``recipe``, anything
  else ``train_demo(opt)``, and a flag of the other mode is refused."""
  fv = flags.FlagValues()
  define = lambda kind, name, default, text, **kw: common.define(fv, kind, name, default, text, **kw)  # noqa: E731
  define("enum", "data", data_values[0], data_help or "generated: the target's continuations of stdlib prompts "
         "(a model folder, the demo); real: the data task's generations of a real target",
         enum_values=list(data_values))
  defaults, helps = flag_table
  common.define_by_data(fv, defaults, helps)
  define_own(define)
  define_flags(fv)
  return common.run_task(fv, argv, doc, recipe.family, lambda: common.run_by_data(
      fv, defaults, demo_flags, FLAGS, train_demo, lambda opt: run(opt, recipe)))
