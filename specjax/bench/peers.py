"""specjax's best drafters for a real target beside the peers a CPU user would pick, batch 1, one run.

  nice -n 10 python -m specjax.bench peers                       # SmolLM2-135M-Instruct
  python -m specjax.bench peers --prompts=2 --max_new_tokens=8 --repeats=1 --out_dir=/tmp/peers

Same machine, same held-out prompts (``python -m specjax.train data``'s held-out split: code,
"Translate to German" chat, English text; none was used in training), same GGUF weights, greedy,
stop at EOS. Every method runs every prompt once per round; rounds are timed round-robin after one
untimed warm-up/compile round (:func:`specjax.measure.round_robin_times`), and each method's time
is the median over rounds of its summed time.

* specjax: ``generate`` (our autoregressive loop), ``speculative_generate`` with the n-gram drafter
  (gamma 4) and with the shipped distilled draft model ``smollm2/draft_lm`` (gamma 3).
* transformers (float32, the GGUF dequantised, as specjax does): ``generate`` at each
  ``--torch_threads``; the faster setting is then used for prompt lookup
  (``prompt_lookup_num_tokens`` 4 and 10) and assisted generation with the same draft model,
  exported (:func:`specjax.hf_export.draft_lm_to_hf`, same logits) at gamma 3 constant and at
  transformers' own defaults (20 tokens, confidence threshold). Batch 1 only: assisted generation
  refuses more.
* llama.cpp (``llama-cpp-python``, if installed; a source build, not a CI dependency) on the same
  GGUF at each thread count: what a CPU user would run instead. It computes with the file's 4-bit
  weights, so its tokens are compared as the fraction matching transformers' greedy tokens.

Every specjax and transformers method must produce transformers' greedy ``generate`` tokens; the
table says so per row. Writes ``peers.{md,json}`` under ``--out_dir`` (default benchmarks/real_peers).
Needs ``pip install .[hf]`` (torch, transformers).
"""
from __future__ import annotations

import datetime
import json
import os
import pathlib
import tempfile

from specjax.bench import common

KINDS = ("code", "ende", "text")


