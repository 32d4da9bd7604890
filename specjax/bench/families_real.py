"""The families command on a real target: the drafters trained for it, measured on held-out prompts.

``python -m specjax.bench families --target=NAME`` runs :func:`run`; the flags it adds are
:func:`define_flags`' (see :mod:`specjax.bench.families` for what a row measures).
"""
from __future__ import annotations

import datetime
import json
import pathlib

from specjax.bench import common, real_rows

REAL_ONLY = ("drafters", "data", "merge", "b1_prompts")
MIX = ("code", "ende", "text", "code", "ende", "text", "code", "ende")


def define_flags(fv) -> None:
  from absl import flags  # pylint: disable=import-outside-toplevel
  d = lambda kind, name, default, help_: getattr(flags, f"DEFINE_{kind}")(  # noqa: E731
      name, default, f"--target: {help_}", flag_values=fv)
  d("list", "drafters", list(real_rows.default_drafters()), "rows, each [NAME=]ROW_OR_KIND[:CHECKPOINT]: a row of "
    f"{', '.join(real_rows.row_table())} (the drafters trained for smollm2) or any registered drafter kind "
    "(specjax.bench.real_rows)")
  d("string", "data", "", "data folder of python -m specjax.train data (its held-out prompts; the table row's "
    "corpus); default: the target's")
  d("bool", "merge", False, "keep the other rows of an existing real.json (each row is its own "
    "paired AR-vs-speculative measurement)")
  d("integer", "b1_prompts", 3, "prompts run one at a time for B=1")


def held_out_prompts(folder) -> list[list[int]]:
  path = pathlib.Path(folder) / "prompts_held_out.json"
  if not path.is_file():
    raise common.UsageError(f"{path} not found: run python -m specjax.train data first (it writes the held-out prompts)")
  rows = json.loads(path.read_text())
  by_kind = {k: [r["ids"] for r in rows if r["kind"] == k] for k in set(MIX)}
  if any(len(by_kind[k]) < MIX.count(k) for k in by_kind):
    raise common.UsageError(f"{path}: needs {', '.join(f'{MIX.count(k)} {k}' for k in sorted(by_kind))} prompts")
  used = {k: 0 for k in by_kind}
  out = []
  for k in MIX:
    out.append(by_kind[k][used[k]])
    used[k] += 1
  return out


def pad(rows, width):
  import numpy as np  # pylint: disable=import-outside-toplevel
  out = np.zeros((len(rows), width), np.int32)
  for i, r in enumerate(rows):
    out[i, :len(r)] = r
  return out, np.array([len(r) for r in rows], np.int32)


def load_drafters(rows, target, data) -> tuple[dict, dict]:
  """``(name -> (drafter, gamma), name -> {kind, options as built})`` for the rows, each built through
  :func:`specjax.drafters.build`."""
  options_of = {row.name: {"kind": row.kind, **real_rows.resolved_values(row, data)} for row in rows}
  drafters = {}
  for row in rows:
    values = {k: v for k, v in options_of[row.name].items() if k != "kind"}
    drafters[row.name] = real_rows.build_row(row, values, target)
  return drafters, options_of


def row_names(fv) -> list:
  """The ``--drafters`` items; with --target, ``--families`` is the same list."""
  if fv.families is None:
    return list(fv.drafters)
  if fv["drafters"].present:
    raise common.UsageError("--families and --drafters: give one (with --target they are the same list)")
  return list(fv.families)


def num_nodes(drafter, gamma):
  tree = getattr(drafter, "tree", None)
  return gamma + 1 if tree is None else tree.num_nodes


