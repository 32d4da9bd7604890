"""Rewrite the measured tables in README.md and docs/*.md from the benchmark JSON files they cite.

  python -m specjax.bench tables            # rewrite every table region in place
  python -m specjax.bench tables --check    # exit 1 if a file differs from what this would write
  python -m specjax.bench tables --list     # the table names and the files each one reads

A table region is the text between ``<!-- table:NAME -->`` and ``<!-- /table:NAME -->`` in README.md
or a docs/*.md page; everything between the two markers is replaced by table NAME, rendered from
its JSON files (``benchmarks/**/*.json`` and the ``training.json`` records beside shipped weights)
and followed by links to those files. Text outside the markers is never touched, so the prose
around a table says what to read in it and the numbers themselves only ever come from here.
``benchmarks/runs/*.json`` (written by ``python -m specjax.run --json_out=...``) each add a row
to the README's summary table. Reads JSON only: no JAX, no models.
"""
from __future__ import annotations

import argparse
import dataclasses
import difflib
import glob
import json
import os
import pathlib
import re
import sys
from typing import Callable

ROOT = pathlib.Path(__file__).resolve().parent.parent.parent
REGION = re.compile(r"<!-- table:([A-Za-z0-9_-]+) -->\n(.*?)<!-- /table:\1 -->", re.S)
OPEN = re.compile(r"<!-- table:([A-Za-z0-9_-]+) -->")
CLOSE = re.compile(r"<!-- /table:([A-Za-z0-9_-]+) -->")


class TableError(ValueError):
  """A table that cannot be rendered (a missing JSON file or key) or a malformed region."""


@dataclasses.dataclass
class Table:
  """A header, rows of cell texts, and a note under the table. A link written ``[text](@/path)``
  (in a cell or the note) is to ``path`` from the repository root; rendering makes it relative."""
  header: list
  rows: list
  note: str = ""
  data_line: bool = True  # False: the rows link their own files


class Sources:
  """Loads JSON files relative to the repository root and remembers which ones a table read."""

  def __init__(self, root: pathlib.Path):
    self.root = root
    self.used: list[str] = []

  def json(self, rel: str):
    path = self.root / rel
    if not path.is_file():
      raise TableError(f"{rel}: not found (a table reads it)")
    if rel not in self.used:
      self.used.append(rel)
    return json.loads(path.read_text(encoding="utf-8"))

  def glob(self, pattern: str) -> list[str]:
    return sorted(os.path.relpath(p, self.root) for p in glob.glob(str(self.root / pattern)))


TABLES: dict[str, tuple[Callable[[Sources], Table], str]] = {}


def table(name: str, about: str):
  def register(fn):
    TABLES[name] = (fn, about)
    return fn
  return register


# ---------------------------------------------------------------------------------------------- formats

def x(v, digits: int = 2) -> str:
  return "–" if v is None else f"{v:.{digits}f}x"


def f(v, digits: int = 2) -> str:
  return "–" if v is None else f"{v:.{digits}f}"


def n(v) -> str:
  return "–" if v is None else f"{int(v):,}"


def same(v, temperature=0.0) -> str:
  """Whether a run gave the autoregressive tokens; a sampled run has nothing to compare."""
  if temperature and temperature > 0:
    return "n/a"
  return {True: "yes", False: "NO", None: "n/a"}[v]


def t(v) -> str:
  return f"{float(v):g}"


def minutes(seconds) -> str:
  return "–" if seconds is None else f"{seconds / 60:.0f} min"


def row_of(rows, **match):
  found = [r for r in rows if all(r.get(k) == v for k, v in match.items())]
  if len(found) != 1:
    raise TableError(f"expected one row with {match}, found {len(found)}")
  return found[0]


# ---------------------------------------------------------------------------------------------- README

