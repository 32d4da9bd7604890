"""Leviathan et al. 2022 (arXiv 2211.17192) §3 and Table 2 on this machine: a config's pair or the T5 EnDe pair.

  python -m specjax.bench walltime                                   # demo pair, measures itself
  python -m specjax.bench walltime --benchmark_json=benchmarks/results/results.json
  python -m specjax.bench walltime --config=configs/tiny_random.py --gammas=1,2 --temperatures=0 \\
      --max_new_tokens=8 --repeats=1 --out_dir=/tmp/walltime
  python -m specjax.bench walltime --t5_ende                         # ~20 min on 2 shared CPU cores
  python -m specjax.bench walltime --t5_ende --prompts=4 --gammas=1,3 --temperatures=0 --repeats=1 \\
      --out_dir=/tmp/t5t

On ``--config``'s pair (default; out_dir benchmarks/walltime), the gamma command's sweep at batch 1:

(a) ``walltime_curves.png``: the walltime formula (1 - alpha^(gamma+1)) / ((1 - alpha)(gamma c + v)) for
    alpha in {0.5, ..., 0.9} at this machine's c and v, with the measured speedups of real pairs on
    top (from ``--benchmark_json``, else from the sweep below), coloured by their measured alpha;
    and measured vs predicted speedup per run (the formula is right on the diagonal).
(b) ``table2.md``: a drafter-size sweep against one target in the shape of Leviathan's Table 2
    (T5-XXL with T5-small/base/large drafters: a bigger drafter has higher alpha and can still be
    slower). ``--drafters`` lists checkpoint folders plus ``draft_model`` (the config's drafter),
    ``ngram`` (prompt lookup, c ~ 0, like the paper's bigram row) and ``self`` (the target drafts
    for itself: alpha = 1 at temperature 0, c = 1). Each drafter is reported at its best gamma,
    as the paper does, beside the paper's EnDe rows.
Also writes ``reproduce.json`` with every measured row.

With ``--t5_ende`` (out_dir benchmarks/t5_ende): target ``--assets``/target with drafters
``drafter_small`` / ``_base`` / ``_large`` (about 1/140, 1/45, 1/14 of its parameters, as
T5-small/base/large to T5-XXL), on held-out catalogue strings ("translate English to German: ..."),
batch 1: the prompts form a queue decoded one row at a time (``batch_size=1`` continuous refill)
inside one jitted loop per run, every run stopping each row at EOS. For every drafter x temperature
x gamma: alpha, measured speedup over the autoregressive baseline timed alternately with it
(:func:`specjax.measure.paired_times`), and the formula with c and v measured here
(:func:`specjax.measure.costs`, :func:`specjax.measure.verify_cost`). Writes ``sweep.md``,
``table2.md`` (best gamma per drafter beside the paper's rows), ``results.json`` and
``speedup_vs_gamma.png``.
"""
from __future__ import annotations

import json
import pathlib
import time

from specjax.bench import common, gamma

ALPHAS = (0.5, 0.6, 0.7, 0.8, 0.9)
# arXiv 2211.17192: Table 2 (alpha, measured speed) with c and the formula's Exp from Table 4 (App. A.3).
# Target T5-XXL (11B), EnDe, batch 1, one TPU-v4; drafter sizes from §4.1.
PAPER_ROWS = [  # drafter, params, temp, gamma, alpha, c, Exp, Emp
    ("T5-small", "77M", 0, 7, 0.75, 0.02, 3.2, 3.4),
    ("T5-base", "250M", 0, 7, 0.80, 0.04, 3.3, 2.8),
    ("T5-large", "800M", 0, 7, 0.82, 0.11, 2.5, 1.7),
    ("T5-small", "77M", 1, 7, 0.62, 0.02, 2.3, 2.6),
    ("T5-base", "250M", 1, 5, 0.68, 0.04, 2.4, 2.4),
    ("T5-large", "800M", 1, 3, 0.71, 0.11, 2.0, 1.4),
]
# §4.2: EnDe bigram, alpha 0.20 (Table 3), c = 0 "yields a 1.25X speed improvement": the formula's
# gamma -> infinity limit 1 / (1 - alpha), not a measurement (only the T5 drafters were implemented).
PAPER_BIGRAM = ("bigram (§4.2)", "-", 0, None, 0.20, 0.0, 1.25, None)
CONFIG_ONLY = ("config", "batch_sizes", "benchmark_json", "curve_c", "curve_v", "max_gamma")
T5_ONLY = ("assets", "prompts", "seed")


