"""transformers' own speculative decoding on the Spec-Bench-format prompts: the peers of ``specbench``.

  python -m specjax.bench specbench_hf --target=smollm2-135m-instruct --limit=2 --max_new_tokens=64 \\
      --json_out=benchmarks/specbench_hf/smollm2_b1_t0.json
  python -m specjax.bench specbench_hf --target=qwen2.5-coder-1.5b-instruct \\
      --assistant=qwen2.5-coder-0.5b-instruct --limit=1 --max_new_tokens=64

The same questions as ``python -m specjax.bench specbench`` (any Spec-Bench-format file, the same
``--limit`` selection), encoded to the same token ids by specjax's tokenizer (chat-templated when
it has a template), decoded one at a time (batch 1, greedy, up to ``--max_new_tokens``, stop at
EOS) by transformers on the same GGUF file, dequantised to float32 as specjax loads it:

* ``generate``: transformers' autoregressive baseline, at the fastest of ``--torch_threads``
  (probed on the first question; every method then runs at that count);
* prompt lookup (``prompt_lookup_num_tokens``, each of ``--lookup_tokens``);
* assisted generation with ``--assistant`` (a registered GGUF of the same tokenizer) at
  transformers' defaults: up to 20 drafts a round, cut where the assistant's confidence falls below
  0.4, the threshold adjusted during generation.

Per question, after one untimed warm-up call of every method on the first question, the methods
run in turn ``--repeats`` times and each keeps its median. As in ``specbench``, a group's speedup
is the mean of per-question tokens/s over the mean of the baseline's; tokens per target call
counts the target's forward calls (the prompt's included) with a forward hook; "identical" means
the same tokens as transformers' ``generate``. Needs ``pip install .[hf]``.
"""
from __future__ import annotations

import datetime
import hashlib
import os
import pathlib
import time

import numpy as np

from specjax.bench import common

GENERATE = "transformers generate"


def _flags():
  from absl import flags  # pylint: disable=import-outside-toplevel
  from specjax.bench import specbench  # pylint: disable=import-outside-toplevel
  from specjax.data import specbench_prompts  # pylint: disable=import-outside-toplevel
  fv = flags.FlagValues()
  d = lambda kind, *a, **kw: getattr(flags, f"DEFINE_{kind}")(*a, flag_values=fv, **kw)  # noqa: E731
  d("string", "questions", str(specbench_prompts.SHIPPED), "a Spec-Bench-format question.jsonl")
  d("string", "target", specbench.DEFAULT_TARGET, "registered GGUF checkpoint (specjax.registry)")
  d("string", "assistant", "", "registered GGUF draft model of the same tokenizer for assisted generation (empty: none)")
  d("list", "lookup_tokens", ["4", "10"], "prompt lookup: tokens proposed per match, a row each (empty: none)")
  d("list", "torch_threads", ["1", "2"], "torch thread counts probed with generate; the fastest is used")
  d("integer", "limit", 0, "questions per category (0: all)", lower_bound=0)
  d("integer", "max_new_tokens", 128, "tokens generated per question (fewer at EOS)", lower_bound=1)
  d("boolean", "chat", None, "apply the chat template (default: when the tokenizer has one)")
  d("integer", "repeats", 1, "timed runs of each method per question, after the warm-up", lower_bound=1)
  d("string", "json_out", "", "write the result here")
  return fv


class Target:
  """The target (and assistant) in transformers, from their registered GGUF files; counts target calls."""

  def __init__(self, name: str, assistant: str, eos_id: int):
    import torch  # pylint: disable=import-outside-toplevel
    import transformers  # pylint: disable=import-outside-toplevel
    from specjax import gguf_import, registry  # pylint: disable=import-outside-toplevel
    transformers.utils.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    self.torch, self.eos_id, self.calls = torch, eos_id, 0
    self.transformers_version = transformers.__version__

    def load(reg_name):
      path = registry.gguf_path(reg_name)
      with gguf_import.fast_reader_everywhere():  # each file parsed once
        model = transformers.AutoModelForCausalLM.from_pretrained(str(path.parent), gguf_file=path.name,
                                                                  dtype=torch.float32).eval()
      model.generation_config.eos_token_id = model.generation_config.pad_token_id = eos_id
      return model

    self.model = load(name)
    self.model.register_forward_hook(self._count)
    self.assistant = load(assistant) if assistant else None
    if self.assistant is not None:  # transformers' defaults, set explicitly so a version change shows
      cfg = self.assistant.generation_config
      cfg.num_assistant_tokens, cfg.num_assistant_tokens_schedule, cfg.assistant_confidence_threshold = \
          20, "constant", 0.4

  def _count(self, *_):
    self.calls += 1

  def __call__(self, prompt, max_new: int, **kw) -> tuple[list[int], int]:
    """(new tokens up to EOS, target forward calls) of one greedy generate."""
    torch = self.torch
    ids = torch.tensor([prompt], dtype=torch.long)
    self.calls = 0
    with torch.inference_mode():
      out = self.model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False,
                                max_new_tokens=max_new, **kw)
    from specjax.bench.peers import until_eos  # pylint: disable=import-outside-toplevel
    return until_eos(out[0, ids.shape[1]:].numpy(), self.eos_id), self.calls