@table("summary", "README: where speculation pays and where it does not, one row per setting")
def summary(src: Sources) -> Table:
  rows = []
  fam = src.json("benchmarks/families/families.json")["rows"]
  for family, label, b, temp in (("draft_model", "draft model", 1, 0.0), ("draft_model", "draft model", 1, 1.0),
                                 ("draft_model", "draft model", 8, 0.0),
                                 ("specinfer_sparse", "SpecInfer token tree", 1, 0.0),
                                 ("ngram", "n-gram prompt lookup", 1, 0.0)):
    r = row_of(fam, family=family, batch_size=b, temperature=temp)
    if r["drafter_params"]:
      label += f", {r['drafter_params'] / 1e6:.2f}M params"
    if r["drafted_nodes"] != r["gamma"]:
      label += f", {r['drafted_nodes']} nodes"
    rows.append(["demo pair (byte-level Python code)", label, "held-out stdlib code", str(b), t(temp),
                 x(r["speedup"]), f(r["tokens_per_iteration"]), same(r["identical_to_autoregressive"], temp),
                 "benchmarks/families/families.json"])
  sb = src.json("benchmarks/specbench/smollm2_ngram_b1_t0.json")
  cfg = sb["config"]
  for name, r in sb["drafters"].items():
    o = r["overall"]
    rows.append(["SmolLM2-135M-Instruct", f"n-gram, {name.split()[-1]} draft length (γ {r['gamma']})",
                 f"Spec-Bench-format suite, {cfg['num_questions']} questions in {len(sb['categories'])} categories",
                 str(cfg["batch_size"]), t(cfg["temperature"]), x(o["speedup"]), f(o["tokens_per_iteration"]),
                 same(o["identical_to_autoregressive"], cfg["temperature"]),
                 "benchmarks/specbench/smollm2_ngram_b1_t0.json"])
  real = src.json("benchmarks/real/real.json")["rows"]
  r = row_of(real, family="ngram", batch_size=1, temperature=0.0)
  rows.append(["SmolLM2-135M-Instruct", "n-gram prompt lookup", "held-out code, translation, English", "1", "0",
               x(r["speedup"]), f(r["tokens_per_pass"]), same(r["identical_at_t0"]), "benchmarks/real/real.json"])
  trained = [r for r in real if r["family"] != "ngram" and r["batch_size"] == 1 and r["temperature"] == 0.0
             and "typical" not in r["family"]]
  best = max(trained, key=lambda r: r["speedup"])
  rows.append(["SmolLM2-135M-Instruct", f"best of the {len(trained)} other drafters tried: {best['family']}",
               "held-out code, translation, English", "1", "0", x(best["speedup"]), f(best["tokens_per_pass"]),
               same(best["identical_at_t0"]), "benchmarks/real/real.json"])
  gem = row_of(src.json("benchmarks/real_gemma/real.json")["rows"], family="ngram", batch_size=1, temperature=0.0)
  rows.append(["Gemma 3 270M (base)", "n-gram prompt lookup", "held-out code, translation, English", "1", "0",
               x(gem["speedup"]), f(gem["tokens_per_pass"]), same(gem["identical_at_t0"]),
               "benchmarks/real_gemma/real.json"])
  t5_run = src.json("benchmarks/t5_ende/results.json")
  r = max((r for r in t5_run["rows"] if r["temperature"] == 0.0), key=lambda r: r["speedup"])
  rows.append([f"T5 v1.1 EnDe, {t5_run['meta']['target_params'] / 1e6:.1f}M (trained here)", f"T5 drafter '{r['drafter']}' (γ {r['gamma']}, best of sweep)",
               "held-out gettext strings", "1", "0", x(r["speedup"]), f(r["tokens_per_iteration"]),
               same(r["identical_to_autoregressive"]), "benchmarks/t5_ende/results.json"])
  for rel in src.glob("benchmarks/runs/*.json"):  # python -m specjax.run --json_out=benchmarks/runs/NAME.json
    r = src.json(rel)
    temp = r.get("temperature", 0.0)
    rows.append([str(r.get("target")), f"{r.get('drafter')} (γ {r.get('gamma')})",
                 f"{r.get('num_prompts', 1)} prompt(s), `{r.get('config', 'specjax.run')}`",
                 str(r.get("batch_size")), t(temp), x(r.get("speedup")), f(r.get("tokens_per_iteration")),
                 same(r.get("identical_to_autoregressive"), temp), rel])
  body = [r[:-1] + [f"[json](@/{r[-1]})"] for r in rows]
  return Table(["target", "drafter", "prompts", "batch", "T", "speedup", "tokens / target pass",
                "= target alone", "data"], body,
               note="Generated by `python -m specjax.bench tables` from the linked files.", data_line=False)


# ---------------------------------------------------------------------------------------------- docs/results.md

