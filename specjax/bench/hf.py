"""specjax vs Hugging Face transformers on the same weights, on CPU: same tokens? how fast?

  python -m specjax.bench hf                                     # demo pair (tiny random if absent)
  python -m specjax.bench hf --config=configs/tiny_random.py --batch_sizes=1 --max_new_tokens=8 \\
      --repeats=1 --torch_threads=1 --out_dir=/tmp/compare_hf
  python -m specjax.bench hf --real                              # SmolLM2 and Gemma 3, batch 1 and 8
  python -m specjax.bench hf --real --models=smollm2-135m-instruct --batch_sizes=1 --max_new_tokens=4 \\
      --prompt_len=8 --repeats=1 --out_dir=/tmp/compare_hf_real

**A config's pair** (default; out_dir benchmarks/compare_hf): exports the config's target and
drafter to ``LlamaForCausalLM`` folders (specjax.hf_export), then times, greedy: transformers
``generate``; transformers assisted generation (``assistant_model=``, ``num_assistant_tokens=gamma``
with a constant schedule); specjax ``generate``; specjax ``speculative_generate`` with the same
gamma (each the median of ``--repeats`` after a compile run, :func:`specjax.measure.median_time`).
specjax runs on the weights read back from the HF folders (specjax.hf_import), so both libraries
see the same files. Every method must produce the tokens of transformers' greedy ``generate``; the
table says so per row. transformers refuses assisted generation for batch > 1; those rows show its
error message. Writes ``compare_hf.md`` and ``compare_hf.json``. On a machine that is busy with
other work, pass ``--torch_threads=1``: torch's spinning OpenMP threads otherwise make
transformers look many times slower than it is.

**The real pretrained models** (``--real``; out_dir benchmarks/real_models): both libraries load
the same GGUF file (specjax.load_pretrained(name); transformers ``from_pretrained(folder,
gguf_file=...)``, float32). Prompts are real texts (Python, C, English, German), tokenized with the
model's tokenizer and cut to ``--prompt_len`` tokens, so every row has the same length and
transformers needs no padding; batch B takes the first B texts. Greedy, no EOS stop. Per model
and batch size, timed round-robin (:func:`specjax.measure.round_robin_times`): transformers
``generate`` at each ``--torch_threads`` (the best of them is the reference speed), specjax
``generate``, specjax ``speculative_generate`` with an n-gram drafter (NGram(3), gamma 4). Every
method's tokens are checked against transformers' greedy tokens (its first thread setting).
Writes ``compare_hf_real.md`` and ``compare_hf_real.json``.

Needs ``pip install .[hf]`` (torch, transformers).
"""
from __future__ import annotations

import datetime
import pathlib

from specjax.bench import common, gamma

CONFIG_ONLY = ("config", "gamma")
REAL_ONLY = ("models", "prompt_len")


def hf_generate(torch, hf, prompts, max_new: int, **kw):
  import numpy as np  # pylint: disable=import-outside-toplevel
  ids = torch.tensor(np.asarray(prompts), dtype=torch.long)
  with torch.inference_mode():
    out = hf.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False, max_new_tokens=max_new,
                      min_new_tokens=max_new, pad_token_id=0, **kw)
  return out[:, ids.shape[1]:].numpy()


def compare(config, target, drafter_model, *, gamma_, batches, max_new, repeats, workdir, is_demo,
            torch_threads) -> list[dict]:
  import numpy as np  # pylint: disable=import-outside-toplevel
  import torch  # pylint: disable=import-outside-toplevel
  import transformers  # pylint: disable=import-outside-toplevel
  import specjax  # pylint: disable=import-outside-toplevel
  from specjax import measure  # pylint: disable=import-outside-toplevel
  from specjax.hf_export import to_hf_llama  # pylint: disable=import-outside-toplevel
  from specjax.hf_import import from_hf  # pylint: disable=import-outside-toplevel
  transformers.utils.logging.set_verbosity_error()  # no load progress bars or deprecation chatter in the table
  transformers.utils.logging.disable_progress_bar()
  if torch_threads:
    torch.set_num_threads(torch_threads)
  hf_t = transformers.LlamaForCausalLM.from_pretrained(to_hf_llama(target, workdir / "target")).eval()
  hf_d = transformers.LlamaForCausalLM.from_pretrained(to_hf_llama(drafter_model, workdir / "drafter")).eval()
  hf_d.generation_config.num_assistant_tokens = gamma_  # HF's gamma, fixed like ours
  hf_d.generation_config.num_assistant_tokens_schedule = "constant"
  hf_d.generation_config.assistant_confidence_threshold = 0.0  # no early stop of a draft: always gamma
  target, drafter = from_hf(workdir / "target"), specjax.drafters.DraftModel(from_hf(workdir / "drafter"))
  rows = []
  for b in batches:
    prompts, lengths = gamma.config_prompts(config, b, is_demo, target.vocab_size)
    methods = [
        ("transformers generate", lambda: hf_generate(torch, hf_t, prompts, max_new), None),
        (f"transformers assisted (γ={gamma_})",
         lambda: hf_generate(torch, hf_t, prompts, max_new, assistant_model=hf_d), None),
        ("specjax generate", lambda: specjax.generate(target, prompts, lengths, max_new_tokens=max_new), "ar"),
        (f"specjax speculative_generate (γ={gamma_})",
         lambda: specjax.speculative_generate(target, drafter, prompts, lengths, gamma=gamma_,
                                              max_new_tokens=max_new), "spec"),
    ]
    reference = None
    for name, fn, kind in methods:
      row = {"batch_size": b, "method": name, "tokens_per_s": None, "identical_to_hf_greedy": None,
             "target_calls": None, "mean_accepted": None, "note": ""}
      try:
        out, t = measure.median_time(fn, repeats)
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