def _params(n: int) -> str:
  return f"{n / 1e6:.2f}M" if n >= 1e5 else f"{n / 1e3:.1f}K"


# ----------------------------------------------------------------------------- (a) curves
def plot_curves(rows, c: float, v: float, max_gamma: int, path):
  import matplotlib  # pylint: disable=import-outside-toplevel
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt  # pylint: disable=import-outside-toplevel
  import numpy as np  # pylint: disable=import-outside-toplevel
  from specjax import theory  # pylint: disable=import-outside-toplevel
  cmap = plt.get_cmap("viridis")
  color = lambda a: cmap((min(max(a, 0.4), 1.0) - 0.4) / 0.6)  # one colour scale for curves and points
  fig, (ax, ax2) = plt.subplots(1, 2, figsize=(11, 4.2))
  g = np.arange(1, max_gamma + 1)
  for a in ALPHAS:
    ax.plot(g, theory.walltime_improvement(a, g, c, v), "-", color=color(a), label=f"formula α={a}")
  markers = {}
  for r in rows:
    m = markers.setdefault(r["drafter"], "osD^v<>"[len(markers) % 7])
    ax.plot(r["gamma"], r["speedup"], m, color=color(r["alpha"]), mec="k", ms=6)
  for name, m in markers.items():
    ax.plot([], [], m, color="w", mec="k", label=f"measured: {pathlib.Path(name).name}")
  ax.axhline(1.0, color="gray", lw=0.8, ls=":")
  ax.set(xlabel="gamma", ylabel="walltime improvement", title=f"formula at c={c:.3f}, v={v:.2f}; points: measured")
  ax.legend(fontsize=7, ncol=2)
  for r in rows:
    ax2.plot(r["predicted_speedup"], r["speedup"], markers[r["drafter"]], color=color(r["alpha"]), mec="k", ms=6)
  hi = max([r["predicted_speedup"] for r in rows] + [r["speedup"] for r in rows] + [1.5]) * 1.1
  ax2.plot([0, hi], [0, hi], "k--", lw=0.8, label="measured = predicted")
  ax2.set(xlim=(0, hi), ylim=(0, hi), xlabel="predicted (own α, c, v, γ)", ylabel="measured speedup",
          title="measured vs the walltime formula")
  ax2.legend(fontsize=7)
  fig.tight_layout()
  fig.savefig(path, dpi=110)
  plt.close(fig)


# ----------------------------------------------------------------------------- (b) table
def best_rows(rows):
  """Per (drafter, temperature), the gamma with the highest measured speedup (the paper's choice)."""
  best = {}
  for r in rows:
    key = (r["drafter"], r["temperature"])
    if key not in best or r["speedup"] > best[key]["speedup"]:
      best[key] = r
  return sorted(best.values(), key=lambda r: (r["temperature"], r["drafter_params"], r["drafter"] != "ngram"))


