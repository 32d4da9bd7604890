"""The own-text drafters' tables (docs/results.md, README summary rows): Spec-Bench's own questions,
``python -m specjax.bench specbench --questions=<Spec-Bench>/data/spec_bench/question.jsonl``, the
JSON files in ``benchmarks/owntext/``."""
from __future__ import annotations

import ast

from table_kit import TARGET_NAMES, Sources, Table, drafter_label, drafter_setting, f, n, same, t, table, x

PATTERN = "benchmarks/owntext/*.json"


def label(name: str, row: dict) -> str:
  """The row's drafter in words, with its corpus and non-default memory settings."""
  words, options = drafter_label(name), row.get("options") or {}
  if options.get("paths"):  # a template of its own: its node count
    words += f", {len(ast.literal_eval(str(options['paths'])))}-node tree"
  if options.get("corpus"):
    words += " + corpus of the target's answers"
  if options.get("learn_from") == "tree":
    words += ", learning from every scored node"
  return f"{words} ({drafter_setting(row)})"


def prompts(cfg: dict, groups) -> str:
  return f"Spec-Bench question.jsonl (held out), {cfg['num_questions']} questions in {len(groups)} groups"


def rows_of(src: Sources):
  """``(rel, result, target name, drafter name, drafter result)`` for every row of every file."""
  for rel in src.glob(PATTERN):
    d = src.json(rel)
    for name, r in d["drafters"].items():
      yield rel, d, TARGET_NAMES.get(d["config"]["target"], d["config"]["target"]), name, r


def formula(d: dict, name: str, agg: dict):
  """The row's formula; a fixed-length row (every round verifies the whole draft) takes the widest
  round cost its adaptive twin in the same file measured."""
  if agg.get("predicted_speedup") is not None or not name.endswith(" fixed"):
    return agg.get("predicted_speedup")
  twin = d["drafters"].get(name[:-len(" fixed")] + " adaptive") or {}
  costs = (twin.get("adaptive") or {}).get("verify_costs")
  return round(agg["tokens_per_iteration"] / max(costs)[1], 4) if costs else None


@table("owntext", "Spec-Bench's own questions: speedup and tokens per target call per group, and the formula")
def owntext(src: Sources) -> Table:
  body, groups = [], None
  for _, d, target, name, r in rows_of(src):
    groups = groups or d["categories"]
    cfg, o = d["config"], r["overall"]
    cell = lambda a: f"{x(a['speedup'])} ({f(a['tokens_per_iteration'])})"  # noqa: E731
    body.append([target, str(cfg["batch_size"]), t(cfg["temperature"]), label(name, r),
                 *(cell(r["categories"][g]) for g in groups), cell(o), x(formula(d, name, o)),
                 f(o["tokens_per_s"], 1), f(o["baseline_tokens_per_s"], 1),
                 same(o["identical_to_autoregressive"], cfg["temperature"])])
  return Table(["target", "B", "T", "drafter", *(groups or []), "overall", "formula", "tok/s", "AR tok/s", "= AR"],
               body, note="Each cell: speedup (tokens per target call). Formula: tokens per call over the mean "
                          "round cost, each round at the loop-measured cost of its width or node budget (a fixed "
                          "row: every round at its widest, as its adaptive twin measured it).")


@table("owntext_rounds", "Spec-Bench's own questions: rounds per width or node budget, their measured cost, memory")
def owntext_rounds(src: Sources) -> Table:
  body = []
  for _, d, target, name, r in rows_of(src):
    o = r["overall"]
    costs = dict((int(w), v) for w, v in ((r.get("adaptive") or {}).get("verify_costs") or []))
    widths = o.get("verify_widths") or []
    body.append([target, label(name, r), ", ".join(map(str, widths)) or "–",
                 ", ".join(map(str, o["width_histogram"])) if widths else "–",
                 ", ".join(f(costs.get(int(w))) for w in widths) if costs else "–",
                 n(r.get("memory_bytes")), n(r.get("drafter_params"))])
  return Table(["target", "drafter", "widths / node budgets", "rounds at each", "round cost (plain steps)",
                "memory across calls (bytes)", "drafter params"], body,
               note="Memory across calls: the arrays a call returns to the next (a successor table, a suffix pool "
                    "and its index); a corpus is fixed and not counted.")


def summary_rows(src: Sources) -> list:
  """README summary rows (``[target, drafter, prompts, B, T, speedup, tokens/call, = AR, json]``): per
  target its fastest and its slowest row over all its files (every row is in docs/results.md's table)."""
  by_target = {}
  for rel, d, target, name, r in rows_of(src):
    by_target.setdefault(target, []).append((rel, d, name, r))
  out = []
  for target, rows in by_target.items():
    ranked = sorted(rows, key=lambda row: -row[3]["overall"]["speedup"])
    picks = [("", ranked[0])] if len(ranked) == 1 else [(f"fastest of {len(ranked)}: ", ranked[0]),
                                                         (f"slowest of {len(ranked)}: ", ranked[-1])]
    for prefix, (rel, d, name, r) in picks:
      cfg, o = d["config"], r["overall"]
      out.append([target, prefix + label(name, r), prompts(cfg, d["categories"]), str(cfg["batch_size"]),
                  t(cfg["temperature"]), x(o["speedup"]), f(o["tokens_per_iteration"]),
                  same(o["identical_to_autoregressive"], cfg["temperature"]), rel])
  return out
