"""Large-vocabulary cost of sampling and verification: per autoregressive step and per speculative iteration.

  python scripts/bench_large_vocab.py                                   # 4,096 and 262,144, all drafters
  python scripts/bench_large_vocab.py --vocabs 4096 --drafters chain --samplings greedy --name smoke
  python scripts/bench_large_vocab.py --target=gemma3-270m --batch=1 --max-new-tokens=4 --repeats=1 --name gemma3_b1

Tiny random decoders (target d_model 64, drafter d_model 32, ``specjax.testing.tiny_decoder``), so
what is left besides the output projection is the cost of turning logits into probabilities,
drafts and accept decisions -- the part that grows with V. ``--target`` takes a real checkpoint
instead (``specjax.load_pretrained``: e.g. Gemma 3 270M, V = 262,144), drafted for by a tiny random
decoder of its vocabulary: the drafts are mostly rejected, so this times rounds, not speedups.
For each (vocab, sampling):

* ``ar_ms``: autoregressive ``generate`` time / its steps (target step + sampling);
* per drafter kind, ``spec_ms``: ``speculative_generate`` time / iterations. ``chain`` is a draft
  model proposing ``gamma`` tokens; ``tree`` a SpecInfer tree (``--children``, 21 nodes by default);
* ``floor_ms``: the drafter's forward passes of one round plus one target verify pass over the same
  shapes (``specjax.measure.target_step_seconds``, logits only, no sampling). A round that costs
  about ``floor_ms`` spends nothing on V-sized bookkeeping.

Every time is the median of ``--repeats`` timed calls after one compile-and-warm-up call. Writes
``<out_dir>/<name>.md`` and ``<name>.json`` and prints the table.
"""
from __future__ import annotations

import argparse
import json
import pathlib
import platform
import time

import jax
import numpy as np

import specjax
from specjax import measure, testing
from specjax import tree as tree_lib

REPO = pathlib.Path(__file__).resolve().parent.parent
SAMPLINGS = {"greedy": specjax.Sampling(), "top-p 0.9": specjax.Sampling(temperature=1.0, top_p=0.9)}


def parse_args(argv=None):
  ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  ap.add_argument("--vocabs", default="4096,262144", help="comma-separated vocabulary sizes")
  ap.add_argument("--batch", type=int, default=8)
  ap.add_argument("--gamma", type=int, default=7, help="drafts per round of the chain draft model")
  ap.add_argument("--children", default="1,1,3,1,1,1,1,1",
                  help="SpecInfer children per depth for the tree drafter (its gamma is the depth)")
  ap.add_argument("--drafters", default="chain,tree", help="chain (draft model) and/or tree (SpecInfer)")
  ap.add_argument("--samplings", default="greedy,top-p", help="greedy and/or top-p (temperature 1, top_p 0.9)")
  ap.add_argument("--max-new-tokens", type=int, default=32)
  ap.add_argument("--prompt-len", type=int, default=16)
  ap.add_argument("--repeats", type=int, default=3)
  ap.add_argument("--out-dir", default=str(REPO / "benchmarks" / "large_vocab"))
  ap.add_argument("--name", default="results", help="output file stem (e.g. before, after)")
  ap.add_argument("--target", default="", help="a real checkpoint as the target (load_pretrained source)")
  return ap.parse_args(argv)


def models(vocab, target_source=""):
  if target_source:
    target = specjax.load_pretrained(target_source)[0]
    vocab = target.vocab_size
  else:
    target = testing.tiny_decoder(vocab, seed=0, d_model=64, mlp_dim=128, num_layers=2)
  drafter = testing.tiny_decoder(vocab, seed=1, d_model=32, mlp_dim=64, num_layers=1)
  return target, drafter


def timed(fn, repeats):
  out = fn()  # compile + warm-up
  times = []
  for _ in range(max(repeats, 1)):
    t0 = time.perf_counter()
    out = fn()
    times.append(time.perf_counter() - t0)
  return out, float(np.median(times))


def floor_seconds(target, drafter, prompts, lengths, max_len, kind, gamma, tree):
  """The forward passes of one round: the drafter's passes plus one target verify pass."""
  step = lambda m, t: measure.target_step_seconds(m, prompts, lengths, t, max_len, repeats=3, inner=3)
  if kind == "chain":  # DraftModel: 2 tokens (catch-up) then gamma - 1 single tokens; verify gamma + 1
    return step(drafter, 2) + (gamma - 1) * step(drafter, 1) + step(target, gamma + 1)
  # SpecInfer: depth + 1 catch-up tokens, then levels 1..depth-1; verify every node
  levels = np.bincount(tree.depth)[1:tree.max_depth]
  return (step(drafter, tree.max_depth + 1) + sum(step(drafter, int(n)) for n in levels)
          + step(target, tree.num_nodes))