@table("specbench", "Spec-Bench-format suite on SmolLM2-135M: speedup per category")
def specbench(src: Sources) -> Table:
  d = src.json("benchmarks/specbench/smollm2_ngram_b1_t0.json")
  groups = d["categories"]
  rows = []
  for name, r in d["drafters"].items():
    o = r["overall"]
    rows.append([f"{name} (γ {r['gamma']})", *(x(r["categories"][g]["speedup"]) for g in groups), x(o["speedup"]),
                 f(o["tokens_per_iteration"]), f(o["alpha"], 3), f(o["tokens_per_s"], 1),
                 f(o["baseline_tokens_per_s"], 1), same(o["identical_to_autoregressive"], d["config"]["temperature"])])
  return Table(["drafter", *groups, "overall", "accepted / call", "α", "tok/s", "AR tok/s", "= AR"], rows)


def _families(src: Sources, rel: str) -> Table:
  rows = []
  for r in src.json(rel)["rows"]:
    temp = r["temperature"]
    name = r["family"] + (" (lossy)" if r.get("lossy") else "")
    rows.append([name, str(r["batch_size"]), t(temp), str(r["gamma"]), str(r["drafted_nodes"]), n(r["drafter_params"]),
                 f(r["c"], 3), f(r["v"]), f(r["alpha"], 3), f(r["tokens_per_iteration"]),
                 f(r["baseline_tokens_per_s"], 1), f(r["tokens_per_s"], 1), x(r["speedup"]), x(r["expected_speedup"]),
                 same(r["identical_to_autoregressive"], temp)])
  return Table(["family", "B", "T", "γ", "drafted nodes", "drafter params", "c", "v", "α", "tokens/iter",
                "AR tok/s", "spec tok/s", "speedup", "expected", "= AR"], rows)


@table("families", "every drafter family on the demo target (python -m specjax.bench families)")
def families(src: Sources) -> Table:
  return _families(src, "benchmarks/families/families.json")


@table("families_lossy", "lossy relaxations on the demo target, flagged")
def families_lossy(src: Sources) -> Table:
  return _families(src, "benchmarks/families/lossy/families.json")


@table("eagle", "EAGLE-3 head: chain, static tree, EAGLE-2 dynamic tree, beside MTP")
def eagle(src: Sources) -> Table:
  rows = []
  for r in src.json("benchmarks/eagle/families.json")["rows"]:
    temp = r["temperature"]
    kept = " / ".join(f"{p:.2f}" for p in r["acceptance_per_position"])
    rows.append([r["family"], str(r["batch_size"]), t(temp), str(r["gamma"]), str(r["drafted_nodes"]), kept,
                 f(r["tokens_per_iteration"]), f(r["c"], 3), f(r["v"]), f(r["batch_utilization"]),
                 x(r["speedup"]), same(r["identical_to_autoregressive"], temp)])
  return Table(["drafter", "B", "T", "γ", "nodes", "P(kept) at depth 1..γ", "tokens/pass", "c", "v", "utilization",
                "speedup", "= AR"], rows)


@table("gamma_sweep", "an earlier gamma sweep of the demo pair on a loaded machine (python -m specjax.bench gamma)")
def gamma_sweep(src: Sources) -> Table:
  rows = []
  for r in src.json("benchmarks/results/results.json")["rows"]:
    temp = r["temperature"]
    rows.append([r["drafter"], str(r["batch_size"]), t(temp), str(r["gamma"]), f(r["baseline_tokens_per_s"], 1),
                 f(r["tokens_per_s"], 1), x(r["speedup"]), x(r["predicted_speedup"]), f(r["alpha"], 3),
                 f(r["alpha_iid"], 3), f(r["mean_accepted"]), f(r["c"], 3), f(r["v"]),
                 same(r["identical_to_autoregressive"], temp)])
  return Table(["drafter", "B", "T", "γ", "AR tok/s", "spec tok/s", "speedup", "formula", "α", "α iid",
                "mean accepted", "c", "v", "= AR"], rows)


def _compare_hf(src: Sources, rel: str) -> Table:
  d = src.json(rel)
  rows = [[str(r["batch_size"]), r["method"], f(r["tokens_per_s"], 1), same(r["identical_to_hf_greedy"]),
           n(r["target_calls"]), f(r["mean_accepted"]), r.get("note") or ""] for r in d["rows"]]
  m = d["meta"]
  note = (f"target {m['target_params']:,} params, drafter {m['drafter_params']:,}; greedy, {m['max_new_tokens']} new "
          f"tokens per row, median of {m['repeats']}; torch threads {m['torch_threads']}, jax {m['jax']}, "
          f"transformers {m['transformers']}.")
  return Table(["batch", "method", "tok/s", "same tokens as transformers greedy", "target calls", "mean accepted",
                "note"], rows, note=note)


