"""Throughput of a prompt queue, with and without continuous refill, and speedup vs batch size.

  python -m specjax.bench batch                                   # demo pair, 64 prompts
  python -m specjax.bench batch --batch_sizes=1,2 --num_prompts=4 --max_new_tokens=16 --out_dir=/tmp/bb  # smoke

The queue: ``--num_prompts`` held-out stdlib snippets; rows stop at the first ``--stop`` byte (the
byte-level demo has no EOS; ':' ends a def/if/for header, so lengths vary as in serving) or at
``--max_new_tokens``. One process, every decoder compiled once before it is timed
(:func:`specjax.measure.median_time` with one timed run).

1. **Refill at batch 8**: the queue decoded as static batches of 8, one after another (each waits
   for its slowest row) vs one refilled batch of 8 rows: tokens/s and batch utilization
   (generated tokens / (iterations x rows)), autoregressive and speculative.
2. **Speedup vs batch size** (1 .. 32, refill on): each drafter's measured speedup over the
   refilled autoregressive baseline, and the cost model's prediction
   ``walltime_improvement(alpha, gamma, c, v)`` with alpha from the run and c, v measured at that
   batch (:func:`specjax.measure.costs`).

Writes ``bench_batch.md``/``.json`` and ``speedup_vs_batch.png`` under ``--out_dir`` (default
benchmarks/batch).
"""
from __future__ import annotations

import datetime
import json

from specjax.bench import common

def make_drafter(kind, target, drafter_model):
  """The demo drafter of ``kind`` (its declared demo config) on ``target``; kinds that draft with a small
  model draft with ``drafter_model``."""
  import specjax  # pylint: disable=import-outside-toplevel
  from specjax import experiment  # pylint: disable=import-outside-toplevel
  from specjax.bench import families  # pylint: disable=import-outside-toplevel
  filename, overrides = families.demo_families()[kind]
  config = families.family_config(kind, filename, overrides, 1, 0.0, pair="", max_new_tokens=1, repeats=1)
  if experiment.uses_small_model(kind):
    return specjax.drafters.build(kind, experiment.drafter_options(config), target, model=drafter_model)
  return experiment.make_drafter(config, target)


def demo_kinds() -> list:
  """The kinds with a demo of their own name (every shipped one)."""
  from specjax import drafters  # pylint: disable=import-outside-toplevel
  from specjax.bench import families  # pylint: disable=import-outside-toplevel
  return [k for k in families.demo_families() if k in drafters.kinds()]


def _timed(fn):
  """(output, seconds of one run after a compile-and-warm-up run)."""
  from specjax import measure  # pylint: disable=import-outside-toplevel
  return measure.median_time(fn, 1)


def refill_rows(target, drafters, prompts, lengths, common_kw, gamma, b8) -> list[dict]:
  """Per decoder: the queue as consecutive static batches of ``b8`` against one refilled batch of ``b8``."""
  import numpy as np  # pylint: disable=import-outside-toplevel
  import specjax  # pylint: disable=import-outside-toplevel

  def decode(kind, p, l, batch_size=None):
    if kind is None:
      return specjax.generate(target, p, l, batch_size=batch_size, **common_kw)
    return specjax.speculative_generate(target, drafters[kind], p, l, gamma=gamma, batch_size=batch_size, **common_kw)

  rows = []
  for name, kind in [("autoregressive", None)] + [(k, k) for k in drafters]:
    static = lambda kind=kind: [decode(kind, prompts[i:i + b8], lengths[i:i + b8])  # one batch after another
                                for i in range(0, len(prompts), b8)]
    outs, t_static = _timed(static)
    out_r, t_refill = _timed(lambda kind=kind: decode(kind, prompts, lengths, b8))
    tokens = int(sum(o.lengths.sum() for o in outs))
    same = all(np.array_equal(o.tokens, out_r.tokens[i * b8:(i + 1) * b8]) for i, o in enumerate(outs))
    rows.append({"decoder": name, "tokens": tokens, "static_tok_s": tokens / t_static,
                 "refill_tok_s": int(out_r.lengths.sum()) / t_refill, "gain": t_static / t_refill,
                 "static_utilization": float(np.mean([o.stats["batch_utilization"] for o in outs])),
                 "refill_utilization": out_r.stats["batch_utilization"], "same_tokens": same})
    print(rows[-1])
  return rows


