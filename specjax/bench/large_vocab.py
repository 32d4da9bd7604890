"""Large-vocabulary cost of sampling and verification: per autoregressive step and per speculative iteration.

  python -m specjax.bench large_vocab                                   # 4,096 and 262,144, all drafters
  python -m specjax.bench large_vocab --vocabs=4096 --drafters=chain --samplings=greedy --name=smoke
  python -m specjax.bench large_vocab --target=gemma3-270m --batch=1 --max_new_tokens=4 --repeats=1 --name=gemma3_b1

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
  shapes (:func:`specjax.measure.target_step_seconds`, logits only, no sampling). A round that
  costs about ``floor_ms`` spends nothing on V-sized bookkeeping.

Every time is the median of ``--repeats`` timed calls after one compile-and-warm-up call
(:func:`specjax.measure.median_time`). Writes ``<out_dir>/<name>.md`` and ``<name>.json`` and
prints the table.
"""
from __future__ import annotations

import platform

from specjax.bench import common

KINDS = ("chain", "tree")
SAMPLINGS = {"greedy": "greedy", "top-p": "top-p 0.9"}  # flag value -> row label


def sampling_of(label: str):
  import specjax  # pylint: disable=import-outside-toplevel
  return specjax.Sampling() if label == "greedy" else specjax.Sampling(temperature=1.0, top_p=0.9)


def models(vocab, target_source=""):
  import specjax  # pylint: disable=import-outside-toplevel
  from specjax import testing  # pylint: disable=import-outside-toplevel
  if target_source:
    target = specjax.load_pretrained(target_source)[0]
    vocab = target.vocab_size
  else:
    target = testing.tiny_decoder(vocab, seed=0, d_model=64, mlp_dim=128, num_layers=2)
  drafter = testing.tiny_decoder(vocab, seed=1, d_model=32, mlp_dim=64, num_layers=1)
  return target, drafter


def floor_seconds(target, drafter, prompts, lengths, max_len, kind, gamma, tree):
  """The forward passes of one round: the drafter's passes plus one target verify pass."""
  import numpy as np  # pylint: disable=import-outside-toplevel
  from specjax import measure  # pylint: disable=import-outside-toplevel
  step = lambda m, t: measure.target_step_seconds(m, prompts, lengths, t, max_len, repeats=3, inner=3)
  if kind == "chain":  # DraftModel: 2 tokens (catch-up) then gamma - 1 single tokens; verify gamma + 1
    return step(drafter, 2) + (gamma - 1) * step(drafter, 1) + step(target, gamma + 1)
  # SpecInfer: depth + 1 catch-up tokens, then levels 1..depth-1; verify every node
  levels = np.bincount(tree.depth)[1:tree.max_depth]
  return (step(drafter, tree.max_depth + 1) + sum(step(drafter, int(n)) for n in levels)
          + step(target, tree.num_nodes))


def bench(fv, vocabs, kinds, labels, children):
  import numpy as np  # pylint: disable=import-outside-toplevel
  import specjax  # pylint: disable=import-outside-toplevel
  from specjax import measure  # pylint: disable=import-outside-toplevel
  from specjax import tree as tree_lib  # pylint: disable=import-outside-toplevel
  tree = tree_lib.from_children(children)
  rng = np.random.default_rng(0)
  new, plen = fv.max_new_tokens, fv.prompt_len
  rows = []
  for vocab in ([0] if fv.target else vocabs):
    target, drafter_model = models(vocab, fv.target)
    vocab = target.vocab_size
    prompts = rng.integers(1, vocab, (fv.batch, plen)).astype(np.int32)
    lengths = np.full((fv.batch,), plen, np.int32)
    max_len = plen + new + tree.num_nodes + 2
    floors = {}
    for name in labels:
      sampling = sampling_of(name)
      out, secs = measure.median_time(lambda: specjax.generate(  # pylint: disable=cell-var-from-loop
          target, prompts, lengths, max_new_tokens=new, sampling=sampling, max_len=max_len), fv.repeats)
      ar_ms = 1e3 * secs / out.stats["iterations"]
      row = {"vocab": vocab, "sampling": name, "ar_ms": round(ar_ms, 3)}
      print(f"V={vocab} {name}: autoregressive {ar_ms:.2f} ms/step", flush=True)
      for kind in kinds:
        if kind == "chain":
          drafter, gamma = specjax.drafters.DraftModel(drafter_model), fv.gamma
        else:
          drafter, gamma = specjax.drafters.SpecInfer(drafter_model, children), tree.max_depth
        out, secs = measure.median_time(lambda: specjax.speculative_generate(  # pylint: disable=cell-var-from-loop
            target, drafter, prompts, lengths, gamma=gamma, max_new_tokens=new, sampling=sampling,
            max_len=max_len), fv.repeats)
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