@table("compare_hf", "the demo pair in specjax and in Hugging Face transformers, torch 1 thread")
def compare_hf(src: Sources) -> Table:
  return _compare_hf(src, "benchmarks/compare_hf/compare_hf.json")


@table("compare_hf_torch2", "the same comparison with torch on 2 threads")
def compare_hf_torch2(src: Sources) -> Table:
  return _compare_hf(src, "benchmarks/compare_hf/compare_hf_torch2threads.json")


@table("refill", "continuous refill at batch 8 against static batches (python -m specjax.bench batch)")
def refill(src: Sources) -> Table:
  d = src.json("benchmarks/batch/bench_batch.json")
  rows = [[r["decoder"], n(r["tokens"]), f(r["static_tok_s"], 1), f(r["refill_tok_s"], 1), x(r["gain"]),
           f(r["static_utilization"], 3), f(r["refill_utilization"], 3), same(r["same_tokens"])] for r in d["refill"]]
  return Table(["decoder", "tokens", "static tok/s", "refill tok/s", "gain", "static util.", "refill util.",
                "same tokens"], rows, note=d["header"] + ".")


@table("batch_sweep", "speedup against batch size with refill on (python -m specjax.bench batch)")
def batch_sweep(src: Sources) -> Table:
  d = src.json("benchmarks/batch/bench_batch.json")
  rows = [[str(r["batch"]), r["drafter"], f(r["ar_tok_s"], 1), f(r["spec_tok_s"], 1), x(r["speedup"]),
           x(r["predicted"]), f(r["alpha"], 3), f(r["tokens_per_iteration"]), f(r["c"], 3), f(r["v"]),
           f(r["utilization"], 3), same(r["same_tokens"])] for r in d["sweep"]]
  return Table(["B", "drafter", "AR tok/s", "spec tok/s", "speedup", "predicted", "α", "tokens/iter", "c", "v",
                "util.", "= AR"], rows)


@table("profile", "one decode step piece by piece, demo pair and SmolLM2 (python -m specjax.bench profile)")
def profile(src: Sources) -> Table:
  rows = []
  for label, rel in (("demo pair", "benchmarks/profile/profile_demo.json"),
                     ("SmolLM2-135M, n-gram", "benchmarks/profile/profile_smollm2.json")):
    d = src.json(rel)
    for r in d["rows"]:
      rows.append([label, str(r["batch"]), f(r["ar_ms_per_step"]), f(r["minimal_ms_per_step"]), f(r["ar_over_minimal"]),
                   f(r["draft_ms"]), f(r["verify_ms"]), f(r["accept_ms"], 3), f(r["commit_ms"], 3), f(r["pieces_ms"]),
                   f(r["iteration_in_loop_ms"]), f(r["v"])])
  return Table(["model", "batch", "generate ms/step", "minimal loop ms/step", "generate / minimal", "draft ms",
                "verify ms", "accept ms", "commit ms", "sum of pieces ms", "iteration in the loop ms", "v"], rows,
               note="Speculative pieces at the profile's gamma; times in ms, median of the profile's repeats.")


@table("large_vocab", "per-step and per-iteration cost at V = 4,096 and 262,144, before and after (tiny decoders)")
def large_vocab(src: Sources) -> Table:
  rows = []
  for vocab in (4096, 262144):
    before = src.json(f"benchmarks/large_vocab/before_v{vocab}.json")["rows"]
    after = src.json(f"benchmarks/large_vocab/after_v{vocab}.json")["rows"]
    for b in before:
      a = row_of(after, sampling=b["sampling"])
      rows.append([n(vocab), b["sampling"], f"{f(b['ar_ms'], 1)} → {f(a['ar_ms'], 1)}",
                   f"{f(b['chain_spec_ms'], 0)} → {f(a['chain_spec_ms'], 0)} ({f(a['chain_floor_ms'], 0)})",
                   f"{f(b['tree_spec_ms'], 0)} → {f(a['tree_spec_ms'], 0)} ({f(a['tree_floor_ms'], 0)})"])
  return Table(["vocab", "sampling", "AR step ms, before → after", "chain iteration ms (floor after)",
                "tree iteration ms (floor after)"], rows)


