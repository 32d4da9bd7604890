"""Drafters for a real target measured on held-out prompts: alpha, tokens per pass, c, v, tok/s.

  nice -n 10 python scripts/compare_real_drafters.py            # SmolLM2-135M-Instruct, B 1 and 8, T 0 and 1
  nice -n 10 python scripts/compare_real_drafters.py --batch_sizes=1 --temperatures=0 --max_new_tokens=64

Prompts: the held-out split of ``scripts/make_real_data.py`` (stdlib files and gettext catalogues
that no training row came from), a fixed mix of code / "Translate to German" chat / English text.
B=8 runs the 8 prompts as one batch; B=1 runs the first ``--b1_prompts`` one at a time (tokens and
times summed). Per row: the autoregressive baseline and the speculative run timed alternately
(``measure.paired_times``) after a compile run; ``c`` = one drafting round / gamma / one target
step and ``v`` = one verify pass / one target step (``measure.costs``); expected speedup =
tokens per pass / (gamma c + v). ``c (full V)``: the same drafter architecture with a full-vocabulary
head (random weights; only its cost matters), i.e. what truncation saves.
Lossy variants (Medusa's typical acceptance, T > 0 only) are flagged LOSSY and not counted as exact.
Writes ``real.{json,md}`` under ``--out_dir``; ``--merge`` reruns only ``--families`` in it.
"""
from __future__ import annotations

import dataclasses
import datetime
import json
import pathlib
import sys

from absl import app, flags
import jax
import jax.numpy as jnp
import numpy as np
from tqdm.auto import tqdm

import specjax
from specjax import measure, theory
from specjax import tree as tree_lib
from specjax.data import generated
from specjax.drafters import vocab
from specjax.models import draft_lm

FLAGS = flags.FLAGS
flags.DEFINE_string("target", "smollm2-135m-instruct", "target checkpoint")
flags.DEFINE_string("drafter", "smollm2/draft_lm", "draft_lm bundle (path or name under specjax/assets)")
flags.DEFINE_string("data", "", "data folder of make_real_data.py (its held-out prompts)")
FAMILIES = ("draft_lm", "specinfer", "ngram", "table", "mtp", "medusa", "medusa_typical", "dflash", "eagle",
            "eagle_dynamic")
flags.DEFINE_list("families", "draft_lm,ngram", f"rows, any of {', '.join(FAMILIES)}")
flags.DEFINE_bool("merge", False, "keep the other families' rows of an existing real.json (each row is its own "
                  "paired AR-vs-speculative measurement)")
flags.DEFINE_string("specinfer_tree", "chain4+1x2", "SpecInfer token tree over the draft_lm model "
                    "(specjax.tree.parse_chain_paths); gamma = its depth")
flags.DEFINE_integer("table_k", 4096, "bigram table: its truncated vocabulary (most frequent generated tokens)")
flags.DEFINE_integer("table_gamma", 4, "bigram table chain length")
flags.DEFINE_string("mtp", "smollm2/mtp", "MTP head folder (scripts/train_real_heads.py --family=mtp)")
flags.DEFINE_integer("mtp_gamma", 3, "MTP chain length")
flags.DEFINE_string("dflash", "runs/smollm2_dflash/head", "DFlash folder (scripts/train_real_heads.py --family=dflash)")
flags.DEFINE_string("medusa", "smollm2/medusa", "Medusa heads folder (scripts/train_real_heads.py --family=medusa)")
flags.DEFINE_string("medusa_tree", "chain3+1x2", "Medusa tree (specjax.tree.parse_chain_paths); gamma = its depth")
flags.DEFINE_string("eagle", "smollm2/eagle", "EAGLE-3 head folder (scripts/train_eagle.py --data=real)")
flags.DEFINE_integer("eagle_gamma", 4, "EAGLE chain length / dynamic tree depth")
flags.DEFINE_integer("eagle_top_k", 4, "EAGLE dynamic tree: children per expanded node")
flags.DEFINE_integer("eagle_total_tokens", 8, "EAGLE dynamic tree: draft nodes verified per row")
flags.DEFINE_list("batch_sizes", "1,8", "batch sizes")
flags.DEFINE_list("temperatures", "0,1", "temperatures")
flags.DEFINE_integer("gamma", 5, "draft length of draft_lm")
flags.DEFINE_integer("ngram_gamma", 4, "draft length of n-gram")
flags.DEFINE_integer("max_new_tokens", 96, "tokens per row")
flags.DEFINE_integer("b1_prompts", 3, "prompts run one at a time for B=1")
flags.DEFINE_integer("repeats", 1, "timed runs of each decoder after the compile run")
flags.DEFINE_string("out_dir", "benchmarks/real", "where real.{json,md} go")

