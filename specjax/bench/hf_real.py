"""The hf command on the real pretrained models (``--real``): the same GGUF in specjax and transformers.

``python -m specjax.bench hf --real`` runs :func:`run` (see :mod:`specjax.bench.hf` for what it
measures and writes).
"""
from __future__ import annotations

import datetime
import os
import platform
import shlex
import sys
import time

from specjax.bench import common

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


def make_prompts(tok, batch: int, prompt_len: int):
  """[batch, prompt_len] int32: the first ``batch`` texts, tokenized (with the tokenizer's BOS if it adds
  one) and cut to ``prompt_len`` tokens."""
  import numpy as np  # pylint: disable=import-outside-toplevel
  if batch > len(TEXTS):
    raise common.UsageError(f"batch {batch}: at most {len(TEXTS)} (one different text per row)")
  rows = []
  for text in TEXTS[:batch]:
    ids = list(tok.encode(text))
    if len(ids) < prompt_len:
      raise common.UsageError(f"--prompt_len={prompt_len}: a text has only {len(ids)} tokens")
    rows.append(ids[:prompt_len])
  return np.asarray(rows, np.int32)


def hf_model(torch, transformers, path):
  from specjax import gguf_import  # pylint: disable=import-outside-toplevel
  with gguf_import.fast_reader_everywhere():  # the file parsed once, ~3x faster
    m = transformers.AutoModelForCausalLM.from_pretrained(str(path.parent), gguf_file=path.name,
                                                          dtype=torch.float32).eval()
  m.generation_config.eos_token_id = None  # both libraries run the full length
  m.generation_config.pad_token_id = 0
  return m


def hf_generate(torch, hf, prompts, max_new: int, threads: int):
  torch.set_num_threads(threads)
  ids = torch.tensor(prompts, dtype=torch.long)
  with torch.inference_mode():
    out = hf.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False, max_new_tokens=max_new,
                      min_new_tokens=max_new)
  return out[:, ids.shape[1]:].numpy()


def _plain(x):
  import numpy as np  # pylint: disable=import-outside-toplevel
  if x is None:
    return None
  x = np.asarray(x)
  return x.item() if x.size == 1 else x.tolist()


def compare_model(name: str, batches, *, max_new: int, prompt_len: int, repeats: int, torch_threads,
                  progress) -> list[dict]:
  import numpy as np  # pylint: disable=import-outside-toplevel
  import torch  # pylint: disable=import-outside-toplevel
  import transformers  # pylint: disable=import-outside-toplevel
  import specjax  # pylint: disable=import-outside-toplevel
  from specjax import measure  # pylint: disable=import-outside-toplevel
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
    outs, med, all_times = measure.round_robin_times(fns, repeats)
    hf_names = list(fns)[:len(torch_threads)]
    reference = outs[hf_names[0]]
    best_hf = min(hf_names, key=lambda k: med[k])
    for method, out in outs.items():
      tokens = np.asarray(out if method in hf_names else out.tokens)
      stats = {} if method in hf_names else dict(getattr(out, "stats", {}) or {})
      rows.append({"model": name, "batch_size": b, "method": method, "seconds": med[method],
                   "seconds_all": all_times[method], "tokens_per_s": b * max_new / med[method],
                   "ms_per_token_step": 1e3 * med[method] / max_new,
                   "identical_to_hf_greedy": bool(tokens.shape == reference.shape and np.array_equal(tokens, reference)),
                   "is_best_transformers": method == best_hf,
                   "target_calls": _plain(stats.get("target_calls")),
                   "tokens_per_iteration": _plain(stats.get("tokens_per_iteration"))})
    best_tps = b * max_new / med[best_hf]
    for r in rows[-len(outs):]:
      r["ratio_vs_transformers_best"] = r["tokens_per_s"] / best_tps
    progress.update(1)
  return rows


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


def run(fv, argv, batches, torch_threads) -> int:
  import jax  # pylint: disable=import-outside-toplevel
  from tqdm import tqdm  # pylint: disable=import-outside-toplevel
  models = common.parse_list(fv.models, str, "models", lambda m: m in MODELS)
  if max(batches) > len(TEXTS):
    raise common.UsageError(f"--batch_sizes: at most {len(TEXTS)} (one different text per row), got {max(batches)}")
  max_new, repeats, prompt_len = fv.max_new_tokens or 64, fv.repeats or 3, fv.prompt_len
  command = "python -m specjax.bench hf " + " ".join(shlex.quote(a) for a in argv[1:])
  rows, start = [], time.time()
  with tqdm(total=len(models) * len(batches), unit="cell", file=sys.stderr) as progress:
    for m in models:
      rows += compare_model(m, batches, max_new=max_new, prompt_len=prompt_len, repeats=repeats,
                            torch_threads=torch_threads, progress=progress)
  import torch  # pylint: disable=import-outside-toplevel
  import transformers  # pylint: disable=import-outside-toplevel
  meta = {"date": datetime.datetime.now().isoformat(timespec="seconds"), "command": command.strip(),
          "machine": f"CPU only, {os.cpu_count()} cores shared with other work ({platform.machine()}, "
                     f"{platform.processor() or platform.platform()})",
          "load_average_at_end": list(os.getloadavg()) if hasattr(os, "getloadavg") else None,
          "wall_seconds": time.time() - start, "models": list(models), "batch_sizes": list(batches),
          "max_new_tokens": max_new, "prompt_len": prompt_len, "repeats": repeats, "gamma": GAMMA, "ngram": NGRAM,
          "torch_threads_tried": list(torch_threads), "jax": jax.__version__, "torch": torch.__version__,
          "transformers": transformers.__version__, "devices": [str(d) for d in jax.devices()][:1],
          "all_identical": all(r["identical_to_hf_greedy"] for r in rows)}
  table = markdown(rows, meta)
  out = common.out_dir(fv.out_dir or "benchmarks/real_models")
  (out / "compare_hf_real.md").write_text(table + "\n")
  common.write_json(out / "compare_hf_real.json", {"meta": meta, "rows": rows})
  print(table)
  print(f"wrote {out}/compare_hf_real.md, compare_hf_real.json")
  return 0
