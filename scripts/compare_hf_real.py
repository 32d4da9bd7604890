"""specjax vs Hugging Face transformers on the real pretrained models, on CPU: same tokens? how fast?

  python scripts/compare_hf_real.py                      # both models, batch 1 and 8, 64 new tokens
  python scripts/compare_hf_real.py --models=smollm2-135m-instruct --batch_sizes=1 --max_new_tokens=4 \
      --prompt_len=8 --repeats=1 --out_dir=/tmp/compare_hf_real

Both libraries load the same GGUF file (specjax.load_pretrained(name); transformers
``from_pretrained(folder, gguf_file=...)``, float32). Prompts are real texts (Python, C, English,
German), tokenized with the model's tokenizer and cut to ``--prompt_len`` tokens, so every row has
the same length and transformers needs no padding; batch B takes the first B texts (8 different
rows at batch 8). Greedy, no EOS stop: every method makes ``--max_new_tokens`` tokens per row.

Per model and batch size, timed round-robin in the same rounds (one untimed warm-up/compile call
each first, then ``--repeats`` rounds, medians; as specjax.measure.paired_times does for two):
transformers ``generate`` with torch at 1 thread and at 2 threads (``--torch_threads``; torch's
OpenMP threads spin on a busy machine, so it gets the best of them), specjax ``generate``, specjax
``speculative_generate`` with an n-gram drafter (NGram(3), gamma 4). Every method's tokens are
checked against transformers' greedy tokens (its first thread setting); the table says so per row. Writes
``compare_hf_real.md`` and ``compare_hf_real.json`` under ``--out_dir``.
"""
from __future__ import annotations

import datetime
import json
import pathlib
import platform
import shlex
import sys
import time

from absl import app, flags
import numpy as np

MODELS = ("smollm2-135m-instruct", "gemma3-270m")
GAMMA, NGRAM = 4, 3

# Varied real text; each is long enough for 64+ tokens with either tokenizer.
TEXTS = (
    # Python
    "def merge_sorted(a, b):\n    \"\"\"Merge two sorted lists into one sorted list.\"\"\"\n    i = j = 0\n"
    "    out = []\n    while i < len(a) and j < len(b):\n        if a[i] <= b[j]:\n            out.append(a[i])\n"
    "            i += 1\n        else:\n            out.append(b[j])\n            j += 1\n"
    "    out.extend(a[i:])\n    out.extend(b[j:])\n    return out\n",
    # English
    "The history of the printing press begins in the fifteenth century, when Johannes Gutenberg combined "
    "movable metal type, oil-based ink and a wooden screw press into a system that could produce books far "
    "faster than scribes. Within a few decades, printing shops had spread across Europe, and the price of "
    "books fell sharply, which changed how ideas travelled.",
    # German
    "Die Stadt Heidelberg liegt am Neckar und ist bekannt für ihre alte Universität, die im Jahr 1386 "
    "gegründet wurde. Über der Altstadt erhebt sich die Ruine des Schlosses, das jedes Jahr viele Besucher "
    "aus aller Welt anzieht. Im Sommer sitzen die Menschen am Flussufer und genießen den Abend.",
    # C
    "#include <stdio.h>\n#include <stdlib.h>\n\n/* Count the lines of a text file given on the command line. */\n"
    "int main(int argc, char **argv) {\n    if (argc != 2) {\n"
    "        fprintf(stderr, \"usage: %s FILE\\n\", argv[0]);\n"
    "        return 1;\n    }\n    FILE *f = fopen(argv[1], \"r\");\n    if (!f) {\n        perror(\"fopen\");\n"
    "        return 1;\n    }\n    long lines = 0;\n    int c;\n    while ((c = fgetc(f)) != EOF) {\n"
    "        if (c == '\\n') lines++;\n    }\n",
    # English, instructions
    "To bake a simple loaf of bread, mix five hundred grams of flour with ten grams of salt and seven grams "
    "of dried yeast. Add about three hundred and fifty millilitres of warm water and knead the dough for ten "
    "minutes until it is smooth and elastic. Leave it to rise in a warm place for an hour, then shape it.",
    # German, technical
    "Ein Compiler übersetzt den Quelltext eines Programms in Maschinencode. Zuerst zerlegt der Lexer den Text "
    "in einzelne Symbole, danach baut der Parser daraus einen Syntaxbaum auf. In weiteren Schritten wird der "
    "Baum geprüft, optimiert und schließlich in Befehle für den Prozessor umgewandelt.",
    # Python, numerical
    "import numpy as np\n\n\ndef softmax(x, axis=-1):\n    x = x - np.max(x, axis=axis, keepdims=True)\n"
    "    e = np.exp(x)\n    return e / np.sum(e, axis=axis, keepdims=True)\n\n\n"
    "def cross_entropy(logits, labels):\n    p = softmax(logits)\n    n = logits.shape[0]\n"
    "    return -np.mean(np.log(p[np.arange(n), labels] + 1e-12))\n",
    # English, dialogue
    "\"Are you sure this is the right road?\" asked Maria, looking at the map on her knees. \"The village "
    "should have appeared an hour ago.\" Tom kept his eyes on the narrow road ahead, where the fog was "
    "getting thicker with every mile. \"Trust me,\" he said, \"I have driven here a hundred times before.\"",
)