def run_config_pair(fv, batches, threads) -> int:
  import jax  # pylint: disable=import-outside-toplevel
  if len(threads) != 1:
    raise common.UsageError(f"--torch_threads: one value for a config's pair (0: torch's default), got {threads}")
  config, target, drafter_model, is_demo = gamma.load_pair(fv.config)
  if drafter_model is None:
    raise common.UsageError("the hf command needs a config with a `drafter` model")
  gamma_ = fv.gamma or config.drafter.gamma
  max_new = fv.max_new_tokens or config.max_new_tokens
  repeats = fv.repeats or config.repeats
  out = common.out_dir(fv.out_dir or "benchmarks/compare_hf")
  rows = compare(config, target, drafter_model, gamma_=gamma_, batches=batches, max_new=max_new, repeats=repeats,
                 workdir=out / "hf", is_demo=is_demo, torch_threads=threads[0])
  import torch  # pylint: disable=import-outside-toplevel
  import transformers  # pylint: disable=import-outside-toplevel
  meta = {"demo_weights": is_demo, "target_params": target.num_params, "drafter_params": drafter_model.num_params,
          "gamma": gamma_, "max_new_tokens": max_new, "repeats": repeats, "torch_threads": torch.get_num_threads(),
          "jax": jax.__version__, "torch": torch.__version__, "transformers": transformers.__version__,
          "devices": [str(d) for d in jax.devices()], "date": datetime.datetime.now().isoformat(timespec="seconds"),
          "all_identical": all(r["identical_to_hf_greedy"] is not False for r in rows)}
  table = markdown(rows, meta)
  (out / "compare_hf.md").write_text(table + "\n")
  common.write_json(out / "compare_hf.json", {"meta": meta, "rows": rows})
  print(table)
  print("all methods produced transformers' greedy tokens:", "yes" if meta["all_identical"] else "NO")
  print(f"wrote {out}/compare_hf.md, compare_hf.json (HF folders under {out}/hf)")
  return 0


def _flags():
  from absl import flags  # pylint: disable=import-outside-toplevel
  from ml_collections import config_flags  # pylint: disable=import-outside-toplevel
  from specjax.bench import hf_real  # pylint: disable=import-outside-toplevel
  fv = flags.FlagValues()
  flags.DEFINE_boolean("real", False, "the real pretrained models (GGUF) instead of --config's pair", flag_values=fv)
  config_flags.DEFINE_config_file("config", str(common.REPO / "configs" / "demo.py"), "experiment config file",
                                  flag_values=fv)
  flags.DEFINE_integer("gamma", None, "draft length for both libraries (default: the config's)", flag_values=fv)
  flags.DEFINE_list("models", list(hf_real.MODELS), f"--real: registered model names ({', '.join(hf_real.MODELS)})",
                    flag_values=fv)
  flags.DEFINE_integer("prompt_len", 32, "--real: prompt tokens per row (every row the same length)", flag_values=fv)
  flags.DEFINE_list("batch_sizes", "1,8", f"batch sizes (--real: at most {len(hf_real.TEXTS)}, one text per row)",
                    flag_values=fv)
  flags.DEFINE_integer("max_new_tokens", None, "new tokens per row (default: the config's; --real: 64)",
                       flag_values=fv)
  flags.DEFINE_integer("repeats", None, "timed runs per method (default: the config's; --real: 3 rounds)",
                       flag_values=fv)
  # torch's OpenMP threads spin while waiting: on a busy machine 2 threads ran 25x slower than 1 here
  flags.DEFINE_list("torch_threads", None, "torch CPU threads: one value, 0 for torch's default (default 0); --real: "
                    "every count to time transformers at, the best is the reference speed (default 1,2)",
                    flag_values=fv)
  flags.DEFINE_string("out_dir", "", "where the tables go (default benchmarks/compare_hf; --real: "
                      "benchmarks/real_models)", flag_values=fv)
  return fv


def _run(fv, argv) -> int:
  mode, other = ("--real", CONFIG_ONLY) if fv.real else ("a config's pair", REAL_ONLY)
  wrong = [f"--{name}" for name in other if fv[name].present]
  if wrong:
    raise common.UsageError(f"{', '.join(wrong)}: not used with {mode}")
  batches = common.parse_list(fv.batch_sizes, int, "batch_sizes", lambda b: b >= 1)
  threads = common.parse_list(fv.torch_threads or (["1", "2"] if fv.real else ["0"]), int, "torch_threads",
                              lambda t: t >= (1 if fv.real else 0))
  for name in ("max_new_tokens", "repeats", "prompt_len"):
    if fv[name].value is not None and fv[name].value < 1:
      raise common.UsageError(f"--{name} must be >= 1, got {fv[name].value}")
  if fv.real:
    from specjax.bench import hf_real  # pylint: disable=import-outside-toplevel
    return hf_real.run(fv, argv, batches, threads)
  return run_config_pair(fv, batches, threads)


def main(argv) -> int:
  fv = _flags()
  return common.run_task(fv, argv, __doc__, "hf", lambda: _run(fv, argv))