@table("large_vocab_gemma", "the same costs on Gemma 3 270M itself, batch 1 and 8")
def large_vocab_gemma(src: Sources) -> Table:
  rows = []
  for b in (1, 8):
    d = src.json(f"benchmarks/large_vocab/gemma3_b{b}.json")
    for r in d["rows"]:
      rows.append([str(d["meta"]["batch"]), r["sampling"], f(r["ar_ms"], 1),
                   f"{f(r['chain_spec_ms'], 1)} ({f(r['chain_floor_ms'], 1)})",
                   f"{f(r['tree_spec_ms'], 1)} ({f(r['tree_floor_ms'], 1)})"])
  return Table(["batch", "sampling", "AR step ms", "chain γ 7 iteration ms (floor)", "21-node tree iteration ms (floor)"],
               rows)


@table("real_vs_hf", "SmolLM2 and Gemma 3 in specjax and in transformers, same GGUF "
       "(python -m specjax.bench hf --real)")
def real_vs_hf(src: Sources) -> Table:
  d = src.json("benchmarks/real_models/compare_hf_real.json")
  rows = []
  for model in d["meta"]["models"]:
    for b in d["meta"]["batch_sizes"]:
      group = [r for r in d["rows"] if r["model"] == model and r["batch_size"] == b]
      best = row_of(group, is_best_transformers=True)
      gen = row_of(group, method="specjax generate")
      spec = [r for r in group if r["method"].startswith("specjax speculative")][0]
      rows.append([model, str(b), f"{f(best['tokens_per_s'], 1)} ({best['method'].split('(')[-1].rstrip(')')})",
                   f"{f(gen['tokens_per_s'], 1)} ({x(gen['ratio_vs_transformers_best'])})",
                   f"{f(spec['tokens_per_s'], 1)} ({x(spec['ratio_vs_transformers_best'])})",
                   f(spec["tokens_per_iteration"]), same(all(r["identical_to_hf_greedy"] for r in group))])
  return Table(["model", "batch", "transformers best tok/s", "specjax generate tok/s", "specjax n-gram (γ 4) tok/s",
                "tokens per target call", "every row = transformers greedy"], rows)


def _real(src: Sources, rel: str) -> Table:
  rows = []
  for r in src.json(rel)["rows"]:
    temp = r["temperature"]
    name = r["family"] + (f" (K={r['k']})" if r.get("k") else "")
    lossy = "typical" in r["family"]
    rows.append([name, str(r["batch_size"]), t(temp), str(r["gamma"]), n(r["drafter_params"]), f(r["alpha"], 3),
                 f(r["tokens_per_pass"]), f(r["c"], 3), f(r.get("c_full_vocab"), 3), f(r["v"]), f(r["ar_tok_s"], 1),
                 f(r["spec_tok_s"], 1), x(r["speedup"]), x(r["expected_speedup"]), x(r["formula_speedup"]),
                 "LOSSY" if lossy else same(r["identical_at_t0"], temp)])
  return Table(["drafter", "B", "T", "γ", "params", "α", "tokens/pass", "c", "c (full V)", "v", "AR tok/s",
                "spec tok/s", "speedup", "expected", "formula", "= AR at T=0"], rows)


@table("real_families", "every drafter family trained for SmolLM2-135M, held-out prompts "
       "(python -m specjax.bench families --target)")
def real_families(src: Sources) -> Table:
  return _real(src, "benchmarks/real/real.json")


@table("real_eagle", "SmolLM2-135M with its EAGLE-3 head, chain and dynamic tree, beside n-gram")
def real_eagle(src: Sources) -> Table:
  return _real(src, "benchmarks/real_eagle/real.json")


@table("gemma_families", "Gemma 3 270M: n-gram and Medusa heads")
def gemma_families(src: Sources) -> Table:
  return _real(src, "benchmarks/real_gemma/real.json")


@table("real_peers", "SmolLM2-135M beside transformers and llama.cpp, batch 1 (python -m specjax.bench peers)")
def real_peers(src: Sources) -> Table:
  d = src.json("benchmarks/real_peers/peers.json")
  rows = []
  for r in d["rows"]:
    method = r["method"] + (f"; {f(r['tokens_per_pass'])} tokens/pass" if r.get("tokens_per_pass") else "")
    agree = same(r["identical_to_transformers_greedy"])
    if not r["identical_to_transformers_greedy"]:
      agree += f" ({r['token_agreement']:.0%} of positions agree)"
    rows.append([method, f(r["tok_s"], 1), x(r["vs_specjax_ar"]), x(r["vs_transformers_best"]), agree])
  return Table(["method", "tok/s", "vs specjax generate", "vs transformers generate (best)", "= transformers greedy"],
               rows)