def markdown(rows, kinds, gamma, info):
  head = ["vocab", "sampling", "AR step (ms)"]
  for k in kinds:
    label = f"chain gamma={gamma}" if k == "chain" else f"tree {info['tree_nodes']} nodes"
    head += [f"{label} iteration (ms)", f"{label} floor (ms)"]
  lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
  for r in rows:
    cells = [f"{r['vocab']:,}", r["sampling"], f"{r['ar_ms']:.2f}"]
    for k in kinds:
      cells += [f"{r[k + '_spec_ms']:.1f}", f"{r[k + '_floor_ms']:.1f}"]
    lines.append("| " + " | ".join(cells) + " |")
  return "\n".join(lines)


def _flags():
  from absl import flags  # pylint: disable=import-outside-toplevel
  fv = flags.FlagValues()
  flags.DEFINE_list("vocabs", "4096,262144", "vocabulary sizes of the tiny random pair", flag_values=fv)
  flags.DEFINE_integer("batch", 8, "rows per call", flag_values=fv)
  flags.DEFINE_integer("gamma", 7, "drafts per round of the chain draft model", flag_values=fv)
  flags.DEFINE_list("children", "1,1,3,1,1,1,1,1",
                    "SpecInfer children per depth for the tree drafter (its gamma is the depth)", flag_values=fv)
  flags.DEFINE_list("drafters", "chain,tree", "chain (draft model) and/or tree (SpecInfer)", flag_values=fv)
  flags.DEFINE_list("samplings", "greedy,top-p", "greedy and/or top-p (temperature 1, top_p 0.9)", flag_values=fv)
  flags.DEFINE_integer("max_new_tokens", 32, "new tokens per row", flag_values=fv)
  flags.DEFINE_integer("prompt_len", 16, "prompt tokens per row", flag_values=fv)
  flags.DEFINE_integer("repeats", 3, "timed calls after the compile run (median)", flag_values=fv)
  flags.DEFINE_string("out_dir", str(common.REPO / "benchmarks" / "large_vocab"), "where <name>.md/.json go",
                      flag_values=fv)
  flags.DEFINE_string("name", "results", "output file stem (e.g. before, after)", flag_values=fv)
  flags.DEFINE_string("target", "", "a real checkpoint as the target (load_pretrained source)", flag_values=fv)
  return fv


def _run(fv) -> int:
  vocabs = common.parse_list(fv.vocabs, int, "vocabs", lambda v: v >= 2)
  kinds = common.parse_list(fv.drafters, str, "drafters", lambda k: k in KINDS)
  labels = [SAMPLINGS[s] for s in common.parse_list(fv.samplings, str, "samplings", lambda s: s in SAMPLINGS)]
  children = tuple(common.parse_list(fv.children, int, "children", lambda c: c >= 1))
  for name in ("batch", "gamma", "max_new_tokens", "prompt_len", "repeats"):
    if fv[name].value < 1:
      raise common.UsageError(f"--{name} must be >= 1, got {fv[name].value}")
  import jax  # pylint: disable=import-outside-toplevel
  rows, info = bench(fv, vocabs, kinds, labels, children)
  table = markdown(rows, kinds, fv.gamma, info)
  meta = {"batch": fv.batch, "gamma": fv.gamma, "max_new_tokens": fv.max_new_tokens,
          "prompt_len": fv.prompt_len, "repeats": fv.repeats, "jax": jax.__version__,
          "backend": jax.default_backend(), "machine": platform.processor() or platform.machine(), **info}
  header = (f"Target {fv.target or 'tiny random decoder'}; batch {fv.batch}, {fv.max_new_tokens} new tokens, prompt "
            f"{fv.prompt_len}, chain gamma {fv.gamma}, tree children {info['children']} ({info['tree_nodes']} nodes, "
            f"depth {info['tree_depth']}); jax {jax.__version__} on {jax.default_backend()}. "
            "Floor: the round's drafter forwards + one target verify forward (logits only).")
  common.write_report(fv.out_dir, fv.name, header, table, meta, rows)
  return 0


def main(argv) -> int:
  fv = _flags()
  return common.run_task(fv, argv, __doc__, "large_vocab", lambda: _run(fv))
