"""specjax vs Hugging Face transformers on the same weights, on CPU: same tokens? how fast?

  python scripts/compare_hf.py                                   # demo pair (tiny random if absent)
  python scripts/compare_hf.py --config=configs/tiny_random.py --batch_sizes=1 --max_new_tokens=8 \
      --repeats=1 --torch_threads=1 --out_dir=/tmp/compare_hf

Exports the config's target and drafter to ``LlamaForCausalLM`` folders (specjax.hf_export), then
times, greedy: transformers ``generate``; transformers assisted generation (``assistant_model=``,
``num_assistant_tokens=gamma`` with a constant schedule); specjax ``generate``; specjax
``speculative_generate`` with the same gamma. specjax runs on the weights read back from the HF
folders (specjax.hf_import), so both libraries see the same files. Every method must produce the
tokens of transformers' greedy ``generate``; the table says so per row. transformers refuses
assisted generation for batch > 1; those rows show its error message. Writes ``compare_hf.md``
and ``compare_hf.json`` under ``--out_dir``. Needs ``pip install .[hf]`` (torch, transformers).
On a machine that is busy with other work, pass ``--torch_threads=1``: torch's spinning OpenMP
threads otherwise make transformers look many times slower than it is.
"""
from __future__ import annotations

import datetime
import json
import pathlib
import sys

from absl import app, flags
import jax
import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import benchmark  # noqa: E402  pylint: disable=wrong-import-position  (--config, load_pair, timing)
import specjax  # noqa: E402  pylint: disable=wrong-import-position
from specjax.hf_export import to_hf_llama  # noqa: E402  pylint: disable=wrong-import-position
from specjax.hf_import import from_hf  # noqa: E402  pylint: disable=wrong-import-position

for _name in ("drafters", "temperatures", "gammas"):  # benchmark.py's sweep flags mean nothing here
  flags.FLAGS[_name].help = "(unused by compare_hf.py)"
flags.FLAGS.set_default("batch_sizes", "1,8")
flags.FLAGS.set_default("out_dir", "benchmarks/compare_hf")
_GAMMA = flags.DEFINE_integer("gamma", None, "draft length for both libraries (default: the config's)")
# torch's OpenMP threads spin while waiting: on a busy machine 2 threads ran 25x slower than 1 here
_TORCH_THREADS = flags.DEFINE_integer("torch_threads", 0, "torch CPU threads; 0: torch's default")


def hf_generate(torch, hf, prompts, max_new: int, **kw):
  ids = torch.tensor(np.asarray(prompts), dtype=torch.long)
  with torch.inference_mode():
    out = hf.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False, max_new_tokens=max_new,
                      min_new_tokens=max_new, pad_token_id=0, **kw)
  return out[:, ids.shape[1]:].numpy()


def compare(config, target, drafter_model, *, gamma, batches, max_new, repeats, workdir, is_demo) -> list[dict]:
  import torch  # pylint: disable=import-outside-toplevel
  import transformers  # pylint: disable=import-outside-toplevel
  transformers.utils.logging.set_verbosity_error()  # no load progress bars or deprecation chatter in the table
  transformers.utils.logging.disable_progress_bar()
  if _TORCH_THREADS.value:
    torch.set_num_threads(_TORCH_THREADS.value)
  hf_t = transformers.LlamaForCausalLM.from_pretrained(to_hf_llama(target, workdir / "target")).eval()
  hf_d = transformers.LlamaForCausalLM.from_pretrained(to_hf_llama(drafter_model, workdir / "drafter")).eval()
  hf_d.generation_config.num_assistant_tokens = gamma  # HF's gamma, fixed like ours
  hf_d.generation_config.num_assistant_tokens_schedule = "constant"
  hf_d.generation_config.assistant_confidence_threshold = 0.0  # no early stop of a draft: always gamma
  target, drafter = from_hf(workdir / "target"), specjax.drafters.DraftModel(from_hf(workdir / "drafter"))
  rows = []
  for b in batches:
    cfg = config.copy_and_resolve_references()
    cfg.batch_size = b
    prompts, lengths = benchmark.prompts_lib.from_config(cfg, benchmark.ByteTokenizer() if is_demo else None,
                                                         target.vocab_size)
    common = dict(max_new_tokens=max_new)
    methods = [
        ("transformers generate", lambda: hf_generate(torch, hf_t, prompts, max_new), None),
        (f"transformers assisted (γ={gamma})",
         lambda: hf_generate(torch, hf_t, prompts, max_new, assistant_model=hf_d), None),
        ("specjax generate", lambda: specjax.generate(target, prompts, lengths, **common), "ar"),
        (f"specjax speculative_generate (γ={gamma})",
         lambda: specjax.speculative_generate(target, drafter, prompts, lengths, gamma=gamma, **common), "spec"),
    ]
    reference = None
    for name, fn, kind in methods:
      row = {"batch_size": b, "method": name, "tokens_per_s": None, "identical_to_hf_greedy": None,
             "target_calls": None, "mean_accepted": None, "note": ""}
      try:
        out, t = benchmark.median_time(fn, repeats)
      except ValueError as e:  # transformers: assisted generation is batch 1 only
        row["note"] = f"refused by transformers: {str(e).splitlines()[0]}"
        rows.append(row)
        continue
      tokens = out if kind is None else out.tokens
      reference = tokens if reference is None else reference  # transformers greedy runs first
      row.update(tokens_per_s=float(tokens.size / t), identical_to_hf_greedy=bool(np.array_equal(tokens, reference)))
      if kind is not None:
        row["target_calls"] = out.stats["target_calls"]
        row["mean_accepted"] = out.stats.get("mean_accepted")
      rows.append(row)
  return rows