# ---------------------------------------------------------------------------------------------- docs/reproductions.md

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


# ---------------------------------------------------------------------------------------------- docs/training.md

@table("training_demo", "the demo pair and its heads: size, training, held-out result (training.json beside the weights)")
def training_demo(src: Sources) -> Table:
  rows = []
  tgt = src.json("specjax/assets/demo/target/training.json")
  rows.append(["target (`demo/target`)", n(tgt["params"]), f"{n(tgt['train_tokens'])} tokens", minutes(tgt["wall_s"]),
               f"{f(tgt['held_out_bits_per_byte'])} bits/byte"])
  dr = src.json("specjax/assets/demo/drafter/training.json")
  kd, seq = dr["kd_stage"], dr["seqkd_stage"]
  rows.append(["draft model (`demo/drafter`): KD stage", n(kd["params"]), f"{n(kd['train_tokens'])} tokens",
               minutes(kd["wall_s"]), f"{f(kd['held_out_bits_per_byte'])} bits/byte; greedy agreement "
               f"{f(kd['held_out_after']['greedy_agreement'], 3)}, α(T=1) {f(kd['held_out_after']['alpha_t1'], 3)}"])
  after = seq["held_out_after"]
  rows.append(["draft model: sequence-level KD stage", n(seq["params"]), f"{n(seq['train_tokens'])} tokens",
               minutes(seq["wall_s"]), f"{f(seq['held_out_bits_per_byte'])} bits/byte; greedy agreement "
               f"{f(after['corpus']['greedy_agreement'], 3)} on corpus text, "
               f"{f(after['generated']['greedy_agreement'], 3)} on target-generated text"])
  med = src.json("specjax/assets/demo/medusa/config.json")
  rows.append([f"Medusa-1, {med['config']['num_heads']} heads (`demo/medusa`)", "–",
               f"{n(med['steps'])} steps on {med['train_sequences']} generated sequences", minutes(med["wall_s"]),
               "top-1 per head " + " / ".join(f"{v:.3f}" for v in med["held_out_top1_after"])
               + " (untrained copies of the LM head: " + " / ".join(f"{v:.2f}" for v in med["held_out_top1_before"]) + ")"])
  for name, label in (("mtp", "shared MTP head (`demo/mtp`)"), ("eagle", "EAGLE-3 head (`demo/eagle`)"),
                      ("dflash", "DFlash block drafter (`demo/dflash`)")):
    rec = src.json(f"specjax/assets/demo/{name}/training.json")
    acc = rec["acceptance_greedy"]
    lengths = ", ".join(f"{acc[k]['acceptance_length']:.2f}" for k in sorted(acc, key=int))
    rows.append([label, n(rec["params"]), f"{n(rec['steps'])} steps", minutes(rec["train_wall_s"]),
                 f"acceptance length at draft lengths {', '.join(sorted(acc, key=int))}: {lengths}"])
  return Table(["model", "params", "training", "wall", "held-out result"], rows)


@table("training_real", "drafters trained for SmolLM2-135M and Gemma 3 270M (training.json beside the weights)")
def training_real(src: Sources) -> Table:
  rows = []
  d = src.json("specjax/assets/smollm2/draft_lm/training.json")
  rows.append(["`smollm2/draft_lm`: draft model", d["target"], n(d["stored_params"]),
               f"{n(d['config']['out_vocab'])} ({d['subset_coverage_held_out']:.1%} of held-out tokens)",
               f"{n(d['train_target_tokens'])} generated + {n(d['teacher_labelled_tokens'])} labelled tokens",
               f"{d['steps']} x {d['batch_size']}", minutes(d["wall_s"]),
               f"greedy agreement {f(d['held_out_after']['greedy_agreement'])}"])
  for rel, label in (("smollm2/mtp", "shared MTP head"), ("smollm2/medusa", "Medusa-1 heads"),
                     ("gemma3/medusa", "Medusa-1 heads")):
    d = src.json(f"specjax/assets/{rel}/training.json")
    result = f"accept length {f(d['held_out_after']['accept_len'])}"
    heads = [d["held_out_after"][k] for k in sorted(d["held_out_after"]) if k.startswith("head")]
    if heads:
      result += "; head top-1 " + " / ".join(f"{h:.2f}" for h in heads)
    rows.append([f"`{rel}`: {label}", d["target"], n(d["params"]),
                 f"{n(d['k'])} ({d['subset_coverage']:.1%} of generated tokens)",
                 f"{n(d['train_rows'])} generated sequences, {d['crop']}-token crops",
                 f"{d['steps']} x {d['batch']}", minutes(d["wall_s"]), result])
  return Table(["shipped as", "target", "stored params", "draft vocabulary K", "data", "steps x rows", "wall",
                "held-out, teacher-forced"], rows)


