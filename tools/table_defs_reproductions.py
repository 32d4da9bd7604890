"""The measured tables of docs/reproductions.md: the walltime formula, the T5 EnDe pair, the dry runs
of TPU-sized pairs (registered like ``tools/table_defs.py``'s)."""
from __future__ import annotations

import re

from table_kit import Sources, Table, f, n, same, t, table, x


@table("walltime", "the walltime formula against measured speedups, demo pair, batch 1 "
       "(python -m specjax.bench walltime)")
def walltime(src: Sources) -> Table:
  d = src.json("benchmarks/walltime/reproduce.json")
  rows = []
  for r in d["rows"]:
    rows.append([r["drafter"], n(r["drafter_params"]), str(r["gamma"]), f(r["alpha"], 3), f(r["c"], 3), f(r["v"]),
                 f(r["tokens_per_iteration"]), x(r["predicted_speedup"]), x(r["speedup"]), f(r["efficiency"]),
                 same(r["identical_to_autoregressive"], r["temperature"])])
  return Table(["drafter", "params", "γ", "α", "c", "v", "tokens/iter", "formula", "measured", "measured / formula",
                "= AR"], rows)


@table("t5_best", "T5 EnDe pair trained here: best γ per drafter and temperature "
       "(python -m specjax.bench walltime --t5_ende)")
def t5_best(src: Sources) -> Table:
  d = src.json("benchmarks/t5_ende/results.json")
  target = d["meta"]["target_params"]
  rows = []
  for drafter in dict.fromkeys(r["drafter"] for r in d["rows"]):
    for temp in (0.0, 1.0):
      group = [r for r in d["rows"] if r["drafter"] == drafter and r["temperature"] == temp]
      if not group:
        continue
      r = max(group, key=lambda r: r["speedup"])
      rows.append([drafter, f"{n(r['drafter_params'])} (1/{target / r['drafter_params']:.0f})", t(temp),
                   str(r["gamma"]), f(r["alpha"]), f(r["c"], 3), x(r["predicted_speedup"]), x(r["speedup"]),
                   same(all(g["identical_to_autoregressive"] for g in group), temp)])
  return Table(["drafter", "params (ratio)", "T", "best γ", "α", "c", "formula", "measured", "= AR (every γ)"], rows,
               note=f"Target {target:,} params; every γ of the sweep: "
                    "[benchmarks/t5_ende/sweep.md](@/benchmarks/t5_ende/sweep.md).")


@table("t5_chrf", "translation quality of the T5 EnDe pair (sacrebleu chrF)")
def t5_chrf(src: Sources) -> Table:
  d = src.json("benchmarks/t5_ende/chrf.json")
  rows = []
  for key in ("target", "drafter_small", "drafter_base", "drafter_large"):
    rec = src.json(f"specjax/assets/t5_ende/{key}/training.json")
    held = rec.get("held_out_after") or rec.get("held_out") or {}
    alpha = held.get("alpha_t1")
    rows.append([key, n(rec["params"]), f(d[key]["chrF"], 1), n(rec["steps"]), n(rec["train_pairs"]),
                 "–" if alpha is None else f(alpha)])
  return Table(["model", "params", f"chrF on {d['pairs']} held-out pairs", "steps (last run)", "training pairs",
                "teacher-forced α at T=1"], rows)


@table("t5_history", "the T5 EnDe target at each stage of its training: chrF and best measured speedup")
def t5_history(src: Sources) -> Table:
  rows = []
  stages = sorted(src.glob("benchmarks/t5_ende/step*/chrf.json"), key=lambda p: int(re.sub(r"\D", "", p.split("/")[-2])))
  for rel in [*stages, "benchmarks/t5_ende/chrf.json"]:
    folder = rel.rsplit("/", 1)[0]
    name = folder.rsplit("/", 1)[-1]
    label = f"step {int(name[4:]):,}" if name.startswith("step") else "shipped"
    chrf = src.json(rel)
    results = src.json(f"{folder}/results.json")["rows"]
    greedy = [r for r in results if r["temperature"] == 0.0]
    best = max(greedy, key=lambda r: r["speedup"])
    rows.append([label, f(chrf["target"]["chrF"], 1), str(chrf["pairs"]),
                 f"{x(best['speedup'])} ({best['drafter']}, γ {best['gamma']})"])
  return Table(["target", "chrF", "held-out pairs", "best greedy speedup (drafter, γ)"], rows)


