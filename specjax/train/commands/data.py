"""A real target's own generations (default SmolLM2-135M-Instruct): the training data of its drafters.

  nice -n 10 python -m specjax.train data                       # ~/.cache/specjax/data/smollm2-135m-instruct
  nice -n 10 python -m specjax.train data --minutes=25 --batch_size=16 --out=/tmp/data

Prompts come from this machine only, three kinds, interleaved in a seeded order:
* ``code``: a crop of a Python standard-library file, cut at a line start (raw continuation);
* ``ende``: "Translate to German: <msgid>" as a chat prompt (the tokenizer's chat template), the
  msgids from the gettext catalogues' German ``.mo`` files (``specjax.data.ende``);
* ``text``: plain English: the start of a stdlib docstring, or a run of catalogue msgids (raw).

With ``--questions=FILE`` (a Spec-Bench-format ``question.jsonl``, e.g. specjax's own
``specjax/assets/specbench/questions.jsonl``) the prompts are instead every question's first turn,
chat-templated when the tokenizer has a template (kind ``chat``, none held out), as
``python -m specjax.bench specbench`` encodes them: a corpus of the target's own answers for the
``suffix`` drafter's ``corpus`` option. Each batch is padded to a power-of-two width (questions are
taken shortest first), and no prompt is cut.

Held out for evaluation, by source file: stdlib files with ``code_corpus.is_held_out`` and
catalogues whose name hashes the same way. ``prompts_held_out.json`` keeps those prompts (as
token ids and text); only train prompts are generated in bulk, plus ``--held_out_rows`` held-out
continuations (``held_out/``) for measuring a drafter's loss.

The target continues every prompt greedily with ``specjax.generate`` (one jitted loop per batch,
fixed shapes), stopping at its EOS. Each batch is one shard ``shards/NNNNN.npz`` (prompt ids,
continuation ids, lengths, kind, source), written atomically: a rerun resumes after the last
shard. ``--minutes`` bounds the run (rerun to add more). ``token_counts.npy`` (counts of every
generated token id, train shards) feeds :func:`specjax.drafters.vocab.top_k_subset`; ``meta.json``
reports tokens/s of generation.
"""
from __future__ import annotations

import ast
import gettext
import json
import os
import pathlib
import time

from absl import flags
import jax
import numpy as np
from tqdm.auto import tqdm

import specjax
from specjax.data import code_corpus, ende
from specjax.data.generated import default_out, token_counts
from specjax.train.commands import common

KINDS = ("code", "ende", "text")


def held_out_name(name: str) -> bool:
  return code_corpus.is_held_out(name)


# ----------------------------------------------------------------------------- prompt sources
def _docstrings(text: str) -> list[str]:
  try:
    tree = ast.parse(text)
  except (SyntaxError, ValueError):
    return []
  out = []
  for node in ast.walk(tree):
    if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
      doc = ast.get_docstring(node)
      if doc and len(doc) >= 80 and doc.count(" ") >= 10:
        out.append(doc)
  return out


def catalogue_pairs() -> dict[str, list[tuple[str, str]]]:
  """(english, german) pairs per catalogue file, as specjax.data.ende filters them."""
  out = {}
  for path in ende.catalogue_files():
    try:
      with open(path, "rb") as f:
        catalog = gettext.GNUTranslations(f)._catalog  # pylint: disable=protected-access
    except (OSError, UnicodeDecodeError, ValueError):
      continue
    pairs = sorted({(k.strip(), v.strip()) for k, v in catalog.items()
                    if isinstance(k, str) and k and v and k != v and 8 <= len(k) <= 200 and len(v) <= 200
                    and "\x00" not in k and not k.startswith("\x07")})
    if pairs:
      out[path.name] = pairs
  return out


