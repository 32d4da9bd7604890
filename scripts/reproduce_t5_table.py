"""Leviathan et al. 2022's Table 2 (EnDe rows) in shape, on the trained T5 EnDe pair of this repo.

  python scripts/reproduce_t5_table.py                                  # ~20 min on 2 shared CPU cores
  python scripts/reproduce_t5_table.py --prompts=4 --gammas=1,3 --temperatures=0 --repeats=1 --out_dir=/tmp/t5t

Target ``specjax/assets/t5_ende/target`` with drafters ``drafter_small`` / ``_base`` / ``_large``
(about 1/140, 1/45, 1/14 of its parameters, as T5-small/base/large to T5-XXL), on held-out
catalogue strings ("translate English to German: ..."), batch 1: the prompts form a queue decoded
one row at a time (``batch_size=1`` continuous refill) inside one jitted loop per run, every
run stopping each row at EOS. For every drafter x temperature x gamma: alpha (sum_x min(p, q) per
verified position), measured speedup over the autoregressive baseline timed alternately with it,
and the walltime formula (1 - alpha^(gamma+1)) / ((1 - alpha)(gamma c + v)) with c (one drafter
round / gamma, in target steps) and v (a verify pass over gamma + 1 tokens / a one-token step)
measured here. Writes ``sweep.md``, ``table2.md`` (best gamma per drafter beside the paper's rows),
``results.json`` and ``speedup_vs_gamma.png`` (measured points, formula curves) to ``--out_dir``.
"""
from __future__ import annotations

import json
import pathlib
import time

from absl import app, flags
import jax
import numpy as np
from tqdm.auto import tqdm

import specjax
from specjax import checkpoint, measure, theory
from specjax.data import ende, sentencepiece_tok
from specjax.train import seq2seq

_ASSETS = pathlib.Path(specjax.__file__).parent / "assets" / "t5_ende"
_DRAFTERS = flags.DEFINE_list("drafters", "small,base,large", "drafter_<name> folders under --assets")
_ASSETS_DIR = flags.DEFINE_string("assets", str(_ASSETS), "folder with target/ and drafter_*/")
_GAMMAS = flags.DEFINE_list("gammas", "1,3,5,7", "draft lengths")
_TEMPS = flags.DEFINE_list("temperatures", "0,1", "sampling temperatures")
_PROMPTS = flags.DEFINE_integer("prompts", 12, "held-out prompts in the batch-1 queue")
_MAX_NEW = flags.DEFINE_integer("max_new_tokens", 48, "new tokens per prompt at most (rows stop at EOS)")
_REPEATS = flags.DEFINE_integer("repeats", 3, "timed runs per measurement (median; after a compile run)")
_OUT = flags.DEFINE_string("out_dir", "benchmarks/t5_ende", "where tables, JSON and the plot go")
_SEED = flags.DEFINE_integer("seed", 0, "prompt choice and sampling seed")

WIDTH = 64  # every prompt right-padded to this many tokens: one compile per run shape
# arXiv 2211.17192 Table 2 (EnDe, T5-XXL target): drafter, params, temp, best gamma, alpha, measured speed;
# c and the formula's "Exp" from Table 4 / App. A.3 (the same rows scripts/reproduce_walltime.py prints)
PAPER_ROWS = [
    ("T5-small", "77M", 0, 7, 0.75, 0.02, 3.2, 3.4),
    ("T5-base", "250M", 0, 7, 0.80, 0.04, 3.3, 2.8),
    ("T5-large", "800M", 0, 7, 0.82, 0.11, 2.5, 1.7),
    ("T5-small", "77M", 1, 7, 0.62, 0.02, 2.3, 2.6),
    ("T5-base", "250M", 1, 5, 0.68, 0.04, 2.4, 2.4),
    ("T5-large", "800M", 1, 3, 0.71, 0.11, 2.0, 1.4),
]


def held_out_prompts(tok, n: int, seed: int):
  """(prompts_NxWIDTH, lengths_N, english texts): n held-out pairs' encoder inputs, right-padded."""
  pairs = ende.split_pairs()["held_out"]
  rng = np.random.default_rng(seed)
  rows, texts = [], []
  for i in rng.permutation(len(pairs)):
    ids = tok.encode(ende.T5_PREFIX + pairs[i][0])
    if len(ids) <= WIDTH:
      rows.append(ids), texts.append(pairs[i][0])
    if len(rows) == n:
      break
  return seq2seq.pad(rows, WIDTH), np.array([len(r) for r in rows], np.int32), texts


def _fmt_params(n):
  return f"{n / 1e6:.2f}M" if n >= 1e6 else f"{n / 1e3:.0f}K"


