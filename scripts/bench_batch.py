"""Throughput of a prompt queue, with and without continuous refill, and speedup vs batch size.

  python scripts/bench_batch.py                                    # demo pair, 64 prompts
  python scripts/bench_batch.py --batch_sizes=1,2 --num_prompts=4 --max_new_tokens=16 --out_dir=/tmp/bb  # smoke

The queue: ``--num_prompts`` held-out stdlib snippets; rows stop at the first ``--stop`` byte (the
byte-level demo has no EOS; ':' ends a def/if/for header, so lengths vary as in serving) or at
``--max_new_tokens``. One process, every decoder compiled once before it is timed.

1. **Refill at batch 8**: the queue decoded as static batches of 8, one after another (each waits
   for its slowest row) vs one refilled batch of 8 rows: tokens/s and batch utilization
   (generated tokens / (iterations x rows)), autoregressive and speculative.
2. **Speedup vs batch size** (1 .. 32, refill on): each drafter's measured speedup over the
   refilled autoregressive baseline, and the cost model's prediction
   ``walltime_improvement(alpha, gamma, c, v)`` with alpha from the run and c, v measured at that
   batch (specjax.measure.costs).

Writes ``bench_batch.md``/``.json`` and ``speedup_vs_batch.png`` under ``--out_dir``.
"""
from __future__ import annotations

import datetime
import json
import pathlib
import time

from absl import app, flags
import jax
import numpy as np
from tqdm.auto import tqdm

import specjax
from specjax import measure, theory
from specjax import experiment
from specjax.config_util import sibling_config
from specjax.data import code_corpus

_BATCHES = flags.DEFINE_string("batch_sizes", "1,2,4,8,16,32", "batch sizes of the sweep (refill on)")
_DRAFTERS = flags.DEFINE_string("drafters", "draft_model,ngram,mtp", "demo drafters (configs/<kind>_demo.py)")
_NUM = flags.DEFINE_integer("num_prompts", 64, "prompts in the queue")
_NEW = flags.DEFINE_integer("max_new_tokens", 128, "tokens per prompt at most")
_GAMMA = flags.DEFINE_integer("gamma", 4, "draft length for every drafter")
_STOP = flags.DEFINE_string("stop", ":", "one byte that ends a row (stand-in EOS)")
_REFILL_BATCH = flags.DEFINE_integer("refill_batch", 8, "batch size of the with/without refill comparison")
_OUT_DIR = flags.DEFINE_string("out_dir", "benchmarks/batch", "where the tables go")

_CONFIGS = {"draft_model": "demo", "ngram": "demo", "mtp": "mtp_demo", "dflash": "dflash_demo"}


def _drafter(kind, target, drafter_model):
  config = sibling_config(str(pathlib.Path(experiment.__file__).parents[1] / "configs" / "demo.py"), _CONFIGS[kind], None)
  if kind == "ngram":
    config.drafter = experiment.drafter_section("ngram", gamma=config.drafter.gamma)
  if kind == "draft_model":
    return specjax.drafters.DraftModel(drafter_model)
  return experiment.make_drafter(experiment.normalize(config), target)


def _timed(fn):
  out = fn()  # compile + warm-up
  t0 = time.perf_counter()
  out = fn()
  return out, time.perf_counter() - t0


def main(argv):
  del argv
  target, _ = specjax.load_pretrained("demo/target")
  drafter_model, _ = specjax.load_pretrained("demo/drafter")
  prompts = np.stack(code_corpus.held_out_prompts(_NUM.value, 64, seed=0)).astype(np.int32)  # bytes = ids
  lengths = np.full((len(prompts),), prompts.shape[1], np.int32)
  common = dict(max_new_tokens=_NEW.value, eos_id=ord(_STOP.value))
  gamma, kinds = _GAMMA.value, _DRAFTERS.value.split(",")
  drafters = {k: _drafter(k, target, drafter_model) for k in kinds}
  ar = lambda b: specjax.generate(target, prompts, lengths, batch_size=b, **common)
  spec = lambda k, b: specjax.speculative_generate(target, drafters[k], prompts, lengths, gamma=gamma, batch_size=b,
                                                   **common)

  # 1. static batches vs refill at one batch size
  b8 = _REFILL_BATCH.value
  refill_rows = []
  for name, fn in [("autoregressive", None)] + [(k, k) for k in kinds]:
    run = (lambda b, s=None: ar(b)) if fn is None else (lambda b, k=fn: spec(k, b))
    def static():
      outs = []
      for i in range(0, len(prompts), b8):  # one static batch after another
        sub = slice(i, i + b8)
        outs.append(specjax.generate(target, prompts[sub], lengths[sub], **common) if fn is None else
                    specjax.speculative_generate(target, drafters[fn], prompts[sub], lengths[sub], gamma=gamma,
                                                 **common))
      return outs
    outs, t_static = _timed(static)  # pylint: disable=cell-var-from-loop
    out_r, t_refill = _timed(lambda run=run: run(b8))
    tokens = int(sum(o.lengths.sum() for o in outs))
    util_static = float(np.mean([o.stats["batch_utilization"] for o in outs]))
    same = all(np.array_equal(o.tokens, out_r.tokens[i * b8:(i + 1) * b8]) for i, o in enumerate(outs))
    refill_rows.append({"decoder": name, "tokens": tokens, "static_tok_s": tokens / t_static,
                        "refill_tok_s": int(out_r.lengths.sum()) / t_refill, "gain": t_static / t_refill,
                        "static_utilization": util_static, "refill_utilization": out_r.stats["batch_utilization"],
                        "same_tokens": same})
    print(refill_rows[-1])

  # 2. speedup vs batch size, refill on
  sweep = []
  batches = [int(b) for b in _BATCHES.value.split(",")]
  probe_prompts, probe_lengths = prompts[:1], lengths[:1]
  for b in tqdm(batches, desc="batch sweep"):
    base, t_base = _timed(lambda b=b: ar(b))
    base_tok_s = int(base.lengths.sum()) / t_base
    pp, pl = np.repeat(probe_prompts, b, 0), np.repeat(probe_lengths, b, 0)
    max_len = prompts.shape[1] + _NEW.value + gamma + 2
    for k in kinds:
      out, t = _timed(lambda k=k, b=b: spec(k, b))
      c, v = measure.costs(target, drafters[k], pp, pl, gamma, gamma + 1, specjax.Sampling(), max_len, repeats=3)
      predicted = float(theory.walltime_improvement(out.stats["alpha"], gamma, c, v))
      tok_s = int(out.lengths.sum()) / t
      sweep.append({"batch": b, "drafter": k, "ar_tok_s": base_tok_s, "spec_tok_s": tok_s, "speedup": tok_s / base_tok_s,
                    "predicted": predicted, "alpha": out.stats["alpha"],
                    "tokens_per_iteration": out.stats["tokens_per_iteration"], "c": c, "v": v,
                    "utilization": out.stats["batch_utilization"], "same_tokens": bool(np.array_equal(out.tokens,
                                                                                                      base.tokens))})
      print(sweep[-1])
  _write(refill_rows, sweep, gamma, b8)