def markdown(rows, meta) -> str:
  lines = [f"target {meta['target_params']:,} params, drafter {meta['drafter_params']:,}; greedy, "
           f"{meta['max_new_tokens']} new tokens/row, median of {meta['repeats']}; CPU "
           f"(torch threads {meta['torch_threads']}, jax {meta['jax']}, transformers {meta['transformers']})", "",
           "| batch | method | tokens/s | same tokens as transformers greedy | target calls | mean accepted | note |",
           "|---|---|---|---|---|---|---|"]
  for r in rows:
    same = {True: "yes", False: "**NO**", None: "-"}[r["identical_to_hf_greedy"]]
    tps = f"{r['tokens_per_s']:.1f}" if r["tokens_per_s"] else "-"
    lines.append(f"| {r['batch_size']} | {r['method']} | {tps} | {same} | {r['target_calls'] or '-'} "
                 f"| {r['mean_accepted'] if r['mean_accepted'] is not None else '-'} | {r['note']} |")
  return "\n".join(lines)


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments: {argv[1:]}")
  batches = benchmark.parse_list(flags.FLAGS.batch_sizes, int, "batch_sizes", lambda b: b >= 1)
  config, target, drafter_model, is_demo = benchmark.load_pair(flags.FLAGS.config)
  if drafter_model is None:
    raise app.UsageError("compare_hf.py needs a config with a `drafter` model")
  gamma = _GAMMA.value or config.drafter.gamma
  max_new = flags.FLAGS.max_new_tokens or config.max_new_tokens
  repeats = flags.FLAGS.repeats or config.repeats
  out = pathlib.Path(flags.FLAGS.out_dir)
  rows = compare(config, target, drafter_model, gamma=gamma, batches=batches, max_new=max_new, repeats=repeats,
                 workdir=out / "hf", is_demo=is_demo)
  import torch  # pylint: disable=import-outside-toplevel
  import transformers  # pylint: disable=import-outside-toplevel
  meta = {"demo_weights": is_demo, "target_params": target.num_params, "drafter_params": drafter_model.num_params,
          "gamma": gamma, "max_new_tokens": max_new, "repeats": repeats, "torch_threads": torch.get_num_threads(),
          "jax": jax.__version__, "torch": torch.__version__, "transformers": transformers.__version__,
          "devices": [str(d) for d in jax.devices()], "date": datetime.datetime.now().isoformat(timespec="seconds"),
          "all_identical": all(r["identical_to_hf_greedy"] is not False for r in rows)}
  table = markdown(rows, meta)
  (out / "compare_hf.md").write_text(table + "\n")
  (out / "compare_hf.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=2) + "\n")
  print(table)
  print("all methods produced transformers' greedy tokens:", "yes" if meta["all_identical"] else "NO")
  print(f"wrote {out}/compare_hf.md, compare_hf.json (HF folders under {out}/hf)")


if __name__ == "__main__":
  app.run(main)