def sweep(target, drafters: dict, prompts, lengths, gammas, temps, max_new, repeats, eos_id):
  """Rows of measurements; also the per-gamma v and per-(drafter, temperature) c."""
  one_p, one_l = prompts[:1], lengths[:1]
  max_len = WIDTH + max_new + max(gammas) + 1
  v = {g: measure.verify_cost(target, one_p, one_l, g + 1, max_len, max(3 * repeats, 9))
       for g in range(1, max(gammas) + 1)}
  rows, cs = [], {}
  combos = [(t, d, g) for t in temps for d in drafters for g in gammas]
  for t, name, g in tqdm(combos, desc="T5 EnDe sweep"):
    sampling = specjax.Sampling(t)
    common = dict(max_new_tokens=max_new, sampling=sampling, rng=jax.random.PRNGKey(_SEED.value), eos_id=eos_id,
                  batch_size=1, max_len=max_len)
    drafter = specjax.drafters.DraftModel(drafters[name])
    if (name, t) not in cs:  # one drafter round of 7 drafts / 7, in one-token target steps
      cs[(name, t)] = measure.costs(target, drafter, one_p, one_l, 7, 8, sampling, max_len, max(3 * repeats, 9))[0]
    base, spec, t_base, t_spec = measure.paired_times(
        lambda: specjax.generate(target, prompts, lengths, **common),
        lambda: specjax.speculative_generate(target, drafter, prompts, lengths, gamma=g, **common), repeats)
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


def sweep_table(rows) -> str:
  lines = ["| drafter | params | T | γ | α | tokens/iter | AR tok/s | spec tok/s | speedup | formula | c | v | = AR |",
           "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
  for r in rows:
    same = {True: "yes", False: "**NO**", None: "n/a"}[r["identical_to_autoregressive"]]
    lines.append(f"| {r['drafter']} | {_fmt_params(r['drafter_params'])} | {r['temperature']:g} | {r['gamma']} "
                 f"| {r['alpha']:.3f} | {r['tokens_per_iteration']:.2f} | {r['baseline_tokens_per_s']:.1f} "
                 f"| {r['tokens_per_s']:.1f} | {r['speedup']:.2f}x | {r['predicted_speedup']:.2f}x | {r['c']:.3f} "
                 f"| {r['v']:.2f} | {same} |")
  return "\n".join(lines)


def table2(rows, target_params: int) -> str:
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
  for (_, _), r in sorted(best.items()):
    lines.append(f"| specjax, T5 {_fmt_params(target_params)} (CPU) | {r['drafter']} "
                 f"| {_fmt_params(r['drafter_params'])} (1/{target_params / r['drafter_params']:.0f}) "
                 f"| {r['temperature']:g} | {r['gamma']} | {r['alpha']:.2f} | {r['c']:.3f} "
                 f"| {r['predicted_speedup']:.2f}X | {r['speedup']:.2f}X |")
  return "\n".join(lines)


def plot(rows, v, path):
  import matplotlib  # pylint: disable=import-outside-toplevel
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt  # pylint: disable=import-outside-toplevel
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


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments: {argv[1:]}")
  gammas = [int(g) for g in _GAMMAS.value]
  temps = [float(t) for t in _TEMPS.value]
  if any(g < 1 for g in gammas):
    raise app.UsageError(f"--gammas must be >= 1, got {gammas}")
  assets = pathlib.Path(_ASSETS_DIR.value)
  tok = sentencepiece_tok.load(assets / "target")
  target = checkpoint.load_model(assets / "target")
  drafters = {d: checkpoint.load_model(assets / f"drafter_{d}") for d in _DRAFTERS.value}
  prompts, lengths, texts = held_out_prompts(tok, _PROMPTS.value, _SEED.value)
  t0 = time.time()
  rows, v, cs = sweep(target, drafters, prompts, lengths, gammas, temps, _MAX_NEW.value, _REPEATS.value, tok.eos_id)
  out = pathlib.Path(_OUT.value)
  out.mkdir(parents=True, exist_ok=True)
  plot(rows, v, out / "speedup_vs_gamma.png")
  t2 = table2(rows, target.num_params)
  (out / "table2.md").write_text(t2 + "\n")
  (out / "sweep.md").write_text(sweep_table(rows) + "\n")
  meta = {"target_params": target.num_params, "prompts": len(texts), "max_new_tokens": _MAX_NEW.value,
          "repeats": _REPEATS.value, "v_by_gamma": v, "c": {f"{d}@T{t:g}": c for (d, t), c in cs.items()},
          "wall_s": round(time.time() - t0, 1), "devices": [str(d) for d in jax.devices()], "prompt_texts": texts}
  (out / "results.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=2, ensure_ascii=False) + "\n")
  print(sweep_table(rows))
  print()
  print(t2)
  print(f"wrote {out}/table2.md, sweep.md, results.json, speedup_vs_gamma.png")


if __name__ == "__main__":
  app.run(main)
