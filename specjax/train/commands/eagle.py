"""An EAGLE-3 head (training-time test) on a frozen target: the demo one, or a real one (--data=real).

  python -m specjax.train eagle --workdir=runs/eagle      # demo target -> specjax/assets/demo/eagle, ~20 min
  python -m specjax.train eagle --eval_only               # acceptance at gamma 1..7 (chain, greedy)
  nice -n 10 python -m specjax.train data                 # SmolLM2: its own generations (once)
  nice -n 10 python -m specjax.train eagle --target=smollm2-135m-instruct --data=real --k=4096 \
      --workdir=runs/eagle_smollm2 --out=specjax/assets/smollm2/eagle --depth=4 --batch=4

Data: continuations the target itself generates (self-distillation): from stdlib prompts for the
demo (``--data=generated``), or the ``data`` task's code / translation / text generations for a
real target (``--data=real``, crops of ``--crop`` tokens around each prompt's end),
with the target's features of the head's three layers computed once. ``--k``: a truncated draft
vocabulary (the K most frequent tokens of the target's generations, saved as ``vocab_subset.npy``). The head is unrolled ``--depth``
steps (specjax.train.eagle.eagle_loss: KL to the target's distribution, step weights 0.8^(j-1)).
Seeded; resumes from its orbax checkpoints; writes training.json (curve summary, acceptance) and
the loss plot beside the weights.
"""
from __future__ import annotations

import json
import pathlib
import time

from absl import flags
import jax.numpy as jnp
import numpy as np

import specjax
from specjax.data import code_corpus
from specjax.data import generated
from specjax.drafters import vocab
from specjax.drafters.eagle import Eagle
from specjax.models import eagle_head, heads, store
from specjax.train import eagle as train_eagle
from specjax.train import heads as train_heads
from specjax.train import loop
from specjax.train.commands import common


def evaluate(opt, target, head, subset=None, prompts=None):
  if prompts is None:
    prompts = np.stack(code_corpus.held_out_prompts(8, 96, seed=0)).astype(np.int32)
  return train_heads.acceptance_by_gamma(target, Eagle(head, None if subset is None else jnp.asarray(subset, jnp.int32)), prompts, [int(g) for g in opt.eval_gammas],
                                         max_new_tokens=64 if opt.data == "real" else 128)


def real_text(opt, target):
  """Crops of the target's own generations (train and held out) and held-out prompts for evaluation."""
  folder = pathlib.Path(opt.data_dir) if opt.data_dir else generated.default_out(opt.target)
  train, _ = generated.crops(folder, "shards", opt.crop)
  held, hd = generated.crops(folder, "held_out", opt.crop)
  return train, held[:32], generated.eval_prompts(hd), generated.token_counts(folder, target.vocab_size)


def run(opt) -> int:
  t0 = time.time()
  target = (specjax.checkpoint.load_model(opt.target) if pathlib.Path(opt.target).is_dir()
            else specjax.load_pretrained(opt.target)[0])
  out = pathlib.Path(opt.out)
  eval_prompts, subset = None, None
  if opt.data == "real":
    text, held_text, eval_prompts, counts = real_text(opt, target)
    if opt.k:
      subset = vocab.top_k_subset(counts, opt.k)
  if opt.eval_only:
    subset = store.read_subset(out)
    print(json.dumps(evaluate(opt, target, heads.load_head(out), subset, eval_prompts), indent=2))
    return 0
  tc = target.config
  module = eagle_head.EagleHead(eagle_head.EagleConfig(
      vocab_size=tc.vocab_size, d_model=tc.d_model, num_heads=tc.num_heads, num_kv_heads=tc.num_kv_heads,
      head_dim=tc.head_dim, mlp_dim=opt.mlp_dim, target_layers=eagle_head.eagle3_layers(tc.num_layers),
      rope_theta=tc.rope_theta, draft_vocab_size=opt.k))
  init = heads.init_head(module, opt.seed)
  layers = module.cfg.target_layers
  if opt.data == "generated":
    text, held_text = common.demo_text(opt, target)
  pool = train_heads.feature_pool(target, text, layers)
  held = train_heads.feature_pool(target, held_text, layers)
  print(f"data pool ready: {text.shape}, features of layers {layers}, in {time.time() - t0:.0f}s")
  loss_fn = train_eagle.eagle_loss(module, target, opt.depth, subset_K=subset)
  head, before, after = common.train_head(init, loss_fn, pool, held, opt, "eagle")
  report = {"params": head.num_params, "steps": opt.steps, "depth": opt.depth, "target_layers": list(layers),
            "pool": list(text.shape), "held_out_before": before, "held_out_after": after,
            "train_wall_s": round(time.time() - t0, 1)}
  if subset is not None:
    report["subset_coverage"] = round(vocab.coverage(counts, subset), 4)
  curve = loop.read_metrics(opt.workdir)
  report["curve"] = [{k: round(r[k], 4) for k in ("step", "loss", "accept_len")} for r in curve[::max(len(curve) // 30, 1)]]
  return common.save_trained_head(head, out, opt.workdir, "EAGLE-3 head on the frozen target", report,
                                  lambda: evaluate(opt, target, head, subset, eval_prompts), subset=subset)


def main(argv) -> int:
  fv = flags.FlagValues()
  d = lambda kind, name, default, text, **kw: common.define(fv, kind, name, default, text, **kw)
  d("string", "target", "specjax/assets/demo/target", "the frozen target: a model folder, or anything load_pretrained takes")
  d("string", "workdir", "runs/eagle", "checkpoints and metrics")
  d("string", "out", "specjax/assets/demo/eagle", "where the trained head goes")
  d("integer", "steps", 300, "optimizer steps")
  d("integer", "batch", 8, "sequences per step")
  d("integer", "depth", 5, "draft steps unrolled in training (training-time test)")
  d("integer", "mlp_dim", 768, "head MLP width")
  d("float", "learning_rate", 2e-3, "peak learning rate")
  d("integer", "pool", 256, "training sequences (target features computed once)")
  d("integer", "seq_len", 128, "tokens per training sequence")
  d("list", "gen_temperatures", ["0.0", "0.7"], "temperatures the generated pool is split over")
  d("list", "eval_gammas", [str(g) for g in range(1, 8)], "draft lengths to measure")
  d("bool", "eval_only", False, "skip training; evaluate the head at --out")
  d("integer", "seed", 0, "init and data seed")
  d("enum", "data", "generated", "demo-style generations, or the data task's", enum_values=["generated", "real"])
  d("string", "data_dir", "", "the data task's folder (default: its default for --target)")
  d("integer", "k", 0, "draft vocabulary size (0: the target's whole vocabulary)")
  d("integer", "crop", 128, "--data=real: tokens per training row")
  return common.run_task(fv, argv, __doc__, "eagle", lambda: run(fv))