MIX = ("code", "ende", "text", "code", "ende", "text", "code", "ende")


def held_out_prompts(folder, tok) -> list[list[int]]:
  rows = json.loads((pathlib.Path(folder) / "prompts_held_out.json").read_text())
  by_kind = {k: [r["ids"] for r in rows if r["kind"] == k] for k in set(MIX)}
  used = {k: 0 for k in by_kind}
  out = []
  for k in MIX:
    out.append(by_kind[k][used[k]])
    used[k] += 1
  del tok
  return out


def pad(rows, width):
  out = np.zeros((len(rows), width), np.int32)
  for i, r in enumerate(rows):
    out[i, :len(r)] = r
  return out, np.array([len(r) for r in rows], np.int32)


def full_vocab_twin(drafter, target):
  """The drafter's architecture with a full-vocabulary head (random): c without truncation."""
  cfg = dataclasses.replace(drafter.model.config, out_vocab=0)
  return drafter.replace(model=draft_lm.init(cfg, target, seed=0), subset_K=None)


def load_table(data, target):
  """A bigram table over the ``--table_k`` most frequent tokens of the target's training generations."""
  tokens, _ = generated.joined(generated.load_shards(data))
  subset = vocab.top_k_subset(generated.token_counts(data, target.vocab_size), FLAGS.table_k)
  return specjax.drafters.TableDrafter.from_corpus(tokens, target.vocab_size, order=2, subset_K=subset)


def load_specinfer(target):
  small = specjax.drafters.build("draft_model", {"checkpoint": FLAGS.drafter}, target)
  paths = tuple(map(tuple, tree_lib.parse_chain_paths(FLAGS.specinfer_tree)))
  siblings = "without_replacement"  # lossless at T > 0; top-k at T = 0 whatever the mode
  return specjax.drafters.SpecInfer(small.model, paths=paths, siblings=siblings, subset_K=small.subset_K)


def load_eagle(name, dynamic, target):
  options = {"checkpoint": name, "tree": "chain"}
  if dynamic is not None:
    options.update(tree="dynamic", gamma=dynamic.depth, top_k=dynamic.top_k, total_tokens=dynamic.total_tokens)
  return specjax.drafters.build("eagle", options, target)


def eagle_full_vocab_twin(drafter):
  from specjax.models import heads  # pylint: disable=import-outside-toplevel
  module = drafter.head.module
  twin = heads.init_head(type(module)(dataclasses.replace(module.cfg, draft_vocab_size=0)), 0)
  return drafter.replace(head=twin, subset_K=None)


def load_heads_drafter(family, target):
  """``(drafter, gamma)`` for the MTP, DFlash or Medusa rows, with the truncated vocabulary beside them."""
  from specjax.models import heads  # pylint: disable=import-outside-toplevel
  if family in ("mtp", "dflash"):
    name = FLAGS.mtp if family == "mtp" else FLAGS.dflash
    folder = heads.resolve(name)
    if folder is None:
      raise FileNotFoundError(f"no {family} weights at {name!r} (scripts/train_real_heads.py --family={family})")
    if family == "dflash":
      drafter = specjax.drafters.DFlash(heads.load_head(folder), vocab.load_subset(folder))
      return drafter, drafter.block_size - 1
    return specjax.drafters.build("mtp", {"checkpoint": str(folder), "gamma": FLAGS.mtp_gamma}, target), FLAGS.mtp_gamma
  folder = heads.resolve(FLAGS.medusa)
  if folder is None:
    raise FileNotFoundError(f"no Medusa heads at {FLAGS.medusa!r} (scripts/train_real_heads.py --family=medusa)")
  depth = max(map(len, tree_lib.parse_chain_paths(FLAGS.medusa_tree)))
  options = {"checkpoint": str(folder), "tree": FLAGS.medusa_tree, "gamma": depth}
  return specjax.drafters.build("medusa", options, target), depth