def methods(hf: Target, lookup_tokens, assistant: str, max_new: int) -> dict:
  out = {GENERATE: lambda p: hf(p, max_new)}
  for k in lookup_tokens:
    out[f"transformers prompt lookup ({k} tokens)"] = lambda p, k=k: hf(p, max_new, prompt_lookup_num_tokens=k)
  if assistant:
    out[f"transformers assisted generation, {assistant} (its defaults)"] = \
        lambda p: hf(p, max_new, assistant_model=hf.assistant)
  return out


def timed(fns: dict, prompt, repeats: int) -> dict:
  """name -> (median seconds, tokens, target calls): the methods in turn, ``repeats`` times."""
  times = {k: [] for k in fns}
  outs = {}
  for _ in range(repeats):
    for k, fn in fns.items():
      t0 = time.perf_counter()
      outs[k] = fn(prompt)
      times[k].append(time.perf_counter() - t0)
  return {k: (float(np.median(times[k])), *outs[k]) for k in fns}


def aggregate(ms: list[dict]) -> dict:
  speed = float(np.mean([m["tokens"] / m["seconds"] for m in ms]))
  base = float(np.mean([m["baseline_tokens"] / m["baseline_seconds"] for m in ms]))
  tokens = sum(m["tokens"] for m in ms)
  return {"num_questions": len(ms), "speedup": round(speed / base, 4), "tokens_per_s": round(speed, 3),
          "baseline_tokens_per_s": round(base, 3), "generated_tokens": tokens,
          "target_calls": sum(m["target_calls"] for m in ms),
          "tokens_per_target_call": round(tokens / max(sum(m["target_calls"] for m in ms), 1), 4),
          "identical_to_generate": all(m["identical"] for m in ms)}


def benchmark(records, rows, hf: Target, *, lookup_tokens=(), assistant: str = "", threads=(1,),
              max_new_tokens: int = 64, repeats: int = 1, progress: bool = True) -> dict:
  """Every method on every question's ``rows`` (token ids), timed per question against ``generate``."""
  from specjax.bench import specbench  # pylint: disable=import-outside-toplevel
  from tqdm import tqdm  # pylint: disable=import-outside-toplevel
  fns = methods(hf, lookup_tokens, assistant, max_new_tokens)
  probe = {}
  for t in threads:  # generate at each thread count on the first question, after a warm-up
    hf.torch.set_num_threads(t)
    fns[GENERATE](rows[0])
    probe[t] = timed({GENERATE: fns[GENERATE]}, rows[0], repeats)[GENERATE][0]
  best = min(probe, key=probe.get)
  hf.torch.set_num_threads(best)
  for fn in fns.values():  # warm-up of every method
    fn(rows[0])
  per_method = {k: [] for k in fns if k != GENERATE}
  for record, row in tqdm(list(zip(records, rows)), desc="specbench_hf", unit="question", disable=not progress):
    res = timed(fns, row, repeats)
    base_s, base_toks, _ = res[GENERATE]
    for k, ms in per_method.items():
      s, toks, calls = res[k]
      ms.append({"question_id": record["question_id"], "group": specbench.group_of(record["category"]),
                 "tokens": len(toks), "seconds": s, "target_calls": calls, "baseline_tokens": len(base_toks),
                 "baseline_seconds": base_s, "baseline_target_calls": res[GENERATE][2],
                 "identical": toks == base_toks})
  groups = list(dict.fromkeys(specbench.group_of(r["category"]) for r in records))
  return {
      "config": {"max_new_tokens": max_new_tokens, "temperature": 0.0, "batch_size": 1, "repeats": repeats,
                 "num_questions": len(records), "torch_threads": best,
                 "generate_seconds_first_question": {str(t): round(s, 4) for t, s in probe.items()}},
      "categories": groups,
      "methods": {k: {"categories": {g: aggregate([m for m in ms if m["group"] == g]) for g in groups},
                      "overall": aggregate(ms)} for k, ms in per_method.items()},
      "calls": [{"method": k, **m} for k, ms in per_method.items() for m in ms],
  }