_FLAGS = flags.FlagValues()  # private: this script's flags never clash with benchmark.py's in one process
flags.DEFINE_list("models", list(MODELS), f"registered model names ({', '.join(MODELS)})", flag_values=_FLAGS)
flags.DEFINE_list("batch_sizes", ["1", "8"], f"batch sizes (at most {len(TEXTS)}: one text per row)",
                  flag_values=_FLAGS)
flags.DEFINE_integer("max_new_tokens", 64, "new tokens per row", lower_bound=1, flag_values=_FLAGS)
flags.DEFINE_integer("prompt_len", 32, "prompt tokens per row (every row the same length)", lower_bound=1,
                     flag_values=_FLAGS)
flags.DEFINE_integer("repeats", 3, "timed rounds after the warm-up (median)", lower_bound=1, flag_values=_FLAGS)
flags.DEFINE_list("torch_threads", ["1", "2"], "torch thread counts to time transformers at (its best is the "
                  "reference speed; tokens are checked against the first)", flag_values=_FLAGS)
flags.DEFINE_string("out_dir", "benchmarks/real_models", "where compare_hf_real.md/.json go", flag_values=_FLAGS)


def make_prompts(tok, batch: int, prompt_len: int) -> np.ndarray:
  """[batch, prompt_len] int32: the first ``batch`` texts, tokenized (with the tokenizer's BOS if it adds
  one) and cut to ``prompt_len`` tokens."""
  if batch > len(TEXTS):
    raise app.UsageError(f"batch {batch}: at most {len(TEXTS)} (one different text per row)")
  rows = []
  for text in TEXTS[:batch]:
    ids = list(tok.encode(text))
    if len(ids) < prompt_len:
      raise app.UsageError(f"--prompt_len={prompt_len}: a text has only {len(ids)} tokens")
    rows.append(ids[:prompt_len])
  return np.asarray(rows, np.int32)


def interleaved_times(fns: dict, repeats: int) -> tuple[dict, dict, dict]:
  """(outputs, median seconds, all seconds) per name: one untimed call each, then ``repeats`` rounds
  calling every fn once, in order, so load drifts on a shared machine hit all of them."""
  import jax  # pylint: disable=import-outside-toplevel
  outs = {k: jax.block_until_ready(fn()) for k, fn in fns.items()}
  times = {k: [] for k in fns}
  for _ in range(repeats):
    for k, fn in fns.items():
      t0 = time.perf_counter()
      outs[k] = jax.block_until_ready(fn())
      times[k].append(time.perf_counter() - t0)
  return outs, {k: float(np.median(v)) for k, v in times.items()}, times


def hf_model(torch, transformers, path):
  m = transformers.AutoModelForCausalLM.from_pretrained(str(path.parent), gguf_file=path.name,
                                                        dtype=torch.float32).eval()
  m.generation_config.eos_token_id = None  # both libraries run the full length
  m.generation_config.pad_token_id = 0
  return m


def hf_generate(torch, hf, prompts, max_new: int, threads: int) -> np.ndarray:
  torch.set_num_threads(threads)
  ids = torch.tensor(prompts, dtype=torch.long)
  with torch.inference_mode():
    out = hf.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False, max_new_tokens=max_new,
                      min_new_tokens=max_new)
  return out[:, ids.shape[1]:].numpy()


