"""The families command on a real target: the drafters trained for it, measured on held-out prompts.

``python -m specjax.bench families --target=NAME`` runs :func:`run`; the flags it adds are
:func:`define_flags`' (see :mod:`specjax.bench.families` for what a row measures).
"""
from __future__ import annotations

import dataclasses
import datetime
import json
import pathlib

from specjax.bench import common

REAL_FAMILIES = ("draft_lm", "specinfer", "ngram", "table", "mtp", "medusa", "medusa_typical", "dflash", "eagle",
                 "eagle_dynamic")
REAL_ONLY = ("drafter", "data", "merge", "specinfer_tree", "table_k", "table_gamma", "mtp", "mtp_gamma", "dflash",
             "medusa", "medusa_tree", "eagle", "eagle_gamma", "eagle_top_k", "eagle_total_tokens", "gamma",
             "ngram_gamma", "b1_prompts")
MIX = ("code", "ende", "text", "code", "ende", "text", "code", "ende")


def define_flags(fv) -> None:
  from absl import flags  # pylint: disable=import-outside-toplevel
  d = lambda kind, name, default, help_: getattr(flags, f"DEFINE_{kind}")(  # noqa: E731
      name, default, f"--target: {help_}", flag_values=fv)
  d("string", "drafter", "smollm2/draft_lm", "draft_lm bundle (path or name under specjax/assets)")
  d("string", "data", "", "data folder of python -m specjax.train data (its held-out prompts); default: the target's")
  d("bool", "merge", False, "keep the other families' rows of an existing real.json (each row is its own "
    "paired AR-vs-speculative measurement)")
  d("string", "specinfer_tree", "chain4+1x2", "SpecInfer token tree over the draft_lm model "
    "(specjax.tree.parse_chain_paths); gamma = its depth")
  d("integer", "table_k", 4096, "bigram table: its truncated vocabulary (most frequent generated tokens)")
  d("integer", "table_gamma", 4, "bigram table chain length")
  d("string", "mtp", "smollm2/mtp", "MTP head folder (python -m specjax.train mtp --data=real)")
  d("integer", "mtp_gamma", 3, "MTP chain length")
  d("string", "dflash", "runs/smollm2_dflash/head", "DFlash folder (python -m specjax.train dflash --data=real)")
  d("string", "medusa", "smollm2/medusa", "Medusa heads folder (python -m specjax.train medusa --data=real)")
  d("string", "medusa_tree", "chain3+1x2", "Medusa tree (specjax.tree.parse_chain_paths); gamma = its depth")
  d("string", "eagle", "smollm2/eagle", "EAGLE-3 head folder (python -m specjax.train eagle --data=real)")
  d("integer", "eagle_gamma", 4, "EAGLE chain length / dynamic tree depth")
  d("integer", "eagle_top_k", 4, "EAGLE dynamic tree: children per expanded node")
  d("integer", "eagle_total_tokens", 8, "EAGLE dynamic tree: draft nodes verified per row")
  d("integer", "gamma", 5, "draft length of draft_lm")
  d("integer", "ngram_gamma", 4, "draft length of n-gram")
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


def full_vocab_twin(drafter, target):
  """The drafter's architecture with a full-vocabulary head (random): c without truncation."""
  from specjax.models import draft_lm  # pylint: disable=import-outside-toplevel
  cfg = dataclasses.replace(drafter.model.config, out_vocab=0)
  return drafter.replace(model=draft_lm.init(cfg, target, seed=0), subset_K=None)


def eagle_full_vocab_twin(drafter):
  from specjax.models import heads  # pylint: disable=import-outside-toplevel
  module = drafter.head.module
  twin = heads.init_head(type(module)(dataclasses.replace(module.cfg, draft_vocab_size=0)), 0)
  return drafter.replace(head=twin, subset_K=None)


def heads_full_vocab_twin(drafter, target):
  """MTP / DFlash / Medusa without the subset: the same weights over the target's whole LM head."""
  if drafter.name in ("mtp", "dflash"):
    return drafter.replace(subset_K=None)
  from specjax.drafters import medusa  # pylint: disable=import-outside-toplevel
  return medusa.Medusa.create(target, drafter.heads, drafter.paths)


def load_heads_drafter(fv, family, target):
  """``(drafter, gamma)`` for the MTP, DFlash or Medusa rows, with the truncated vocabulary beside them."""
  import specjax  # pylint: disable=import-outside-toplevel
  from specjax import tree as tree_lib  # pylint: disable=import-outside-toplevel
  from specjax.models import heads, store  # pylint: disable=import-outside-toplevel
  name = {"mtp": fv.mtp, "dflash": fv.dflash, "medusa": fv.medusa}[family]
  folder = heads.resolve(name)
  if folder is None:
    raise common.UsageError(f"no {family} weights at {name!r} (python -m specjax.train {family} --data=real)")
  if family == "dflash":  # gamma: the block size it was trained with, less one
    gamma = store.read_meta(folder)["config"]["block_size"] - 1
    return specjax.drafters.build("dflash", {"checkpoint": str(folder), "gamma": gamma}, target), gamma
  if family == "mtp":
    return specjax.drafters.build("mtp", {"checkpoint": str(folder), "gamma": fv.mtp_gamma}, target), fv.mtp_gamma
  depth = max(map(len, tree_lib.parse_chain_paths(fv.medusa_tree)))
  options = {"checkpoint": str(folder), "tree": fv.medusa_tree, "gamma": depth}
  return specjax.drafters.build("medusa", options, target), depth