def measure_row(target, drafter, batches, gamma, sampling, eos_id, max_new_tokens, repeats):
  """Sums over the batches (B=1: one prompt each): tokens, seconds, stats; and c, v on the first batch."""
  import jax  # pylint: disable=import-outside-toplevel
  import numpy as np  # pylint: disable=import-outside-toplevel
  import specjax  # pylint: disable=import-outside-toplevel
  from specjax import measure  # pylint: disable=import-outside-toplevel
  tot = dict(ar_tokens=0, ar_s=0.0, spec_tokens=0, spec_s=0.0, iters=0, row_iters=0, accepted=0.0,
             alpha_w=0.0, identical=True)
  common_kw = dict(max_new_tokens=max_new_tokens, sampling=sampling, rng=jax.random.PRNGKey(0), eos_id=eos_id)
  for prompts, lengths in batches:
    base, spec, t_base, t_spec = measure.paired_times(
        lambda: specjax.generate(target, prompts, lengths, **common_kw),  # pylint: disable=cell-var-from-loop
        lambda: specjax.speculative_generate(target, drafter, prompts, lengths,  # pylint: disable=cell-var-from-loop
                                             gamma=gamma, allow_lossy=True, **common_kw), repeats)
    st = spec.stats
    tot["ar_tokens"] += int(base.lengths.sum())
    tot["ar_s"] += t_base
    tot["spec_tokens"] += int(spec.lengths.sum())
    tot["spec_s"] += t_spec
    tot["iters"] += st["iterations"]
    tot["row_iters"] += st["row_iterations"]
    tot["accepted"] += st["mean_accepted"] * st["row_iterations"]
    tot["alpha_w"] += st["alpha"] * st["row_iterations"]
    tot["identical"] &= bool(np.array_equal(spec.tokens, base.tokens))
  return tot, costs(target, drafter, batches[0], gamma, sampling, max_new_tokens)


def costs(target, drafter, batch, gamma, sampling, max_new_tokens) -> tuple:
  from specjax import measure  # pylint: disable=import-outside-toplevel
  prompts, lengths = batch
  n = num_nodes(drafter, gamma)
  return measure.costs(target, drafter, prompts, lengths, gamma, n, sampling, prompts.shape[1] + max_new_tokens + n)


def full_vocab_cost(kind, drafter, target, batch, gamma, sampling, max_new_tokens):
  """c of the drafter without its truncated vocabulary (None when it has none, or the kind has no twin)."""
  import specjax  # pylint: disable=import-outside-toplevel
  twin = specjax.drafters.spec(kind).full_vocab_twin  # none for a table: its vocabulary is what it counts
  if getattr(drafter, "subset_K", None) is None or twin is None:
    return None
  return costs(target, twin(drafter, target), batch, gamma, sampling, max_new_tokens)[0]


