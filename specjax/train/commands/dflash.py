"""A DFlash block drafter on a frozen target: the demo one, or a real one (--data=real).

  python -m specjax.train dflash --workdir=runs/dflash        # demo target -> specjax/assets/demo/dflash, ~12 min
  python -m specjax.train dflash --eval_only --eval_gammas=3,7,11                        # block-size mismatch
  nice -n 10 python -m specjax.train dflash:runs/smollm2_dflash/head --data=real --steps=1600   # SmolLM2

The demo (``--data=generated``): target-generated continuations of stdlib prompts (DFlash trains on
the target's own responses); the chosen target layers' outputs are computed once for the whole pool.
Each step draws ``--anchors`` random anchors per sequence; every anchor opens a block
``[x_a, MASK * (B-1)]`` that sees the target features of the tokens before it, and the loss (KL to
the target) weighs block position i by exp(-(i-1)/--decay). Afterwards it measures the real
acceptance at gamma = B-1 and at mismatched block sizes with speculative_generate on held-out
prompts. ``--data=real``: the same loss over a truncated vocabulary on the ``data`` task's
generations, ``vocab_subset.npy`` beside the drafter (:mod:`specjax.train.commands.real_heads`).
"""
from __future__ import annotations

import json
import pathlib
import time

import numpy as np

import specjax
from specjax.data import code_corpus
from specjax.models import block_drafter, heads
from specjax.train import heads as train_heads
from specjax.train.commands import common, real_heads

FLAG_TABLE = real_heads.head_flags(  # flag: (kind, demo default, --data=real default, help)
    "dflash", "where the trained drafter goes",
    steps=("integer", 1000, 400, "optimizer steps"),
    batch=("integer", 16, 8, "sequences per step"),
    block_size=("integer", 8, 4, "B: anchor + B-1 masks; decode with gamma = B-1"),
    mlp_dim=("integer", 1024, 1152, "draft MLP width"))
DEMO_FLAGS = ("pool", "seq_len", "gen_temperatures", "eval_only")


def evaluate(opt, target, head):
  b = head.config.block_size
  gammas = [int(g) for g in opt.eval_gammas] or [b - 1, b // 2 - 1, 2 * b - 1]
  prompts = np.stack(code_corpus.held_out_prompts(8, 96, seed=0)).astype(np.int32)
  return train_heads.acceptance_by_gamma(target, specjax.drafters.DFlash(head), prompts, gammas)


def train_demo(opt) -> int:
  """The drafter on a frozen target folder, from its generations of stdlib prompts."""
  t0 = time.time()
  target = specjax.checkpoint.load_model(opt.target)
  out = pathlib.Path(opt.out)
  if opt.eval_only:
    print(json.dumps(evaluate(opt, target, heads.load_head(out)), indent=2))
    return 0
  tc = target.config
  layers = feature_layers(opt, target)
  module = block_drafter.BlockDrafter(block_drafter.BlockDrafterConfig(
      vocab_size=tc.vocab_size, d_model=tc.d_model, num_layers=opt.num_layers, num_heads=tc.num_heads,
      num_kv_heads=tc.num_kv_heads, head_dim=tc.head_dim, mlp_dim=opt.mlp_dim, target_layers=layers,
      block_size=opt.block_size, rope_theta=tc.rope_theta))
  init = heads.init_head(module, opt.seed)
  text, held_text = common.demo_text(opt, target)
  pool, held = train_heads.feature_pool(target, text, layers), train_heads.feature_pool(target, held_text, layers)
  print(f"data pool ready: {text.shape}, target layers {layers}, in {time.time() - t0:.0f}s")
  loss_fn = train_heads.dflash_loss(module, target, opt.decay)
  anchors = (opt.block_size, opt.anchors)
  head, before, after = common.train_head(init, loss_fn, pool, held, opt, "dflash", anchors)
  report = {"params": head.num_params, "steps": opt.steps, "block_size": opt.block_size,
            "target_layers": list(layers), "pool": list(text.shape), "held_out_before": before,
            "held_out_after": after, "train_wall_s": round(time.time() - t0, 1)}
  return common.save_trained_head(head, out, opt.workdir, "DFlash block drafter on the frozen demo target", report,
                                  lambda: evaluate(opt, target, head))


def feature_layers(opt, target) -> tuple:
  """The target layers fused into the context feature (``--num_feature_layers``, spread evenly)."""
  return block_drafter.spaced_layers(target.config.num_layers, opt.num_feature_layers)


def make_real(opt, target, subset):
  """``--data=real``: blocks of ``--block_size`` (gamma = block_size - 1) over :func:`feature_layers`
  (:func:`train_heads.dflash_loss`), saved in bfloat16."""
  tc = target.config
  module = block_drafter.BlockDrafter(block_drafter.BlockDrafterConfig(
      vocab_size=tc.vocab_size, d_model=tc.d_model, num_layers=opt.num_layers, num_heads=tc.num_heads,
      num_kv_heads=tc.num_kv_heads, head_dim=tc.head_dim, mlp_dim=opt.mlp_dim,
      target_layers=feature_layers(opt, target), block_size=opt.block_size, rope_theta=tc.rope_theta,
      norm_eps=tc.norm_eps))
  init = heads.init_head(module, opt.seed)
  drafter_fn = lambda p: specjax.drafters.DFlash(init.replace(params=p), subset)  # noqa: E731
  save_fn = lambda p, folder: heads.save_head(init.replace(params=p), folder, dtype="bfloat16")  # noqa: E731
  return init.params, train_heads.dflash_loss(module, target, opt.decay, subset_K=subset), drafter_fn, save_fn


REAL = real_heads.RealHeadRecipe(
    "dflash", make_real, eval_gammas=lambda opt: [int(g) for g in opt.eval_gammas] or [opt.block_size - 1],
    feature_layers=feature_layers, anchors=lambda opt: (opt.block_size, opt.anchors))


def define_own(d) -> None:
  d("integer", "anchors", 8, "random anchors (blocks) per sequence per step")
  d("integer", "num_layers", 1, "draft layers")
  d("integer", "num_feature_layers", 3, "target layers fused into the context feature")
  d("float", "decay", 4.0, "loss weight of block position i: exp(-(i-1)/decay)")
  d("float", "learning_rate", 3e-3, "peak learning rate")
  d("list", "eval_gammas", [], "draft lengths to measure (default: B-1, and B/2-1, 2B-1 for the mismatch; "
    "--data=real: B-1)")
  d("integer", "seed", 0, "init and data seed")
  d("integer", "pool", 256, "--data=generated: training sequences (target features computed once)")
  d("integer", "seq_len", 320, "--data=generated: tokens per training sequence (64 prompt + generated); cover "
    "the context lengths you decode at: DFlash drafts worse past the positions it saw")
  d("list", "gen_temperatures", ["0.0", "0.7"], "--data=generated: temperatures the generated pool is split over")
  d("bool", "eval_only", False, "--data=generated: skip training; evaluate the drafter at --out")


def main(argv) -> int:
  return real_heads.head_task(argv, __doc__, REAL, FLAG_TABLE, DEMO_FLAGS, train_demo, define_own)