def held_out(folder, n: int) -> list[list[int]]:
  path = pathlib.Path(folder) / "prompts_held_out.json"
  if not path.is_file():
    raise common.UsageError(f"{path} not found: run python -m specjax.train data first (it writes the held-out prompts)")
  rows = json.loads(path.read_text())
  by_kind = {k: [r["ids"] for r in rows if r["kind"] == k] for k in KINDS}
  need = {k: len(range(i, n, 3)) for i, k in enumerate(KINDS)}
  if any(len(by_kind[k]) < need[k] for k in KINDS):
    raise common.UsageError(f"{path}: --prompts={n} needs {', '.join(f'{need[k]} {k}' for k in KINDS)} prompts")
  return [by_kind[KINDS[i % 3]][i // 3] for i in range(n)]


def until_eos(tokens, eos_id) -> list[int]:
  import numpy as np  # pylint: disable=import-outside-toplevel
  out = []
  for t in np.asarray(tokens).tolist():
    out.append(int(t))
    if t == eos_id:
      break
  return out


class HF:
  """transformers target (and draft model) on the GGUF; every call returns the new tokens of one prompt."""

  def __init__(self, target_name, drafter_model, subset_K, eos_id):
    import torch  # pylint: disable=import-outside-toplevel
    import transformers  # pylint: disable=import-outside-toplevel
    import specjax  # pylint: disable=import-outside-toplevel
    from specjax import gguf_import, hf_export  # pylint: disable=import-outside-toplevel
    transformers.utils.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    self.torch, self.eos_id = torch, eos_id
    path = specjax.registry.gguf_path(target_name)
    with gguf_import.fast_reader_everywhere():  # the file parsed once, ~3x faster
      self.model = transformers.AutoModelForCausalLM.from_pretrained(str(path.parent), gguf_file=path.name,
                                                                     dtype=torch.float32).eval()
    with tempfile.TemporaryDirectory() as tmp:
      self.assistant = hf_export.load_draft_lm_torch(hf_export.draft_lm_to_hf(drafter_model, subset_K, tmp))
    for m in (self.model, self.assistant):
      m.generation_config.eos_token_id = eos_id
      m.generation_config.pad_token_id = eos_id
    self.threads = 1

  def __call__(self, prompt, max_new, **kw) -> list[int]:
    torch = self.torch
    torch.set_num_threads(self.threads)
    ids = torch.tensor([prompt], dtype=torch.long)
    with torch.inference_mode():
      out = self.model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False, max_new_tokens=max_new,
                                **kw)
    return until_eos(out[0, ids.shape[1]:].numpy(), self.eos_id)

  def assisted(self, prompt, max_new, gamma=None) -> list[int]:
    cfg = self.assistant.generation_config
    if gamma is None:  # transformers' defaults
      cfg.num_assistant_tokens, cfg.num_assistant_tokens_schedule, cfg.assistant_confidence_threshold = 20, "constant", 0.4
    else:
      cfg.num_assistant_tokens, cfg.num_assistant_tokens_schedule, cfg.assistant_confidence_threshold = gamma, "constant", 0.0
    return self(prompt, max_new, assistant_model=self.assistant)


def llama_cpp_methods(gguf, threads, max_new, eos_id) -> dict:
  try:
    import llama_cpp  # pylint: disable=import-outside-toplevel
  except ImportError:
    print("llama_cpp not installed: no llama.cpp rows (pip install llama-cpp-python, a ~12 min source build)")
    return {}
  out = {}
  for t in threads:
    llm = llama_cpp.Llama(model_path=str(gguf), n_ctx=512, n_threads=t, n_threads_batch=t, verbose=False)

    def run(prompt, llm=llm):
      toks = []
      for tok in llm.generate(prompt, top_k=1, top_p=1.0, min_p=0.0, temp=0.0, repeat_penalty=1.0, reset=True):
        toks.append(int(tok))
        if tok == eos_id or len(toks) == max_new:
          break
      return toks
    out[f"llama.cpp ({t} thread{'s' if t > 1 else ''}, 4-bit GGUF)"] = run
  return out


def time_rounds(methods: dict, prompts, repeats: int, desc: str):
  """(median seconds, tokens per prompt) per method: every prompt once per round, a warm-up round, then
  ``repeats`` timed rounds (:func:`specjax.measure.round_robin_times`)."""
  from tqdm import tqdm  # pylint: disable=import-outside-toplevel
  from specjax import measure  # pylint: disable=import-outside-toplevel
  with tqdm(total=(repeats + 1) * len(methods), desc=desc) as bar:
    def one_round(fn):
      outs = [fn(p) for p in prompts]
      bar.update(1)
      return outs
    outs, medians, _ = measure.round_robin_times({k: (lambda fn=fn: one_round(fn)) for k, fn in methods.items()},
                                                 repeats)
  return medians, outs


def table_rows(times, outs, reference, stats, best_hf) -> list[dict]:
  import numpy as np  # pylint: disable=import-outside-toplevel
  tok_s = {k: sum(map(len, outs[k])) / s for k, s in times.items()}
  rows = []
  for name, seconds in times.items():
    toks = outs[name]
    n = sum(map(len, toks))
    agree = [sum(a == b for a, b in zip(x, y)) / max(len(y), 1) for x, y in zip(toks, reference)]
    row = {"method": name, "seconds": round(seconds, 3), "tokens": n, "tok_s": round(n / seconds, 2),
           "vs_specjax_ar": round(tok_s[name] / tok_s["specjax generate"], 3),
           "vs_transformers_best": round(tok_s[name] / tok_s[best_hf], 3),
           "identical_to_transformers_greedy": toks == reference, "token_agreement": round(float(np.mean(agree)), 3)}
    if name in stats:  # the last round's iterations
      its = stats[name][-len(toks):]
      row["tokens_per_pass"] = round(sum(t for _, t in its) / max(sum(i for i, _ in its), 1), 3)
    rows.append(row)
  return rows


def markdown(rows, meta) -> str:
  lines = [f"# {meta['target']}: specjax beside transformers and llama.cpp, batch 1 ({meta['date']})", "",
           f"{meta['prompts']} held-out prompts one at a time (code / translation chat / English), greedy, up to "
           f"{meta['max_new_tokens']} new tokens, stop at EOS; median of {meta['repeats']} round-robin rounds after a "
           f"warm-up round; {meta['cpu_count']} CPU cores (load {meta['load_average_at_end'][0]:.1f} at the end).", "",
           f"Command: `{' '.join(meta['argv'])}`", "",
           "| method | tok/s | vs specjax AR | vs transformers generate (best) | tokens per pass "
           "| = transformers greedy | token agreement |", "|---|---|---|---|---|---|---|"]
  for r in rows:
    tpp = f"{r['tokens_per_pass']:.2f}" if "tokens_per_pass" in r else "-"
    same = "yes" if r["identical_to_transformers_greedy"] else "no"
    lines.append(f"| {r['method']} | {r['tok_s']:.1f} | {r['vs_specjax_ar']:.2f}x | {r['vs_transformers_best']:.2f}x "
                 f"| {tpp} | {same} | {r['token_agreement']:.2f} |")
  return "\n".join(lines)


def _flags():
  from absl import flags  # pylint: disable=import-outside-toplevel
  fv = flags.FlagValues()
  d = lambda kind, *a, **kw: getattr(flags, f"DEFINE_{kind}")(*a, flag_values=fv, **kw)  # noqa: E731
  d("string", "target", "smollm2-135m-instruct", "registered target checkpoint")
  d("string", "drafter", "smollm2/draft_lm", "draft_lm bundle for specjax and transformers' assisted generation")
  d("string", "data", "", "data folder of python -m specjax.train data (its held-out prompts); default: the target's")
  d("integer", "prompts", 6, "held-out prompts (code, translation, text in turn), one at a time", lower_bound=1)
  d("integer", "max_new_tokens", 64, "new tokens per prompt at most (stop at EOS)", lower_bound=1)
  d("integer", "repeats", 2, "timed rounds after the warm-up round (median)", lower_bound=1)
  d("integer", "gamma", 3, "draft length of the draft model (specjax and transformers constant)", lower_bound=1)
  d("integer", "ngram_gamma", 4, "draft length of specjax's n-gram drafter", lower_bound=1)
  d("list", "torch_threads", ["1", "2"], "torch thread counts for transformers generate (best one is used after)")
  d("list", "llama_threads", ["1", "2"], "llama.cpp thread counts (skipped if llama_cpp is not installed)")
  d("string", "out_dir", "benchmarks/real_peers", "where peers.{md,json} go")
  return fv


def _run(fv, argv) -> int:
  torch_threads = common.parse_list(fv.torch_threads, int, "torch_threads", lambda t: t >= 1)
  llama_threads = common.parse_list(fv.llama_threads, int, "llama_threads", lambda t: t >= 1)
  import jax  # pylint: disable=import-outside-toplevel
  import numpy as np  # pylint: disable=import-outside-toplevel
  import specjax  # pylint: disable=import-outside-toplevel
  from specjax.data import generated  # pylint: disable=import-outside-toplevel
  from specjax.models import draft_lm  # pylint: disable=import-outside-toplevel
  prompts = held_out(pathlib.Path(fv.data or generated.default_out(fv.target)).expanduser(), fv.prompts)
  target, tok = specjax.load_pretrained(fv.target, verbose=False)
  width, eos, max_new = max(map(len, prompts)), tok.eos_id, fv.max_new_tokens
  dl_model, subset_K = draft_lm.load(draft_lm.resolve(fv.drafter) or fv.drafter, target)
  drafters = {f"specjax speculative, n-gram (γ={fv.ngram_gamma})": (specjax.drafters.NGram(3), fv.ngram_gamma),
              f"specjax speculative, draft_lm (γ={fv.gamma})":
              (specjax.drafters.DraftModel(dl_model, jax.numpy.asarray(subset_K)), fv.gamma)}

  def padded(p):
    row = np.zeros((1, width), np.int32)
    row[0, :len(p)] = p
    return row, np.array([len(p)], np.int32)

  stats = {}

  def sj_ar(p):
    r = specjax.generate(target, *padded(p), max_new_tokens=max_new, eos_id=eos)
    return until_eos(r.tokens[0, :r.lengths[0]], eos)

  def sj_spec(name):
    drafter, gamma = drafters[name]

    def run(p):
      r = specjax.speculative_generate(target, drafter, *padded(p), gamma=gamma, max_new_tokens=max_new, eos_id=eos)
      stats.setdefault(name, []).append((int(r.stats["row_iterations"]), int(r.lengths[0])))
      return until_eos(r.tokens[0, :r.lengths[0]], eos)
    return run

  hf = HF(fv.target, dl_model, subset_K, eos)

  def hf_gen(t):
    def run(p):
      hf.threads = t
      return hf(p, max_new)
    return run

  methods = {"specjax generate": sj_ar, **{k: sj_spec(k) for k in drafters}}
  methods.update({f"transformers generate ({t} thread{'s' if t > 1 else ''})": hf_gen(t) for t in torch_threads})
  times, outs = time_rounds(methods, prompts, fv.repeats, "specjax + transformers generate")
  hf_names = [k for k in methods if k.startswith("transformers generate")]
  best = min(hf_names, key=lambda k: times[k])
  hf.threads = int(best.split("(")[1].split()[0])
  tagged = f"{hf.threads} thread{'s' if hf.threads > 1 else ''}"
  more = {f"transformers prompt lookup ({n} tokens, {tagged})": (lambda p, n=n: hf(p, max_new, prompt_lookup_num_tokens=n))
          for n in (4, 10)}
  more[f"transformers assisted, draft_lm (γ={fv.gamma} constant, {tagged})"] = \
      lambda p: hf.assisted(p, max_new, fv.gamma)
  more[f"transformers assisted, draft_lm (its defaults, {tagged})"] = lambda p: hf.assisted(p, max_new)
  more.update(llama_cpp_methods(specjax.registry.gguf_path(fv.target), llama_threads, max_new, eos))
  more_times, more_outs = time_rounds(more, prompts, fv.repeats, "transformers speculative + llama.cpp")
  times.update(more_times)
  outs.update(more_outs)
  rows = table_rows(times, outs, outs[hf_names[0]], stats, best)
  meta = {"date": datetime.datetime.now().isoformat(timespec="seconds"), "argv": list(argv), "target": fv.target,
          "drafter": fv.drafter, "prompts": fv.prompts, "max_new_tokens": max_new, "repeats": fv.repeats,
          "cpu_count": os.cpu_count(), "load_average_at_end": list(os.getloadavg()),
          "jax": jax.__version__, "torch": hf.torch.__version__}
  out_dir = common.out_dir(fv.out_dir)
  common.write_json(out_dir / "peers.json", {"meta": meta, "rows": rows}, ensure_ascii=False)
  md = markdown(rows, meta)
  (out_dir / "peers.md").write_text(md + "\n")
  print(md)
  return 0


def main(argv) -> int:
  fv = _flags()
  return common.run_task(fv, argv, __doc__, "peers", lambda: _run(fv, argv))