def load_drafters(fv, names, target, data) -> dict:
  """family -> (drafter, gamma) for every family in ``names``."""
  import specjax  # pylint: disable=import-outside-toplevel
  from specjax import tree as tree_lib  # pylint: disable=import-outside-toplevel
  from specjax.data import generated  # pylint: disable=import-outside-toplevel
  from specjax.drafters import vocab  # pylint: disable=import-outside-toplevel
  drafters = {}
  if "draft_lm" in names:
    drafters["draft_lm"] = (specjax.drafters.build("draft_model", {"checkpoint": fv.drafter}, target), fv.gamma)
  if "specinfer" in names:  # without replacement: lossless at T > 0; top-k at T = 0 whatever the mode
    depth = max(map(len, tree_lib.parse_chain_paths(fv.specinfer_tree)))
    options = {"checkpoint": fv.drafter, "paths": fv.specinfer_tree, "siblings": "without_replacement", "gamma": depth}
    drafters["specinfer"] = (specjax.drafters.build("specinfer", options, target), depth)
  if "ngram" in names:
    drafters["ngram"] = (specjax.drafters.build("ngram", {"n": 3, "gamma": fv.ngram_gamma}, target), fv.ngram_gamma)
  if "table" in names:  # a bigram table over the most frequent tokens of the target's training generations
    tokens, _ = generated.joined(generated.load_shards(data))
    subset = vocab.top_k_subset(generated.token_counts(data, target.vocab_size), fv.table_k)
    drafters["table"] = (specjax.drafters.TableDrafter.from_corpus(tokens, target.vocab_size, order=2,
                                                                   subset_K=subset), fv.table_gamma)
  for family in ("mtp", "medusa", "dflash"):
    if family in names:
      drafters[family] = load_heads_drafter(fv, family, target)
  if "medusa_typical" in names:
    medusa_drafter, depth = drafters.get("medusa") or load_heads_drafter(fv, "medusa", target)
    drafters["medusa_typical"] = (medusa_drafter.replace(acceptance="typical"), depth)
  for family in ("eagle", "eagle_dynamic"):
    if family in names:
      options = {"checkpoint": fv.eagle, "tree": "chain"}
      if family == "eagle_dynamic":
        options.update(tree="dynamic", gamma=fv.eagle_gamma, top_k=fv.eagle_top_k, total_tokens=fv.eagle_total_tokens)
      drafters[family] = (specjax.drafters.build("eagle", options, target), fv.eagle_gamma)
  return drafters


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


def full_vocab_cost(family, drafter, target, batch, gamma, sampling, max_new_tokens):
  """c of the drafter without its truncated vocabulary (None when it has none)."""
  if getattr(drafter, "subset_K", None) is None:
    return None
  if family in ("draft_lm", "specinfer"):
    twin = full_vocab_twin(drafter, target)
  elif family.startswith("eagle"):
    twin = eagle_full_vocab_twin(drafter)
  else:
    twin = heads_full_vocab_twin(drafter, target)
  return costs(target, twin, batch, gamma, sampling, max_new_tokens)[0]


def run(fv, argv, batch_sizes, temperatures) -> int:
  import jax  # pylint: disable=import-outside-toplevel
  from tqdm import tqdm  # pylint: disable=import-outside-toplevel
  import specjax  # pylint: disable=import-outside-toplevel
  from specjax import theory  # pylint: disable=import-outside-toplevel
  from specjax.data import generated  # pylint: disable=import-outside-toplevel
  names = ["draft_lm", "ngram"] if fv.families is None else fv.families
  unknown = sorted(set(names) - set(REAL_FAMILIES))
  if unknown:
    raise common.UsageError(f"--families: unknown {unknown}; expected some of {', '.join(REAL_FAMILIES)}")
  max_new, repeats = fv.max_new_tokens or 96, fv.repeats or 1
  data = pathlib.Path(fv.data or generated.default_out(fv.target)).expanduser()
  rows8 = held_out_prompts(data)
  target, tok = specjax.load_pretrained(fv.target)
  width = max(map(len, rows8))
  drafters = load_drafters(fv, names, target, data)
  out_dir = common.out_dir(fv.out_dir or "benchmarks/real")
  kept, earlier_runs = [], []
  if fv.merge and (out_dir / "real.json").is_file():
    saved = json.loads((out_dir / "real.json").read_text())
    kept = [r for r in saved["rows"] if r["family"] not in drafters]
    earlier_runs = saved["meta"].get("earlier_runs", []) + [saved["meta"]["argv"]]
  results, rows = [], []
  combos = [(f, b, t) for f in drafters for b in batch_sizes for t in temperatures
            if not (f == "medusa_typical" and t == 0)]  # typical acceptance only changes T > 0
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
    c_full = None if family in ("ngram", "table") else full_vocab_cost(family, drafter, target, batches[0], gamma,
                                                                      sampling, max_new)
    if c_full is not None:
      row["c_full_vocab"] = round(c_full, 4)
    if family != "ngram" and getattr(drafter, "subset_K", None) is not None:
      row["k"] = int(drafter.subset_K.shape[0])
    if family == "specinfer":
      row["tree"] = f"{fv.specinfer_tree}, {num_nodes(drafter, gamma) - 1} nodes"
    if drafter.lossy_reason(sampling) is not None:
      row["lossy"] = True
    if family.startswith("medusa"):
      row["tree"] = f"{fv.medusa_tree}, {num_nodes(drafter, gamma) - 1} nodes"
    results.append(row)
    rows = sorted(kept + results, key=lambda r: REAL_FAMILIES.index(r["family"]))  # stable: B, T order kept
    meta = {"argv": list(argv), "target": fv.target, "drafter": fv.drafter, "max_new_tokens": max_new,
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