def batch_sweep(target, drafters, prompts, lengths, common_kw, gamma, batches, max_new) -> list[dict]:
  """Per batch size (refill on) and drafter: measured speedup, the formula's, alpha, c, v."""
  import numpy as np  # pylint: disable=import-outside-toplevel
  from tqdm import tqdm  # pylint: disable=import-outside-toplevel
  import specjax  # pylint: disable=import-outside-toplevel
  from specjax import measure, theory  # pylint: disable=import-outside-toplevel
  sweep = []
  for b in tqdm(batches, desc="batch sweep"):
    base, t_base = _timed(lambda b=b: specjax.generate(target, prompts, lengths, batch_size=b, **common_kw))
    base_tok_s = int(base.lengths.sum()) / t_base
    pp, pl = np.repeat(prompts[:1], b, 0), np.repeat(lengths[:1], b, 0)
    max_len = prompts.shape[1] + max_new + gamma + 2
    for k, drafter in drafters.items():
      out, t = _timed(lambda b=b, drafter=drafter: specjax.speculative_generate(
          target, drafter, prompts, lengths, gamma=gamma, batch_size=b, **common_kw))
      c, v = measure.costs(target, drafter, pp, pl, gamma, gamma + 1, specjax.Sampling(), max_len, repeats=3)
      tok_s = int(out.lengths.sum()) / t
      sweep.append({"batch": b, "drafter": k, "ar_tok_s": base_tok_s, "spec_tok_s": tok_s,
                    "speedup": tok_s / base_tok_s,
                    "predicted": float(theory.walltime_improvement(out.stats["alpha"], gamma, c, v)),
                    "alpha": out.stats["alpha"], "tokens_per_iteration": out.stats["tokens_per_iteration"],
                    "c": c, "v": v, "utilization": out.stats["batch_utilization"],
                    "same_tokens": bool(np.array_equal(out.tokens, base.tokens))})
      print(sweep[-1])
  return sweep


def write(out_dir, refill, sweep, *, gamma, b8, num_prompts, stop, max_new) -> str:
  import jax  # pylint: disable=import-outside-toplevel
  out = common.out_dir(out_dir)
  head = (f"demo pair, {num_prompts} held-out stdlib prompts of 64 bytes, rows stop at {stop!r} or "
          f"{max_new} tokens, greedy, gamma {gamma}; one run each after a compile run; jax {jax.__version__}, "
          f"CPU, {datetime.date.today()}")
  md = [head, "", f"**Refill at batch {b8}** (static: the queue as consecutive batches of {b8})", "",
        "| decoder | tokens | static tok/s | refill tok/s | gain | static util. | refill util. | same tokens |",
        "|---|---|---|---|---|---|---|---|"]
  md += [f"| {r['decoder']} | {r['tokens']} | {r['static_tok_s']:.1f} | {r['refill_tok_s']:.1f} | {r['gain']:.2f}x "
         f"| {r['static_utilization']:.3f} | {r['refill_utilization']:.3f} | {'yes' if r['same_tokens'] else '**NO**'} |"
         for r in refill]
  md += ["", "**Speedup vs batch size** (refill on; predicted: walltime formula with c, v measured at that batch)", "",
         "| B | drafter | AR tok/s | spec tok/s | speedup | predicted | α | tokens/iter | c | v | util. | = AR |",
         "|---|---|---|---|---|---|---|---|---|---|---|---|"]
  md += [f"| {r['batch']} | {r['drafter']} | {r['ar_tok_s']:.1f} | {r['spec_tok_s']:.1f} | {r['speedup']:.2f}x "
         f"| {r['predicted']:.2f}x | {r['alpha']:.3f} | {r['tokens_per_iteration']:.2f} | {r['c']:.3f} | {r['v']:.2f} "
         f"| {r['utilization']:.3f} | {'yes' if r['same_tokens'] else '**NO**'} |" for r in sweep]
  (out / "bench_batch.md").write_text("\n".join(md) + "\n")
  (out / "bench_batch.json").write_text(json.dumps({"header": head, "refill": refill, "sweep": sweep}, indent=1))
  plot(sweep, out / "speedup_vs_batch.png")
  return "\n".join(md)