def compare_model(name: str, batches, *, max_new: int, prompt_len: int, repeats: int, torch_threads,
                  progress) -> list[dict]:
  import torch  # pylint: disable=import-outside-toplevel
  import transformers  # pylint: disable=import-outside-toplevel
  import specjax  # pylint: disable=import-outside-toplevel
  transformers.utils.logging.set_verbosity_error()
  transformers.utils.logging.disable_progress_bar()
  model, tok = specjax.load_pretrained(name, verbose=False)
  hf = hf_model(torch, transformers, specjax.registry.gguf_path(name))
  drafter = specjax.drafters.NGram(NGRAM)
  rows = []
  for b in batches:
    progress.set_description(f"{name} B={b}")
    prompts = make_prompts(tok, b, prompt_len)
    lengths = np.full((b,), prompt_len, np.int32)
    fns = {f"transformers generate (torch {t} thread{'s' if t > 1 else ''})":
           (lambda t=t: hf_generate(torch, hf, prompts, max_new, t)) for t in torch_threads}
    fns["specjax generate"] = lambda: specjax.generate(model, prompts, lengths, max_new_tokens=max_new)
    fns[f"specjax speculative_generate (n-gram {NGRAM}, γ={GAMMA})"] = lambda: specjax.speculative_generate(
        model, drafter, prompts, lengths, gamma=GAMMA, max_new_tokens=max_new)
    outs, med, all_times = interleaved_times(fns, repeats)
    hf_names = list(fns)[:len(torch_threads)]
    reference = outs[hf_names[0]]
    best_hf = min(hf_names, key=lambda k: med[k])
    for method, out in outs.items():
      tokens = np.asarray(out if method in hf_names else out.tokens)
      stats = {} if method in hf_names else dict(getattr(out, "stats", {}) or {})
      row = {"model": name, "batch_size": b, "method": method, "seconds": med[method],
             "seconds_all": all_times[method], "tokens_per_s": b * max_new / med[method],
             "ms_per_token_step": 1e3 * med[method] / max_new,
             "identical_to_hf_greedy": bool(tokens.shape == reference.shape and np.array_equal(tokens, reference)),
             "is_best_transformers": method == best_hf,
             "target_calls": _plain(stats.get("target_calls")),
             "tokens_per_iteration": _plain(stats.get("tokens_per_iteration"))}
      rows.append(row)
    best_tps = b * max_new / med[best_hf]
    for r in rows[-len(outs):]:
      r["ratio_vs_transformers_best"] = r["tokens_per_s"] / best_tps
    progress.update(1)
  return rows


def _plain(x):
  if x is None:
    return None
  x = np.asarray(x)
  return x.item() if x.size == 1 else x.tolist()


def markdown(rows, meta) -> str:
  lines = [f"# specjax vs transformers on real models ({meta['date']})", "",
           f"Greedy, {meta['prompt_len']}-token prompts (real code/English/German texts, one per row), "
           f"{meta['max_new_tokens']} new tokens/row, no EOS stop; median of {meta['repeats']} rounds timed "
           f"round-robin after one warm-up/compile call each. Machine: {meta['machine']}. "
           f"jax {meta['jax']}, torch {meta['torch']}, transformers {meta['transformers']}.", "",
           f"Command: `{meta['command']}`", "",
           "tok/s = batch x new tokens / seconds; ms/step = seconds / new tokens (one step makes one token per "
           "row); ratio = tok/s / tok/s of the faster transformers thread setting (marked *).", "",
           "| model | batch | method | tok/s | ms/step | ratio vs transformers best "
           "| tokens identical to transformers greedy | target calls | tokens/iteration |",
           "|---|---|---|---|---|---|---|---|---|"]
  for r in rows:
    star = " *" if r["is_best_transformers"] else ""
    same = "yes" if r["identical_to_hf_greedy"] else "**NO**"
    tpi = f"{r['tokens_per_iteration']:.2f}" if isinstance(r["tokens_per_iteration"], float) else "-"
    lines.append(f"| {r['model']} | {r['batch_size']} | {r['method']}{star} | {r['tokens_per_s']:.1f} "
                 f"| {r['ms_per_token_step']:.1f} | {r['ratio_vs_transformers_best']:.2f} | {same} "
                 f"| {r['target_calls'] if r['target_calls'] is not None else '-'} | {tpi} |")
  lines += ["", f"All methods produced transformers' greedy tokens: {'yes' if meta['all_identical'] else 'NO'}"]
  return "\n".join(lines)