def format_table(result: dict) -> str:
  groups = result["categories"]
  lines = ["| method | " + " | ".join(groups) + " | overall | tokens / target call | tok/s | generate tok/s "
           "| = generate |", "|---" * (len(groups) + 6) + "|"]
  for k, r in result["methods"].items():
    o = r["overall"]
    lines.append(f"| {k} | " + " | ".join(f"{r['categories'][g]['speedup']:.2f}x" for g in groups)
                 + f" | {o['speedup']:.2f}x | {o['tokens_per_target_call']:.2f} | {o['tokens_per_s']:.1f} "
                 f"| {o['baseline_tokens_per_s']:.1f} | {'yes' if o['identical_to_generate'] else 'no'} |")
  return "\n".join(lines)


def _run(fv, argv) -> int:
  threads = common.parse_list(fv.torch_threads, int, "torch_threads", lambda t: t >= 1)
  lookup = common.parse_list(fv.lookup_tokens, int, "lookup_tokens", lambda k: k >= 1) if fv.lookup_tokens else []
  if not lookup and not fv.assistant:
    raise common.UsageError("nothing to compare: give --lookup_tokens and/or --assistant")
  import gc  # pylint: disable=import-outside-toplevel
  import specjax  # pylint: disable=import-outside-toplevel
  from specjax import prompts as prompts_lib, registry  # pylint: disable=import-outside-toplevel
  from specjax.bench import specbench  # pylint: disable=import-outside-toplevel
  from specjax.data import specbench_prompts  # pylint: disable=import-outside-toplevel
  for name in filter(None, (fv.target, fv.assistant)):
    registry.gguf_path(name)  # an unknown name or a missing package fails here, before any load
  try:
    records = specbench.limit_per_category(specbench_prompts.read(fv.questions), fv.limit)
  except ValueError as e:
    raise common.UsageError(f"--questions={fv.questions}: {e}") from e
  model, tokenizer = specjax.load_pretrained(fv.target)  # the same token ids as specbench's
  del model
  gc.collect()
  if fv.assistant:
    _, assistant_tok = specjax.load_pretrained(fv.assistant, verbose=False)
    if assistant_tok.vocab_size != tokenizer.vocab_size:
      raise common.UsageError(f"--assistant={fv.assistant}: its tokenizer has {assistant_tok.vocab_size} tokens, "
                              f"the target's {tokenizer.vocab_size}")
    gc.collect()
  chat = bool(getattr(tokenizer, "chat_template", None)) if fv.chat is None else fv.chat
  rows = [prompts_lib.encode(tokenizer, r["turns"][0], chat) for r in records]
  hf = Target(fv.target, fv.assistant, tokenizer.eos_id)
  result = benchmark(records, rows, hf, lookup_tokens=lookup, assistant=fv.assistant, threads=threads,
                     max_new_tokens=fv.max_new_tokens, repeats=fv.repeats)
  result["config"].update(
      target=fv.target, assistant=fv.assistant, chat=chat, limit=fv.limit, questions=str(fv.questions),
      questions_sha256=hashlib.sha256(pathlib.Path(fv.questions).read_bytes()).hexdigest(),
      date=datetime.datetime.now().isoformat(timespec="seconds"), argv=list(argv), cpu_count=os.cpu_count(),
      load_average_at_end=list(os.getloadavg()), torch=hf.torch.__version__, transformers=hf.transformers_version)
  print(f"target {fv.target} in transformers {hf.transformers_version}, {result['config']['torch_threads']} "
        f"torch thread(s) | {len(records)} questions | max_new_tokens {fv.max_new_tokens} | chat {chat}")
  print(format_table(result))
  if fv.json_out:
    pathlib.Path(fv.json_out).parent.mkdir(parents=True, exist_ok=True)
    common.write_json(fv.json_out, result)
    print(f"wrote {fv.json_out}")
  return 0


def main(argv) -> int:
  fv = _flags()
  return common.run_task(fv, argv, __doc__, "specbench_hf", lambda: _run(fv, argv))