def heads_full_vocab_twin(drafter, target):
  """MTP / DFlash / Medusa without the subset: the same weights over the target's whole LM head."""
  if drafter.name in ("mtp", "dflash"):
    return drafter.replace(subset_K=None)
  from specjax.drafters import medusa  # pylint: disable=import-outside-toplevel
  return medusa.Medusa.create(target, drafter.heads, drafter.paths)


def num_nodes(drafter, gamma):
  tree = getattr(drafter, "tree", None)
  return gamma + 1 if tree is None else tree.num_nodes


def measure_row(target, drafter, batches, gamma, sampling, eos_id):
  """Sums over the batches (B=1: one prompt each): tokens, seconds, stats."""
  tot = dict(ar_tokens=0, ar_s=0.0, spec_tokens=0, spec_s=0.0, iters=0, row_iters=0, accepted=0.0,
             alpha_w=0.0, identical=True)
  for prompts, lengths in batches:
    common = dict(max_new_tokens=FLAGS.max_new_tokens, sampling=sampling, rng=jax.random.PRNGKey(0), eos_id=eos_id)
    base, spec, t_base, t_spec = measure.paired_times(
        lambda: specjax.generate(target, prompts, lengths, **common),
        lambda: specjax.speculative_generate(target, drafter, prompts, lengths, gamma=gamma, allow_lossy=True, **common),
        FLAGS.repeats)
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
  prompts, lengths = batches[0]
  max_len = prompts.shape[1] + FLAGS.max_new_tokens + num_nodes(drafter, gamma)
  c, v = measure.costs(target, drafter, prompts, lengths, gamma, num_nodes(drafter, gamma), sampling, max_len)
  return tot, c, v


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments: {argv[1:]}")
  unknown = sorted(set(FLAGS.families) - set(FAMILIES))
  if unknown:
    raise app.UsageError(f"unknown families {unknown}; expected some of {FAMILIES}")
  target, tok = specjax.load_pretrained(FLAGS.target)
  data = pathlib.Path(FLAGS.data or generated.default_out(FLAGS.target)).expanduser()
  rows8 = held_out_prompts(data, tok)
  width = max(map(len, rows8))
  drafters = {}
  if "draft_lm" in FLAGS.families:
    drafters["draft_lm"] = (specjax.drafters.build("draft_model", {"checkpoint": FLAGS.drafter}, target), FLAGS.gamma)
  if "specinfer" in FLAGS.families:
    drafter = load_specinfer(target)
    drafters["specinfer"] = (drafter, drafter.tree.max_depth)
  if "ngram" in FLAGS.families:
    drafters["ngram"] = (specjax.drafters.NGram(3), FLAGS.ngram_gamma)
  if "table" in FLAGS.families:
    drafters["table"] = (load_table(data, target), FLAGS.table_gamma)
  for family in ("mtp", "medusa", "dflash"):
    if family in FLAGS.families:
      drafters[family] = load_heads_drafter(family, target)
  if "medusa_typical" in FLAGS.families:
    medusa_drafter, depth = drafters.get("medusa") or load_heads_drafter("medusa", target)
    drafters["medusa_typical"] = (medusa_drafter.replace(acceptance="typical"), depth)
  for family in ("eagle", "eagle_dynamic"):
    if family in FLAGS.families:
      dynamic = specjax.drafters.DynamicTree(FLAGS.eagle_gamma, FLAGS.eagle_top_k, FLAGS.eagle_total_tokens) \
          if family == "eagle_dynamic" else None
      drafters[family] = (load_eagle(FLAGS.eagle, dynamic, target), FLAGS.eagle_gamma)
  out_dir = pathlib.Path(FLAGS.out_dir)
  out_dir.mkdir(parents=True, exist_ok=True)
  kept, earlier_runs = [], []
  if FLAGS.merge and (out_dir / "real.json").is_file():
    saved = json.loads((out_dir / "real.json").read_text())
    kept = [r for r in saved["rows"] if r["family"] not in drafters]
    earlier_runs = saved["meta"].get("earlier_runs", []) + [saved["meta"]["argv"]]
  results = []
  combos = [(f, int(b), float(t)) for f in drafters for b in FLAGS.batch_sizes for t in FLAGS.temperatures
            if not (f == "medusa_typical" and float(t) == 0)]  # typical acceptance only changes T > 0
  for family, b, t in tqdm(combos, desc="real drafters"):
    drafter, gamma = drafters[family]
    sampling = specjax.Sampling(t)
    if b == 1:  # one prompt at a time, all padded to one width: one compile
      batches = [pad([r], width) for r in rows8[:FLAGS.b1_prompts]]
    else:
      batches = [pad([rows8[i % len(rows8)] for i in range(b)], width)]
    tot, c, v = measure_row(target, drafter, batches, gamma, sampling, tok.eos_id)
    ri = max(tot["row_iters"], 1)
    alpha, tpi = tot["alpha_w"] / ri, 1 + tot["accepted"] / ri
    ar, sp = tot["ar_tokens"] / tot["ar_s"], tot["spec_tokens"] / tot["spec_s"]
    row = {"family": family, "batch_size": b, "temperature": t, "gamma": gamma,
           "drafter_params": drafter.num_params, "alpha": round(alpha, 4), "tokens_per_pass": round(tpi, 3),
           "c": round(c, 4), "v": round(v, 3), "ar_tok_s": round(ar, 2), "spec_tok_s": round(sp, 2),
           "speedup": round(sp / ar, 3), "expected_speedup": round(tpi / (gamma * c + v), 3),
           "formula_speedup": round(float(theory.walltime_improvement(alpha, gamma, c, v)), 3),
           "identical_at_t0": tot["identical"] if t == 0 else None, "generated_tokens": tot["spec_tokens"],
           "prompts": len(batches) * b, "max_new_tokens": FLAGS.max_new_tokens}
    if family in ("draft_lm", "specinfer"):
      twin = full_vocab_twin(drafter, target)
      p0, l0 = batches[0]
      n = num_nodes(drafter, gamma)
      row["c_full_vocab"] = round(measure.costs(target, twin, p0, l0, gamma, n, sampling,
                                                p0.shape[1] + FLAGS.max_new_tokens + n)[0], 4)
      row["k"] = int(drafter.subset_K.shape[0])
    if family == "specinfer":
      row["tree"] = f"{FLAGS.specinfer_tree}, {num_nodes(drafter, gamma) - 1} nodes"
    if family == "table":
      row["k"] = int(drafter.subset_K.shape[0])
    if drafter.lossy_reason(sampling) is not None:
      row["lossy"] = True
    if family in ("mtp", "medusa", "medusa_typical", "dflash") and drafter.subset_K is not None:
      p0, l0 = batches[0]
      n = num_nodes(drafter, gamma)
      row["c_full_vocab"] = round(measure.costs(target, heads_full_vocab_twin(drafter, target), p0, l0, gamma, n,
                                                sampling, p0.shape[1] + FLAGS.max_new_tokens + n)[0], 4)
      row["k"] = int(drafter.subset_K.shape[0])
    if family.startswith("medusa"):
      row["tree"] = f"{FLAGS.medusa_tree}, {num_nodes(drafter, gamma) - 1} nodes"
    if family.startswith("eagle") and drafter.subset_K is not None:
      p0, l0 = batches[0]
      n = num_nodes(drafter, gamma)
      row["c_full_vocab"] = round(measure.costs(target, eagle_full_vocab_twin(drafter), p0, l0, gamma, n, sampling,
                                                p0.shape[1] + FLAGS.max_new_tokens + n)[0], 4)
      row["k"] = int(drafter.subset_K.shape[0])
    results.append(row)
    rows = sorted(kept + results, key=lambda r: FAMILIES.index(r["family"]))  # stable: B, T order kept
    meta = {"argv": sys.argv, "target": FLAGS.target, "drafter": FLAGS.drafter, "max_new_tokens": FLAGS.max_new_tokens,
            "devices": [str(d) for d in jax.devices()], "date": datetime.datetime.now().isoformat(timespec="seconds"),
            "note": "2 CPU cores shared with other jobs; AR and speculative timed alternately",
            "earlier_runs": earlier_runs}  # --merge: the commands of the rows kept
    (out_dir / "real.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=2) + "\n")
    (out_dir / "real.md").write_text(markdown(rows) + "\n")
  print(markdown(rows))


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


if __name__ == "__main__":
  app.run(main)