def table2(rows, target_name: str, target_params: int) -> str:
  lines = ["| source | target | drafter | drafter params | temp | γ | α | c | formula | measured |",
           "|---|---|---|---|---|---|---|---|---|---|"]
  for d, n, t, g, a, c, exp, emp in PAPER_ROWS + [PAPER_BIGRAM]:
    lines.append(f"| Leviathan et al. | T5-XXL 11B (EnDe) | {d} | {n} | {t} | {g or '-'} | {a:.2f} | {c:.2f} "
                 f"| {f'{exp:g}X' if exp else '-'} | {f'{emp}X' if emp else '-'} |")
  for r in best_rows(rows):
    name = {"self": "target itself", "draft_model": "config drafter"}.get(r["drafter"], pathlib.Path(r["drafter"]).name)
    lines.append(f"| specjax, this machine | {target_name} {_params(target_params)} | {name} "
                 f"| {_params(r['drafter_params']) if r['drafter_params'] else '0 (lookup)'} | {r['temperature']:g} "
                 f"| {r['gamma']} | {r['alpha']:.2f} | {r['c']:.3f} | {r['predicted_speedup']:.2f}X "
                 f"| {r['speedup']:.2f}X |")
  note = ("\nPaper rows: arXiv 2211.17192 Table 2 (γ, α, measured speed) and Table 4 / App. A.3 (c from "
          "profiler traces, formula 'Exp'); bigram: §4.2 text (α 0.20, c = 0: 1.25X by the formula, γ → ∞). "
          "Ours: batch 1, best γ of the sweep per drafter, formula = walltime_improvement(α, γ, c, v) with the "
          "measured verify cost v.")
  return "\n".join(lines) + "\n" + note


# ----------------------------------------------------------------------------- the T5 EnDe pair
T5_WIDTH = 64  # every prompt right-padded to this many tokens: one compile per run shape


def t5_prompts(tok, n: int, seed: int):
  """(prompts_NxT5_WIDTH, lengths_N, english texts): n held-out pairs' encoder inputs, right-padded."""
  import numpy as np  # pylint: disable=import-outside-toplevel
  from specjax.data import ende  # pylint: disable=import-outside-toplevel
  from specjax.train import seq2seq  # pylint: disable=import-outside-toplevel
  pairs = ende.split_pairs()["held_out"]
  rng = np.random.default_rng(seed)
  rows, texts = [], []
  for i in rng.permutation(len(pairs)):
    ids = tok.encode(ende.T5_PREFIX + pairs[i][0])
    if len(ids) <= T5_WIDTH:
      rows.append(ids)
      texts.append(pairs[i][0])
    if len(rows) == n:
      break
  return seq2seq.pad(rows, T5_WIDTH), np.array([len(r) for r in rows], np.int32), texts


def t5_sweep(target, drafters: dict, prompts, lengths, gammas, temps, max_new, repeats, eos_id, seed):
  """Rows of measurements; also the per-gamma v and per-(drafter, temperature) c."""
  import jax  # pylint: disable=import-outside-toplevel
  import numpy as np  # pylint: disable=import-outside-toplevel
  from tqdm import tqdm  # pylint: disable=import-outside-toplevel
  import specjax  # pylint: disable=import-outside-toplevel
  from specjax import measure, theory  # pylint: disable=import-outside-toplevel
  one_p, one_l = prompts[:1], lengths[:1]
  max_len = T5_WIDTH + max_new + max(gammas) + 1
  v = {g: measure.verify_cost(target, one_p, one_l, g + 1, max_len, max(3 * repeats, 9))
       for g in range(1, max(gammas) + 1)}
  rows, cs = [], {}
  combos = [(t, d, g) for t in temps for d in drafters for g in gammas]
  for t, name, g in tqdm(combos, desc="T5 EnDe sweep"):
    sampling = specjax.Sampling(t)
    common_kw = dict(max_new_tokens=max_new, sampling=sampling, rng=jax.random.PRNGKey(seed), eos_id=eos_id,
                     batch_size=1, max_len=max_len)
    drafter = specjax.drafters.DraftModel(drafters[name])
    if (name, t) not in cs:  # one drafter round of 7 drafts / 7, in one-token target steps
      cs[(name, t)] = measure.costs(target, drafter, one_p, one_l, 7, 8, sampling, max_len, max(3 * repeats, 9))[0]
    base, spec, t_base, t_spec = measure.paired_times(
        lambda: specjax.generate(target, prompts, lengths, **common_kw),
        lambda: specjax.speculative_generate(target, drafter, prompts, lengths, gamma=g, **common_kw), repeats)
    st, c = spec.stats, cs[(name, t)]
    n_spec, n_base = float(np.sum(spec.lengths)), float(np.sum(base.lengths))
    rows.append({
        "drafter": name, "drafter_params": drafters[name].num_params, "temperature": t, "gamma": g,
        "alpha": st["alpha"], "mean_accepted": st["mean_accepted"], "tokens_per_iteration": st["tokens_per_iteration"],
        "baseline_tokens_per_s": n_base / t_base, "tokens_per_s": n_spec / t_spec,
        "speedup": (n_spec / t_spec) / (n_base / t_base), "c": c, "v": v[g],
        "predicted_speedup": float(theory.walltime_improvement(st["alpha"], g, c, v[g])),
        "expected_speedup": float(st["tokens_per_iteration"] / (g * c + v[g])),
        "target_calls": st["target_calls"], "baseline_target_calls": base.stats["target_calls"],
        "generated_tokens": int(n_spec),
        "identical_to_autoregressive": bool(np.array_equal(spec.tokens, base.tokens)) if t == 0 else None,
    })
  return rows, v, cs