def run(models, batches, *, max_new: int, prompt_len: int, repeats: int, out_dir, command: str,
        torch_threads=(1, 2)) -> dict:
  from tqdm import tqdm  # pylint: disable=import-outside-toplevel
  for m in models:
    if m not in MODELS:
      raise app.UsageError(f"--models: unknown {m!r}; choose from {', '.join(MODELS)}")
  rows, start = [], time.time()
  with tqdm(total=len(models) * len(batches), unit="cell", file=sys.stderr) as progress:
    for m in models:
      rows += compare_model(m, batches, max_new=max_new, prompt_len=prompt_len, repeats=repeats,
                            torch_threads=torch_threads, progress=progress)
  import jax  # pylint: disable=import-outside-toplevel
  import torch  # pylint: disable=import-outside-toplevel
  import transformers  # pylint: disable=import-outside-toplevel
  import os  # pylint: disable=import-outside-toplevel
  meta = {"date": datetime.datetime.now().isoformat(timespec="seconds"), "command": command,
          "machine": f"CPU only, {os.cpu_count()} cores shared with other work ({platform.machine()}, "
                     f"{platform.processor() or platform.platform()})",
          "load_average_at_end": list(os.getloadavg()) if hasattr(os, "getloadavg") else None,
          "wall_seconds": time.time() - start, "models": list(models), "batch_sizes": list(batches),
          "max_new_tokens": max_new, "prompt_len": prompt_len, "repeats": repeats, "gamma": GAMMA, "ngram": NGRAM,
          "torch_threads_tried": list(torch_threads), "jax": jax.__version__, "torch": torch.__version__,
          "transformers": transformers.__version__, "devices": [str(d) for d in jax.devices()][:1],
          "all_identical": all(r["identical_to_hf_greedy"] for r in rows)}
  table = markdown(rows, meta)
  out = pathlib.Path(out_dir)
  out.mkdir(parents=True, exist_ok=True)
  (out / "compare_hf_real.md").write_text(table + "\n")
  (out / "compare_hf_real.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=2) + "\n")
  print(table)
  print(f"wrote {out}/compare_hf_real.md, compare_hf_real.json")
  return {"meta": meta, "rows": rows}


def main(argv) -> dict:
  """``argv`` as from the command line (argv[0] is the program)."""
  _FLAGS.unparse_flags()
  try:
    rest = _FLAGS(list(argv))
  except flags.Error as e:
    raise app.UsageError(str(e)) from e
  if len(rest) > 1:
    raise app.UsageError(f"unexpected arguments: {rest[1:]}")
  batches = _positive_ints(_FLAGS.batch_sizes, "batch_sizes")
  threads = _positive_ints(_FLAGS.torch_threads, "torch_threads")
  command = "python scripts/compare_hf_real.py " + " ".join(shlex.quote(a) for a in argv[1:])
  return run(_FLAGS.models, batches, max_new=_FLAGS.max_new_tokens, prompt_len=_FLAGS.prompt_len,
             repeats=_FLAGS.repeats, out_dir=_FLAGS.out_dir, command=command.strip(), torch_threads=threads)


def _positive_ints(values, name: str) -> list[int]:
  try:
    out = [int(v) for v in values]
  except ValueError as e:
    raise app.UsageError(f"--{name}: {e}") from e
  if not out or min(out) < 1:
    raise app.UsageError(f"--{name}: positive integers, comma-separated")
  return out


def _absl_parser(argv):
  """app.run wants the global FLAGS parsed; this script's own flags are parsed by main."""
  if any(a in ("-h", "--help", "-help", "--helpshort", "--helpfull") for a in argv[1:]):
    print(__doc__ + "\nflags:\n" + _FLAGS.get_help())
    sys.exit(0)
  flags.FLAGS(argv[:1])
  return argv


if __name__ == "__main__":
  app.run(lambda argv: main(argv) and None, flags_parser=_absl_parser)