def build_prompts(tok, seed: int, code_tokens: int, prompt_len: int):
  """Every prompt, seeded: {"split": [{"kind", "source", "ids"}...]} with a mixed, shuffled order."""
  rng = np.random.default_rng(seed)
  root = code_corpus.stdlib_root()
  prompts = {"train": [], "held_out": []}

  def add(kind, source, ids, held):
    ids = list(ids)[:prompt_len]
    if len(ids) >= 4:
      prompts["held_out" if held else "train"].append({"kind": kind, "source": source, "ids": ids})

  for path in tqdm(code_corpus.stdlib_files(), desc="prompts: stdlib", mininterval=5):
    rel = str(path.relative_to(root))
    held = held_out_name(rel)
    text = path.read_text(encoding="utf-8", errors="replace")
    lines = text.splitlines(keepends=True)
    starts = np.cumsum([0] + [len(l) for l in lines])[:-1]
    # code crops: about one per 3 kB of source, at line starts that are not blank
    good = [s for s, l in zip(starts, lines) if l.strip()]
    for s in rng.choice(good, size=min(len(good), max(1, len(text) // 3000)), replace=False) if good else []:
      ids = tok.encode(text[s:s + 8 * code_tokens], add_special_tokens=False)[:code_tokens]
      add("code", rel, ids, held)
    for doc in _docstrings(text):  # plain English: the first ~40 tokens of each docstring
      add("text", rel, tok.encode(doc, add_special_tokens=False)[:40], held)
  for name, pairs in tqdm(catalogue_pairs().items(), desc="prompts: catalogues", mininterval=5):
    held = held_out_name(name)
    for en, _ in pairs:
      add("ende", name, tok.encode(translate_prompt(tok, en), add_special_tokens=False), held)
    msgids = [en for en, _ in pairs if " " in en and en[:1].isupper()]
    for i in range(0, len(msgids) - 4, 40):  # runs of msgids as plain text
      add("text", name, tok.encode(" ".join(msgids[i:i + 4]), add_special_tokens=False)[:40], held)
  for split in prompts:  # shuffled within each kind, then round-robin over kinds: any prefix is mixed
    by_kind = [[r for r in prompts[split] if r["kind"] == k] for k in KINDS]
    by_kind = [[rows[i] for i in rng.permutation(len(rows))] for rows in by_kind]
    prompts[split] = [rows[i] for i in range(max(map(len, by_kind))) for rows in by_kind if i < len(rows)]
  return prompts


def question_prompts(tok, path) -> dict:
  """Every question's first turn as a prompt (kind ``chat``), shortest first; none held out."""
  from specjax import prompts as prompts_lib  # pylint: disable=import-outside-toplevel
  from specjax.data import specbench_prompts  # pylint: disable=import-outside-toplevel
  chat = bool(getattr(tok, "chat_template", None))
  rows = [{"kind": "chat", "source": f"{r['category']}/{r['question_id']}",
           "ids": prompts_lib.encode(tok, r["turns"][0], chat)} for r in specbench_prompts.read(path)]
  return {"train": sorted(rows, key=lambda r: len(r["ids"])), "held_out": []}


def batch_width(rows, prompt_len: int, whole: bool) -> int:
  """``prompt_len``, or (``whole``: prompts are never cut) the batch's longest, to a power of two."""
  if not whole:
    return prompt_len
  width = 64
  while width < max(len(r["ids"]) for r in rows):
    width *= 2
  return width


def batch_arrays(rows, prompt_len, pad_id):
  ids = np.full((len(rows), prompt_len), pad_id, np.int32)
  lengths = np.array([len(r["ids"]) for r in rows], np.int32)
  for i, r in enumerate(rows):
    ids[i, :len(r["ids"])] = r["ids"]
  return ids, lengths


def generate_shard(opt, target, rows, tok, path: pathlib.Path):
  prompts, lengths = batch_arrays(rows, batch_width(rows, opt.prompt_len, bool(opt.questions)), tok.pad_id)
  t0 = time.perf_counter()
  out = specjax.generate(target, prompts, lengths, max_new_tokens=opt.max_new_tokens, eos_id=tok.eos_id,
                         pad_id=tok.pad_id)
  dt = time.perf_counter() - t0
  tmp = path.with_name(path.stem + f".tmp{os.getpid()}.npz")
  np.savez(tmp, prompts=prompts, prompt_lengths=lengths, tokens=out.tokens.astype(np.int32),
           lengths=out.lengths.astype(np.int32), kinds=np.array([r["kind"] for r in rows]),
           sources=np.array([r["source"] for r in rows]), seconds=np.float64(dt))
  tmp.rename(path)  # atomic: a half-written shard is never read
  return int(out.lengths.sum()), dt


def translate_prompt(tok, en: str) -> str:
  """A chat prompt for an instruct model; a base model (no chat template, e.g. Gemma 3 270M) gets
  the plain-text form ``English: ...\nGerman:``."""
  try:
    return tok.apply_chat_template([{"role": "user", "content": f"Translate to German: {en}"}])
  except ValueError:
    return f"Translate to German.\nEnglish: {en}\nGerman:"


def run(opt) -> int:
  default = default_out(opt.target)
  out = pathlib.Path(opt.out or (default.with_name(default.name + "-chat") if opt.questions else default)).expanduser()
  (out / "shards").mkdir(parents=True, exist_ok=True)
  target, tok = specjax.load_pretrained(opt.target)
  prompts_path = out / "prompts.json"
  if prompts_path.is_file():
    prompts = json.loads(prompts_path.read_text())
  elif opt.questions:
    prompts = question_prompts(tok, opt.questions)
    prompts_path.write_text(json.dumps(prompts))
  else:
    prompts = build_prompts(tok, opt.seed, opt.code_prompt_tokens, opt.prompt_len)
    prompts_path.write_text(json.dumps(prompts))
    held = [dict(r, text=tok.decode(r["ids"])) for r in prompts["held_out"]]
    (out / "prompts_held_out.json").write_text(json.dumps(held, indent=0, ensure_ascii=False))
  summary = {s: {k: sum(r["kind"] == k for r in prompts[s]) for k in (*KINDS, "chat")} for s in prompts}
  print(f"prompts: {summary}", flush=True)
  b = opt.batch_size
  (out / "held_out").mkdir(exist_ok=True)
  for i in range(min(opt.held_out_rows, len(prompts["held_out"])) // b):  # held-out continuations first (few)
    if not (out / "held_out" / f"{i:05d}.npz").is_file():
      generate_shard(opt, target, prompts["held_out"][i * b:(i + 1) * b], tok, out / "held_out" / f"{i:05d}.npz")
  n_batches = min(len(prompts["train"]) // b, opt.max_shards)
  done = {int(p.stem) for p in (out / "shards").glob("[0-9]*[0-9].npz")}
  todo = [i for i in range(n_batches) if i not in done]
  t_start, new_tokens, gen_s = time.time(), 0, 0.0
  with tqdm(total=n_batches, initial=len(done), desc="generating (train shards)", mininterval=10) as bar:
    for i in todo:
      if time.time() - t_start > opt.minutes * 60:
        break
      n, dt = generate_shard(opt, target, prompts["train"][i * b:(i + 1) * b], tok, out / "shards" / f"{i:05d}.npz")
      new_tokens, gen_s = new_tokens + n, gen_s + dt
      bar.update(1)
      bar.set_postfix(tok_s=f"{new_tokens / gen_s:.0f}", tokens=new_tokens)
  if not any((out / "shards").glob("[0-9]*[0-9].npz")):
    print(f"no train shards yet under {out}/shards (prompts written; raise --minutes to generate)")
    return 0
  counts = token_counts(out, target.vocab_size)
  np.save(out / "token_counts.npy", counts)
  shards = sorted((out / "shards").glob("[0-9]*[0-9].npz"))
  total_s = sum(float(np.load(f)["seconds"]) for f in shards)
  meta = {"target": opt.target, "questions": opt.questions, "batch_size": b, "prompt_len": opt.prompt_len,
          "max_new_tokens": opt.max_new_tokens, "seed": opt.seed, "prompts": summary,
          "train_shards": len(shards), "generated_tokens": int(counts.sum()),
          "distinct_tokens": int((counts > 0).sum()),
          "generation_seconds": round(total_s, 1),
          "tokens_per_s": round(float(counts.sum()) / max(total_s, 1e-9), 1),
          "this_run": {"tokens": new_tokens, "seconds": round(gen_s, 1),
                       "tokens_per_s": round(new_tokens / max(gen_s, 1e-9), 1)},
          "devices": [str(d) for d in jax.devices()]}
  (out / "meta.json").write_text(json.dumps(meta, indent=2) + "\n")
  print(json.dumps(meta, indent=2))
  return 0


def main(argv) -> int:
  fv = flags.FlagValues()
  d = lambda kind, name, default, text: common.define(fv, kind, name, default, text)
  d("string", "target", "smollm2-135m-instruct", "checkpoint (anything load_pretrained takes)")
  d("string", "out", "", "data folder (default: ~/.cache/specjax/data/<target>, plus -chat with --questions)")
  d("string", "questions", "", "prompts from this Spec-Bench-format question.jsonl (first turns, chat-templated) "
    "instead of stdlib code, catalogues and docstrings")
  d("integer", "batch_size", 16, "rows per generate call")
  d("integer", "prompt_len", 96, "prompts are right-padded to this many tokens (longer ones are cut)")
  d("integer", "code_prompt_tokens", 64, "tokens of a code crop")
  d("integer", "max_new_tokens", 128, "continuation length")
  d("float", "minutes", 25.0, "stop starting new shards after this many minutes")
  d("integer", "max_shards", 100_000, "stop after this many train shards in total")
  d("integer", "held_out_rows", 64, "held-out prompts that also get continuations")
  d("integer", "seed", 0, "prompt order and crops")
  return common.run_task(fv, argv, __doc__, "data", lambda: run(fv))