# ---------------------------------------------------------------------------------------------- rendering

def render(name: str, root: pathlib.Path, page_dir: pathlib.Path) -> str:
  """Table ``name`` as markdown, its links relative to ``page_dir`` (the folder of the page it goes in)."""
  if name not in TABLES:
    raise TableError(f"unknown table {name!r}; known: {', '.join(sorted(TABLES))}")
  src = Sources(root)
  tab = TABLES[name][0](src)
  rel = lambda p: pathlib.Path(os.path.relpath(root / p, page_dir)).as_posix()  # noqa: E731
  links = lambda text: re.sub(r"\]\(@/(.*?)\)", lambda m: f"]({rel(m.group(1))})", str(text))  # noqa: E731
  cells = lambda row: "| " + " | ".join(links(c).replace("|", "\\|") for c in row) + " |"  # noqa: E731
  lines = [cells(tab.header), "|" + "---|" * len(tab.header), *map(cells, tab.rows)]
  data = ", ".join(f"[{p}]({rel(p)})" for p in src.used)
  lines += ["", " ".join(filter(None, [links(tab.note), f"Data: {data}." if tab.data_line else ""]))]
  return "\n".join(lines) + "\n\n"


def rewrite(text: str, root: pathlib.Path, page_dir: pathlib.Path, where: str = "") -> str:
  opened, closed = OPEN.findall(text), CLOSE.findall(text)
  if opened != closed:
    raise TableError(f"{where}: table markers do not pair up (opened {opened}, closed {closed})")
  return REGION.sub(lambda m: f"<!-- table:{m.group(1)} -->\n{render(m.group(1), root, page_dir)}"
                              f"<!-- /table:{m.group(1)} -->", text)


def pages(root: pathlib.Path) -> list[pathlib.Path]:
  return [p for p in [root / "README.md", *sorted((root / "docs").glob("*.md"))] if p.is_file()]


def main(argv) -> int:
  parser = argparse.ArgumentParser(prog=argv[0] if argv else "tables", description=__doc__.split("\n")[0])
  parser.add_argument("--check", action="store_true", help="exit 1 if a file differs from what would be written")
  parser.add_argument("--list", action="store_true", help="list the tables and the files they read")
  parser.add_argument("--root", default=str(ROOT), help="repository root (README.md, docs/, benchmarks/)")
  args = parser.parse_args(argv[1:])
  root = pathlib.Path(args.root).resolve()
  if args.list:
    for name, (fn, about) in sorted(TABLES.items()):
      src = Sources(root)
      try:
        fn(src)
        used = ", ".join(src.used)
      except TableError as e:
        used = f"cannot render: {e}"
      print(f"{name}: {about}\n    reads {used}")
    return 0
  stale, seen = [], set()
  try:
    for page in pages(root):
      text = page.read_text(encoding="utf-8")
      seen.update(OPEN.findall(text))
      new = rewrite(text, root, page.parent, where=str(page.relative_to(root)))
      if new == text:
        continue
      stale.append(page)
      if args.check:
        diff = difflib.unified_diff(text.splitlines(), new.splitlines(), str(page.relative_to(root)), "generated",
                                    lineterm="", n=0)
        print("\n".join(list(diff)[:40]))
      else:
        page.write_text(new, encoding="utf-8")
  except TableError as e:
    print(f"tables: {e}", file=sys.stderr)
    return 2
  names = ", ".join(p.relative_to(root).as_posix() for p in stale)
  if args.check:
    if stale:
      print(f"tables: out of date in {names}; run python -m specjax.bench tables", file=sys.stderr)
      return 1
    print(f"tables: {len(seen)} tables up to date")
    return 0
  print(f"tables: rewrote {names}" if stale else f"tables: {len(seen)} tables already up to date")
  return 0


if __name__ == "__main__":
  sys.exit(main(sys.argv))