@table("t5_examples", "the shipped T5 EnDe target's greedy translations of held-out strings")
def t5_examples(src: Sources) -> Table:
  d = src.json("benchmarks/t5_ende/chrf.json")
  code = lambda s: "`" + s.replace("`", "'").replace("\n", "\\n").strip() + "`"  # noqa: E731
  rows = [[code(e["en"]), code(e["ref"]), code(e["hyp"])] for e in d["target"]["examples"][:6]]
  return Table(["English", "reference", "target's greedy output"], rows)


@table("dryrun_chen", "latency-aware dry run of Chinchilla 70B / 4B against Chen et al.'s published step times")
def dryrun_chen(src: Sources) -> Table:
  d = src.json("benchmarks/dryrun/chinchilla70b_4b.json")
  variants = list(d["published_vs_predicted"][0]["predicted_ms"])
  rows = []
  for p in d["published_vs_predicted"]:
    cells = [f"{f(p['predicted_ms'][k]['ms'])} ({p['predicted_ms'][k]['error']:+.0%})" for k in variants]
    rows.append([f"{p['step']} step ({p['role']})", f(p["published_ms"], 1), f(p["bandwidth_only_ms"]), *cells])
  return Table(["ms per token, 16 TPU v4, batch 1", "published", "bandwidth only", *variants], rows,
               note=f"Published: {d['published_vs_predicted'][0]['source']}; {d['published_vs_predicted'][1]['source']}. "
                    f"At α {d['alpha']} and γ {d['gamma']} the formula gives {x(d['predicted_speedup'])} "
                    f"({f(d['predicted_sd_ms_per_token'])} ms/token); the paper measured "
                    f"{x(d['paper']['chen2023']['speedup_greedy_xsum'])} "
                    f"({f(d['paper']['chen2023']['sps_greedy_xsum_ms_per_token'], 1)} ms/token, greedy XSum).")


@table("dryrun_pairs", "dry runs of TPU-sized pairs: memory, collectives, step times, predicted speedup")
def dryrun_pairs(src: Sources) -> Table:
  rows = []
  for stem, config in (("chinchilla70b_4b", "chinchilla70b_4b.py"), ("llama3_70b_8b", "llama3_70b_8b.py"),
                       ("llama3_70b_8b_wide", "llama3_70b_8b.py:wide"), ("gemma3_27b_270m", "gemma3_27b_270m.py"),
                       ("gemma3_27b_270m_1b", "gemma3_27b_270m.py:1b")):
    d = src.json(f"benchmarks/dryrun/{stem}.json")
    gb = lambda b: f"{b / 1e9:.2f}"  # noqa: E731
    rows.append([f"`{config}`", f"{d['num_devices']} {d['hardware']} ({d['mesh']})",
                 f"{gb(d['per_device_param_bytes'])} + {gb(d['per_device_kv_cache_bytes'])} of {gb(d['hbm_bytes'])}",
                 f"{d['collectives_per_target_step']} / {d['collectives_per_draft_step']}", f(d["target_step_ms"]),
                 f(d["draft_step_ms"]), f(d["c"]), f(d["alpha"]), x(d["predicted_speedup"])])
  return Table(["config", "devices (mesh)", "GB per chip: params + KV of HBM", "collectives target / draft",
                "target ms", "draft ms", "c", "α (assumed)", "predicted speedup"], rows)
