"""A shared-weight MTP head on a frozen target: the demo one, or a real one (--data=real).

  python -m specjax.train mtp --workdir=runs/mtp       # demo target -> specjax/assets/demo/mtp, ~6 min, 2 CPU cores
  python -m specjax.train mtp --eval_only              # acceptance at gamma 1..7
  nice -n 10 python -m specjax.train mtp --data=real   # SmolLM2 -> specjax/assets/smollm2/mtp

The demo (``--data=generated``, or stdlib crops with ``--data=corpus``): the target's hidden states
over a pool of text (target-generated continuations of stdlib prompts) are computed once; the head is
unrolled ``--depth`` steps from every position and trained (healed) with KL to the target's own
next-token distributions (specjax.train.heads.mtp_loss). Resumes from its orbax checkpoints.
Afterwards it measures the real acceptance length at draft lengths ``--eval_gammas`` with
speculative_generate on held-out prompts. ``--data=real``: the same loss over a truncated
vocabulary on the ``data`` task's generations, ``vocab_subset.npy`` beside the head
(:mod:`specjax.train.commands.real_heads`).
"""
from __future__ import annotations

import json
import pathlib
import time

import numpy as np

import specjax
from specjax.data import code_corpus
from specjax.models import heads
from specjax.train import heads as train_heads
from specjax.train.commands import common, real_heads

FLAG_TABLE = real_heads.head_flags(  # flag: (kind, demo default, --data=real default, help)
    "mtp", "where the trained head goes",
    steps=("integer", 200, 400, "optimizer steps"),
    depth=("integer", 7, 4, "recursive steps unrolled in training"),
    mlp_dim=("integer", 1024, 1152, "head MLP width"),
    eval_gammas=("list", [str(g) for g in range(1, 8)], ["2", "3", "4"], "draft lengths measured on held-out prompts"))
DEMO_FLAGS = ("pool", "seq_len", "gen_temperatures", "eval_only")


def evaluate(opt, target, head):
  prompts = np.stack(code_corpus.held_out_prompts(8, 96, seed=0)).astype(np.int32)
  return train_heads.acceptance_by_gamma(target, specjax.drafters.MTP(head), prompts,
                                         [int(g) for g in opt.eval_gammas])


def train_demo(opt) -> int:
  """The head on a frozen target folder, from its generations (or stdlib crops) of the stdlib."""
  t0 = time.time()
  target = specjax.checkpoint.load_model(opt.target)
  out = pathlib.Path(opt.out)
  if opt.eval_only:
    print(json.dumps(evaluate(opt, target, heads.load_head(out)), indent=2))
    return 0
  tc = target.config
  module = heads.MTPHead(heads.MTPConfig(vocab_size=tc.vocab_size, d_model=tc.d_model, mlp_dim=opt.mlp_dim,
                                         num_blocks=opt.num_blocks))
  init = heads.init_head(module, opt.seed)
  text, held_text = common.demo_text(opt, target, source=opt.data)
  pool, held = train_heads.feature_pool(target, text), train_heads.feature_pool(target, held_text)
  print(f"data pool ready: {text.shape} in {time.time() - t0:.0f}s")
  loss_fn = train_heads.mtp_loss(module, target, opt.depth)
  head, before, after = common.train_head(init, loss_fn, pool, held, opt, "mtp")
  report = {"params": head.num_params, "steps": opt.steps, "depth": opt.depth, "data": opt.data,
            "pool": list(text.shape), "held_out_before": before, "held_out_after": after,
            "train_wall_s": round(time.time() - t0, 1)}
  return common.save_trained_head(head, out, opt.workdir, "MTP head on the frozen demo target", report,
                                  lambda: evaluate(opt, target, head))


def make_real(opt, target, subset):
  """``--data=real``: the head unrolled ``--depth`` steps (:func:`train_heads.mtp_loss`), saved in bfloat16."""
  tc = target.config
  module = heads.MTPHead(heads.MTPConfig(vocab_size=tc.vocab_size, d_model=tc.d_model, mlp_dim=opt.mlp_dim,
                                         num_blocks=opt.num_blocks, norm_eps=tc.norm_eps))
  init = heads.init_head(module, opt.seed)
  drafter_fn = lambda p: specjax.drafters.MTP(init.replace(params=p), subset)  # noqa: E731
  save_fn = lambda p, folder: heads.save_head(init.replace(params=p), folder, dtype="bfloat16")  # noqa: E731
  return init.params, train_heads.mtp_loss(module, target, opt.depth, subset_K=subset), drafter_fn, save_fn


REAL = real_heads.RealHeadRecipe("mtp", make_real, eval_gammas=lambda opt: [int(g) for g in opt.eval_gammas])


def define_own(d) -> None:
  d("integer", "batch", 8, "sequences per step")
  d("integer", "num_blocks", 1, "residual MLP blocks in the head")
  d("float", "learning_rate", 3e-3, "peak learning rate")
  d("integer", "seed", 0, "init and data seed")
  d("integer", "pool", 256, "--data=generated/corpus: training sequences (target features computed once)")
  d("integer", "seq_len", 128, "--data=generated/corpus: tokens per training sequence")
  d("list", "gen_temperatures", ["0.0", "0.7"], "--data=generated: temperatures the generated pool is split over")
  d("bool", "eval_only", False, "--data=generated/corpus: skip training; evaluate the head at --out")


def main(argv) -> int:
  return real_heads.head_task(argv, __doc__, REAL, FLAG_TABLE, DEMO_FLAGS, train_demo, define_own,
                              data_values=("generated", "corpus", "real"),
                              data_help="generated: the target's continuations of stdlib prompts (a model folder, "
                                        "the demo); corpus: stdlib crops; real: the data task's generations of a "
                                        "real target")