def _write(refill_rows, sweep, gamma, b8):
  out_dir = pathlib.Path(_OUT_DIR.value)
  out_dir.mkdir(parents=True, exist_ok=True)
  head = (f"demo pair, {_NUM.value} held-out stdlib prompts of 64 bytes, rows stop at {_STOP.value!r} or "
          f"{_NEW.value} tokens, greedy, gamma {gamma}; one run each after a compile run; jax {jax.__version__}, "
          f"CPU, {datetime.date.today()}")
  md = [head, "", f"**Refill at batch {b8}** (static: the queue as consecutive batches of {b8})", "",
        "| decoder | tokens | static tok/s | refill tok/s | gain | static util. | refill util. | same tokens |",
        "|---|---|---|---|---|---|---|---|"]
  md += [f"| {r['decoder']} | {r['tokens']} | {r['static_tok_s']:.1f} | {r['refill_tok_s']:.1f} | {r['gain']:.2f}x "
         f"| {r['static_utilization']:.3f} | {r['refill_utilization']:.3f} | {'yes' if r['same_tokens'] else '**NO**'} |"
         for r in refill_rows]
  md += ["", "**Speedup vs batch size** (refill on; predicted: walltime formula with c, v measured at that batch)", "",
         "| B | drafter | AR tok/s | spec tok/s | speedup | predicted | α | tokens/iter | c | v | util. | = AR |",
         "|---|---|---|---|---|---|---|---|---|---|---|---|"]
  md += [f"| {r['batch']} | {r['drafter']} | {r['ar_tok_s']:.1f} | {r['spec_tok_s']:.1f} | {r['speedup']:.2f}x "
         f"| {r['predicted']:.2f}x | {r['alpha']:.3f} | {r['tokens_per_iteration']:.2f} | {r['c']:.3f} | {r['v']:.2f} "
         f"| {r['utilization']:.3f} | {'yes' if r['same_tokens'] else '**NO**'} |" for r in sweep]
  (out_dir / "bench_batch.md").write_text("\n".join(md) + "\n")
  (out_dir / "bench_batch.json").write_text(json.dumps({"header": head, "refill": refill_rows, "sweep": sweep},
                                                       indent=1))
  _plot(sweep, out_dir / "speedup_vs_batch.png")
  print("\n".join(md))


def _plot(sweep, path):
  import matplotlib  # pylint: disable=import-outside-toplevel
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt  # pylint: disable=import-outside-toplevel
  fig, ax = plt.subplots(figsize=(6, 4))
  for i, k in enumerate(dict.fromkeys(r["drafter"] for r in sweep)):
    rows = [r for r in sweep if r["drafter"] == k]
    color = f"C{i}"
    ax.plot([r["batch"] for r in rows], [r["speedup"] for r in rows], "o-", color=color, label=f"{k} measured")
    ax.plot([r["batch"] for r in rows], [r["predicted"] for r in rows], "--", color=color, label=f"{k} predicted")
  ax.axhline(1.0, color="gray", lw=0.8)
  ax.set_xscale("log", base=2)
  ax.set_xlabel("batch size (refill on)")
  ax.set_ylabel("speedup over autoregressive")
  ax.legend(fontsize=7)
  fig.tight_layout()
  fig.savefig(path, dpi=120)


if __name__ == "__main__":
  app.run(main)