def bench(args):
  vocabs = [int(v) for v in args.vocabs.split(",")]
  kinds = [k.strip() for k in args.drafters.split(",") if k.strip()]
  samplings = {"greedy": "greedy", "top-p": "top-p 0.9"}
  names = [samplings[s.strip()] for s in args.samplings.split(",") if s.strip()]
  children = tuple(int(c) for c in args.children.split(","))
  tree = tree_lib.from_children(children)
  rng = np.random.default_rng(0)
  rows = []
  for vocab in ([0] if args.target else vocabs):
    target, drafter_model = models(vocab, args.target)
    vocab = target.vocab_size
    prompts = rng.integers(1, vocab, (args.batch, args.prompt_len)).astype(np.int32)
    lengths = np.full((args.batch,), args.prompt_len, np.int32)
    max_len = args.prompt_len + args.max_new_tokens + tree.num_nodes + 2
    floors = {}
    for name in names:
      sampling = SAMPLINGS[name]
      out, secs = timed(lambda: specjax.generate(target, prompts, lengths, max_new_tokens=args.max_new_tokens,
                                                 sampling=sampling, max_len=max_len), args.repeats)
      ar_ms = 1e3 * secs / out.stats["iterations"]
      row = {"vocab": vocab, "sampling": name, "ar_ms": round(ar_ms, 3)}
      print(f"V={vocab} {name}: autoregressive {ar_ms:.2f} ms/step", flush=True)
      for kind in kinds:
        if kind == "chain":
          drafter, gamma = specjax.drafters.DraftModel(drafter_model), args.gamma
        elif kind == "tree":
          drafter, gamma = specjax.drafters.SpecInfer(drafter_model, children), tree.max_depth
        else:
          raise ValueError(f"unknown drafter kind {kind!r}; expected chain or tree")
        out, secs = timed(lambda: specjax.speculative_generate(
            target, drafter, prompts, lengths, gamma=gamma, max_new_tokens=args.max_new_tokens,
            sampling=sampling, max_len=max_len), args.repeats)
        spec_ms = 1e3 * secs / out.stats["iterations"]
        if kind not in floors:
          floors[kind] = 1e3 * floor_seconds(target, drafter_model, prompts, lengths, max_len, kind, gamma, tree)
        row[f"{kind}_spec_ms"] = round(spec_ms, 3)
        row[f"{kind}_floor_ms"] = round(floors[kind], 3)
        row[f"{kind}_iterations"] = out.stats["iterations"]
        row[f"{kind}_tokens_per_iteration"] = out.stats["tokens_per_iteration"]
        print(f"  {kind}: {spec_ms:.2f} ms/iteration ({out.stats['iterations']} iterations), "
              f"forward floor {floors[kind]:.2f} ms", flush=True)
      rows.append(row)
  return rows, {"tree_nodes": tree.num_nodes, "tree_depth": tree.max_depth, "children": children}


def markdown(rows, kinds, args, info):
  head = ["vocab", "sampling", "AR step (ms)"]
  for k in kinds:
    label = f"chain gamma={args.gamma}" if k == "chain" else f"tree {info['tree_nodes']} nodes"
    head += [f"{label} iteration (ms)", f"{label} floor (ms)"]
  lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
  for r in rows:
    cells = [f"{r['vocab']:,}", r["sampling"], f"{r['ar_ms']:.2f}"]
    for k in kinds:
      cells += [f"{r[k + '_spec_ms']:.1f}", f"{r[k + '_floor_ms']:.1f}"]
    lines.append("| " + " | ".join(cells) + " |")
  return "\n".join(lines)


def main(argv=None):
  args = parse_args(argv)
  kinds = [k.strip() for k in args.drafters.split(",") if k.strip()]
  rows, info = bench(args)
  table = markdown(rows, kinds, args, info)
  meta = {"batch": args.batch, "gamma": args.gamma, "max_new_tokens": args.max_new_tokens,
          "prompt_len": args.prompt_len, "repeats": args.repeats, "jax": jax.__version__,
          "backend": jax.default_backend(), "machine": platform.processor() or platform.machine(), **info}
  header = (f"Target {args.target or 'tiny random decoder'}; batch {args.batch}, {args.max_new_tokens} new tokens, prompt {args.prompt_len}, chain gamma "
            f"{args.gamma}, tree children {info['children']} ({info['tree_nodes']} nodes, depth "
            f"{info['tree_depth']}); jax {jax.__version__} on {jax.default_backend()}. "
            "Floor: the round's drafter forwards + one target verify forward (logits only).")
  print("\n" + header + "\n\n" + table)
  out = pathlib.Path(args.out_dir)
  out.mkdir(parents=True, exist_ok=True)
  (out / f"{args.name}.md").write_text(header + "\n\n" + table + "\n")
  (out / f"{args.name}.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=1) + "\n")


if __name__ == "__main__":
  main()