def plot(sweep, path):
  import matplotlib  # pylint: disable=import-outside-toplevel
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt  # pylint: disable=import-outside-toplevel
  fig, ax = plt.subplots(figsize=(6, 4))
  for i, k in enumerate(dict.fromkeys(r["drafter"] for r in sweep)):
    rows = [r for r in sweep if r["drafter"] == k]
    ax.plot([r["batch"] for r in rows], [r["speedup"] for r in rows], "o-", color=f"C{i}", label=f"{k} measured")
    ax.plot([r["batch"] for r in rows], [r["predicted"] for r in rows], "--", color=f"C{i}", label=f"{k} predicted")
  ax.axhline(1.0, color="gray", lw=0.8)
  ax.set_xscale("log", base=2)
  ax.set_xlabel("batch size (refill on)")
  ax.set_ylabel("speedup over autoregressive")
  ax.legend(fontsize=7)
  fig.tight_layout()
  fig.savefig(path, dpi=120)
  plt.close(fig)


def _flags():
  from absl import flags  # pylint: disable=import-outside-toplevel
  fv = flags.FlagValues()
  flags.DEFINE_list("batch_sizes", "1,2,4,8,16,32", "batch sizes of the sweep (refill on)", flag_values=fv)
  flags.DEFINE_list("drafters", "draft_model,ngram,mtp", f"demo drafters, any of {', '.join(demo_kinds())} "
                    "(each kind's demo config)", flag_values=fv)
  flags.DEFINE_integer("num_prompts", 64, "prompts in the queue", flag_values=fv)
  flags.DEFINE_integer("max_new_tokens", 128, "tokens per prompt at most", flag_values=fv)
  flags.DEFINE_integer("gamma", 4, "draft length for every drafter", flag_values=fv)
  flags.DEFINE_string("stop", ":", "one byte that ends a row (stand-in EOS)", flag_values=fv)
  flags.DEFINE_integer("refill_batch", 8, "batch size of the with/without refill comparison", flag_values=fv)
  flags.DEFINE_string("out_dir", "benchmarks/batch", "where the tables go", flag_values=fv)
  return fv


def _run(fv) -> int:
  batches = common.parse_list(fv.batch_sizes, int, "batch_sizes", lambda b: b >= 1)
  kinds = common.parse_list(fv.drafters, str, "drafters", lambda k: k in demo_kinds())
  for name in ("num_prompts", "max_new_tokens", "gamma", "refill_batch"):
    if fv[name].value < 1:
      raise common.UsageError(f"--{name} must be >= 1, got {fv[name].value}")
  if len(fv.stop.encode()) != 1:
    raise common.UsageError(f"--stop must be one byte, got {fv.stop!r}")
  import numpy as np  # pylint: disable=import-outside-toplevel
  import specjax  # pylint: disable=import-outside-toplevel
  from specjax.data import code_corpus  # pylint: disable=import-outside-toplevel
  target, _ = specjax.load_pretrained("demo/target")
  drafter_model, _ = specjax.load_pretrained("demo/drafter")
  prompts = np.stack(code_corpus.held_out_prompts(fv.num_prompts, 64, seed=0)).astype(np.int32)  # bytes = ids
  lengths = np.full((len(prompts),), prompts.shape[1], np.int32)
  common_kw = dict(max_new_tokens=fv.max_new_tokens, eos_id=ord(fv.stop))
  drafters = {k: make_drafter(k, target, drafter_model) for k in kinds}
  refill = refill_rows(target, drafters, prompts, lengths, common_kw, fv.gamma, fv.refill_batch)
  sweep = batch_sweep(target, drafters, prompts, lengths, common_kw, fv.gamma, batches, fv.max_new_tokens)
  print(write(fv.out_dir, refill, sweep, gamma=fv.gamma, b8=fv.refill_batch, num_prompts=fv.num_prompts,
              stop=fv.stop, max_new=fv.max_new_tokens))
  return 0


def main(argv) -> int:
  fv = _flags()
  return common.run_task(fv, argv, __doc__, "batch", lambda: _run(fv))