def run(fv, argv, batch_sizes, temperatures) -> int:
  import jax  # pylint: disable=import-outside-toplevel
  from tqdm import tqdm  # pylint: disable=import-outside-toplevel
  import specjax  # pylint: disable=import-outside-toplevel
  from specjax import theory  # pylint: disable=import-outside-toplevel
  from specjax.data import generated  # pylint: disable=import-outside-toplevel
  rows_asked = real_rows.parse_rows(row_names(fv), fv.drafter_option)  # every flag checked before loading
  if fv["b1_prompts"].present and 1 not in batch_sizes:
    raise common.UsageError("--b1_prompts: not used without batch size 1 in --batch_sizes")
  max_new, repeats = fv.max_new_tokens or 96, fv.repeats or 1
  data = pathlib.Path(fv.data or generated.default_out(fv.target)).expanduser()
  rows8 = held_out_prompts(data)
  target, tok = specjax.load_pretrained(fv.target)
  width = max(map(len, rows8))
  order = real_rows.order_key(rows_asked)
  rows_asked.sort(key=lambda r: order(r.name))
  drafters, options_of = load_drafters(rows_asked, target, data)
  out_dir = common.out_dir(fv.out_dir or "benchmarks/real")
  kept, earlier_runs = [], []
  if fv.merge and (out_dir / "real.json").is_file():
    saved = json.loads((out_dir / "real.json").read_text())
    kept = [r for r in saved["rows"] if r["family"] not in drafters]
    order = real_rows.order_key(rows_asked + [real_rows.Row(r["family"], "", {}) for r in kept])
    earlier_runs = saved["meta"].get("earlier_runs", []) + [saved["meta"]["argv"]]
  results, rows = [], []
  combos = [(f, b, t) for f in drafters for b in batch_sizes for t in temperatures
            if not (t == 0 and options_of[f].get("acceptance") == "typical")]  # typical only changes T > 0
  for family, b, t in tqdm(combos, desc="real drafters"):
    drafter, gamma = drafters[family]
    sampling = specjax.Sampling(t)
    if b == 1:  # one prompt at a time, all padded to one width: one compile
      batches = [pad([r], width) for r in rows8[:fv.b1_prompts]]
    else:
      batches = [pad([rows8[i % len(rows8)] for i in range(b)], width)]
    tot, (c, v) = measure_row(target, drafter, batches, gamma, sampling, tok.eos_id, max_new, repeats)
    ri = max(tot["row_iters"], 1)
    alpha, tpi = tot["alpha_w"] / ri, 1 + tot["accepted"] / ri
    ar, sp = tot["ar_tokens"] / tot["ar_s"], tot["spec_tokens"] / tot["spec_s"]
    row = {"family": family, "batch_size": b, "temperature": t, "gamma": gamma,
           "drafter_params": drafter.num_params, "alpha": round(alpha, 4), "tokens_per_pass": round(tpi, 3),
           "c": round(c, 4), "v": round(v, 3), "ar_tok_s": round(ar, 2), "spec_tok_s": round(sp, 2),
           "speedup": round(sp / ar, 3), "expected_speedup": round(tpi / (gamma * c + v), 3),
           "formula_speedup": round(float(theory.walltime_improvement(alpha, gamma, c, v)), 3),
           "identical_at_t0": tot["identical"] if t == 0 else None, "generated_tokens": tot["spec_tokens"],
           "prompts": len(batches) * b, "max_new_tokens": max_new}
    kind = options_of[family]["kind"]
    c_full = full_vocab_cost(kind, drafter, target, batches[0], gamma, sampling, max_new)
    if c_full is not None:
      row["c_full_vocab"] = round(c_full, 4)
    if getattr(drafter, "subset_K", None) is not None:
      row["k"] = int(drafter.subset_K.shape[0])
    tree = real_rows.tree_label(kind, options_of[family])
    if tree is not None:
      row["tree"] = f"{tree}, {num_nodes(drafter, gamma) - 1} nodes"
    if drafter.lossy_reason(sampling) is not None:
      row["lossy"] = True
    results.append(row)
    rows = sorted(kept + results, key=lambda r: order(r["family"]))  # stable: B, T order kept
    meta = {"argv": list(argv), "target": fv.target, "drafter": real_rows.small_model_of(options_of),
            "max_new_tokens": max_new, "drafters": options_of,
            "devices": [str(d) for d in jax.devices()], "date": datetime.datetime.now().isoformat(timespec="seconds"),
            "note": "2 CPU cores shared with other jobs; AR and speculative timed alternately",
            "earlier_runs": earlier_runs}  # --merge: the commands of the rows kept
    common.write_json(out_dir / "real.json", {"meta": meta, "rows": rows})
    (out_dir / "real.md").write_text(markdown(rows) + "\n")
  print(markdown(rows))
  print(f"wrote {out_dir}/real.json, real.md")
  return 0


def markdown(rows) -> str:
  lines = ["| drafter | B | T | γ | params | α | tokens/pass | c | c (full V) | v | AR tok/s | spec tok/s | speedup "
           "| expected | formula | = AR at T=0 |", "|" + "---|" * 16]
  for r in rows:
    same = "LOSSY" if r.get("lossy") else {True: "yes", False: "**NO**", None: "n/a"}[r["identical_at_t0"]]
    cf = f"{r['c_full_vocab']:.3f}" if "c_full_vocab" in r else "–"
    name = r["family"] + (f" (K={r['k']})" if "k" in r else "") + (f", {r['tree']}" if "tree" in r else "")
    lines.append(f"| {name} | {r['batch_size']} | {r['temperature']:g} | {r['gamma']} | {r['drafter_params']:,} "
                 f"| {r['alpha']:.3f} | {r['tokens_per_pass']:.2f} | {r['c']:.3f} | {cf} | {r['v']:.2f} "
                 f"| {r['ar_tok_s']:.1f} | {r['spec_tok_s']:.1f} | {r['speedup']:.2f}x | {r['expected_speedup']:.2f}x "
                 f"| {r['formula_speedup']:.2f}x | {same} |")
  return "\n".join(lines)