def _t5_params(n):
  return f"{n / 1e6:.2f}M" if n >= 1e6 else f"{n / 1e3:.0f}K"


def t5_sweep_table(rows) -> str:
  lines = ["| drafter | params | T | γ | α | tokens/iter | AR tok/s | spec tok/s | speedup | formula | c | v | = AR |",
           "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
  for r in rows:
    same = {True: "yes", False: "**NO**", None: "n/a"}[r["identical_to_autoregressive"]]
    lines.append(f"| {r['drafter']} | {_t5_params(r['drafter_params'])} | {r['temperature']:g} | {r['gamma']} "
                 f"| {r['alpha']:.3f} | {r['tokens_per_iteration']:.2f} | {r['baseline_tokens_per_s']:.1f} "
                 f"| {r['tokens_per_s']:.1f} | {r['speedup']:.2f}x | {r['predicted_speedup']:.2f}x | {r['c']:.3f} "
                 f"| {r['v']:.2f} | {same} |")
  return "\n".join(lines)


def t5_table2(rows, target_params: int) -> str:
  """Best gamma per (temperature, drafter) beside the paper's EnDe rows, with each drafter's size ratio."""
  best = {}
  for r in rows:
    key = (r["temperature"], r["drafter_params"])
    if key not in best or r["speedup"] > best[key]["speedup"]:
      best[key] = r
  lines = ["| source | drafter | params (ratio) | temp | best γ | α | c | formula | measured speedup |",
           "|---|---|---|---|---|---|---|---|---|"]
  for d, n, t, g, a, c, exp, emp in PAPER_ROWS:
    lines.append(f"| Leviathan et al., T5-XXL 11B | {d} | {n} (1/{11000 / float(n[:-1]):.0f}) | {t} | {g} | {a:.2f} "
                 f"| {c:.2f} | {exp}X | {emp}X |")
  for _, r in sorted(best.items()):
    lines.append(f"| specjax, T5 {_t5_params(target_params)} (CPU) | {r['drafter']} "
                 f"| {_t5_params(r['drafter_params'])} (1/{target_params / r['drafter_params']:.0f}) "
                 f"| {r['temperature']:g} | {r['gamma']} | {r['alpha']:.2f} | {r['c']:.3f} "
                 f"| {r['predicted_speedup']:.2f}X | {r['speedup']:.2f}X |")
  return "\n".join(lines)


def t5_plot(rows, v, path):
  import matplotlib  # pylint: disable=import-outside-toplevel
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt  # pylint: disable=import-outside-toplevel
  import numpy as np  # pylint: disable=import-outside-toplevel
  from specjax import theory  # pylint: disable=import-outside-toplevel
  temps = sorted({r["temperature"] for r in rows})
  fig, axes = plt.subplots(1, len(temps), figsize=(5.5 * len(temps), 4), squeeze=False)
  g_all = np.array(sorted(v))
  for ax, t in zip(axes[0], temps):
    for i, name in enumerate(dict.fromkeys(r["drafter"] for r in rows)):
      rs = [r for r in rows if r["drafter"] == name and r["temperature"] == t]
      if not rs:
        continue
      col = f"C{i}"
      alpha = float(np.mean([r["alpha"] for r in rs]))
      curve = [theory.walltime_improvement(alpha, g, rs[0]["c"], v[g]) for g in g_all]
      ax.plot(g_all, curve, "--", color=col, label=f"formula: {name} (α={alpha:.2f}, c={rs[0]['c']:.2f})")
      ax.plot([r["gamma"] for r in rs], [r["speedup"] for r in rs], "o-", color=col, label=f"measured: {name}")
    ax.axhline(1.0, color="gray", lw=0.8, ls=":")
    ax.set(xlabel="γ", ylabel="speedup over autoregressive", title=f"T5 EnDe, batch 1, temperature {t:g}")
    ax.legend(fontsize=7)
  fig.tight_layout()
  fig.savefig(path, dpi=110)
  plt.close(fig)


def run_config_pair(fv, gammas, temps) -> int:
  import jax  # pylint: disable=import-outside-toplevel
  import numpy as np  # pylint: disable=import-outside-toplevel
  from specjax import experiment  # pylint: disable=import-outside-toplevel
  batches = common.parse_list(fv.batch_sizes, int, "batch_sizes", lambda b: b >= 1)
  kinds = list(fv.drafters or ["draft_model", "ngram", "self"])
  config, target, drafter_model, is_demo = gamma.load_pair(fv.config)
  models = {"draft_model": drafter_model}
  for kind in kinds:  # anything not built in is a checkpoint folder (or a name under specjax/assets)
    if kind not in ("ngram", "self", "draft_model"):
      models[kind] = experiment.load_model({"checkpoint": kind}, 0)[0]
  if "draft_model" in kinds and drafter_model is None:
    raise common.UsageError("--drafters=draft_model needs a config with a `drafter` model")
  sweep = gamma.Sweep(config, target, models, max_new_tokens=fv.max_new_tokens or config.max_new_tokens,
                      repeats=fv.repeats or config.repeats, is_demo=is_demo)
  rows = sweep.run(kinds, batches, temps, gammas)
  points = json.loads(pathlib.Path(fv.benchmark_json).read_text())["rows"] if fv.benchmark_json else rows
  model_cs = [r["c"] for r in points if r["drafter"] not in ("ngram", "self")]
  c = fv.curve_c if fv.curve_c is not None else float(np.median(model_cs)) if model_cs else 0.0
  v = fv.curve_v if fv.curve_v is not None else float(np.median([r["v"] for r in points]))
  out = common.out_dir(fv.out_dir or "benchmarks/walltime")
  plot_curves(points, c, v, fv.max_gamma, out / "walltime_curves.png")
  table = table2(rows, "demo target" if is_demo else "tiny random target", target.num_params)
  (out / "table2.md").write_text(table + "\n")
  meta = {"demo_weights": is_demo, "target_params": target.num_params, "curve_c": c, "curve_v": v,
          "points_from": fv.benchmark_json or "this run", "devices": [str(d) for d in jax.devices()]}
  common.write_json(out / "reproduce.json", {"meta": meta, "rows": rows})
  print(table)
  print(f"wrote {out}/walltime_curves.png, table2.md, reproduce.json")
  return 0


def run_t5_ende(fv, gammas, temps) -> int:
  import jax  # pylint: disable=import-outside-toplevel
  from specjax import checkpoint  # pylint: disable=import-outside-toplevel
  from specjax.data import sentencepiece_tok  # pylint: disable=import-outside-toplevel
  assets = pathlib.Path(fv.assets)
  if not (assets / "target").is_dir():
    raise common.UsageError(f"--assets={assets}: no target/ folder (the T5 EnDe pair: python -m specjax.train t5_ende)")
  tok = sentencepiece_tok.load(assets / "target")
  target = checkpoint.load_model(assets / "target")
  drafters = {d: checkpoint.load_model(assets / f"drafter_{d}") for d in (fv.drafters or ["small", "base", "large"])}
  prompts, lengths, texts = t5_prompts(tok, fv.prompts, fv.seed)
  max_new, repeats = fv.max_new_tokens or 48, fv.repeats or 3
  t0 = time.time()
  rows, v, cs = t5_sweep(target, drafters, prompts, lengths, gammas, temps, max_new, repeats, tok.eos_id,
                                  fv.seed)
  out = common.out_dir(fv.out_dir or "benchmarks/t5_ende")
  t5_plot(rows, v, out / "speedup_vs_gamma.png")
  t2 = t5_table2(rows, target.num_params)
  (out / "table2.md").write_text(t2 + "\n")
  (out / "sweep.md").write_text(t5_sweep_table(rows) + "\n")
  meta = {"target_params": target.num_params, "prompts": len(texts), "max_new_tokens": max_new,
          "repeats": repeats, "v_by_gamma": v, "c": {f"{d}@T{t:g}": c for (d, t), c in cs.items()},
          "wall_s": round(time.time() - t0, 1), "devices": [str(d) for d in jax.devices()], "prompt_texts": texts}
  common.write_json(out / "results.json", {"meta": meta, "rows": rows}, ensure_ascii=False)
  print(t5_sweep_table(rows))
  print()
  print(t2)
  print(f"wrote {out}/table2.md, sweep.md, results.json, speedup_vs_gamma.png")
  return 0


def _run(fv) -> int:
  mode, other = ("--t5_ende", CONFIG_ONLY) if fv.t5_ende else ("the config's pair", T5_ONLY)
  wrong = [f"--{name}" for name in other if fv[name].present]
  if wrong:
    raise common.UsageError(f"{', '.join(wrong)}: not used with {mode}")
  gammas = common.parse_list(fv.gammas, int, "gammas", lambda g: g >= 1)
  temps = common.parse_list(fv.temperatures, float, "temperatures", lambda t: t >= 0)
  return (run_t5_ende if fv.t5_ende else run_config_pair)(fv, gammas, temps)


def main(argv) -> int:
  from absl import flags  # pylint: disable=import-outside-toplevel
  from specjax.loading import ASSETS  # pylint: disable=import-outside-toplevel
  fv = flags.FlagValues()
  gamma.define_sweep_flags(fv, gammas="1,3,5,7", drafters=None, batch_sizes="1", out_dir="",
                           drafters_help="the config's pair: draft_model, ngram, self and checkpoint folders "
                           "(default draft_model,ngram,self); --t5_ende: drafter_<name> folders under --assets "
                           "(default small,base,large)")
  fv["out_dir"].help = "where tables, JSON and plots go (default benchmarks/walltime; --t5_ende: benchmarks/t5_ende)"
  fv["max_new_tokens"].help = "tokens per row (default: the config's; --t5_ende: 48, rows stop at EOS)"
  fv["repeats"].help = "timed runs per measurement (default: the config's; --t5_ende: 3)"
  flags.DEFINE_string("benchmark_json", None, "results.json of the gamma command for (a)'s points", flag_values=fv)
  flags.DEFINE_float("curve_c", None, "c for (a)'s curves (default: measured, median over model drafters)",
                     flag_values=fv)
  flags.DEFINE_float("curve_v", None, "v for (a)'s curves (default: measured, median over runs)", flag_values=fv)
  flags.DEFINE_integer("max_gamma", 10, "x range of (a)'s curves", flag_values=fv)
  flags.DEFINE_boolean("t5_ende", False, "the T5 EnDe pair trained here instead of --config's pair", flag_values=fv)
  flags.DEFINE_string("assets", str(ASSETS / "t5_ende"), "--t5_ende: folder with target/ and drafter_*/",
                      flag_values=fv)
  flags.DEFINE_integer("prompts", 12, "--t5_ende: held-out prompts in the batch-1 queue", flag_values=fv)
  flags.DEFINE_integer("seed", 0, "--t5_ende: prompt choice and sampling seed", flag_values=fv)
  return common.run_task(fv, argv, __doc__, "walltime", lambda: _run(fv))
