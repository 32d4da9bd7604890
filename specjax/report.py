"""What a run shows its user: every prompt's output (as soon as the first speculative run is done),
a JSONL file of them (``--config.output=FILE``), and the statistics once the timing is done."""
from __future__ import annotations

import json
import sys
import pathlib

SHOWN_BUILTIN_ROWS = 2  # built-in prompts (benchmarks: batch_size stdlib snippets) show only this many


def stop_reason(tokens_N, length: int, eos_id) -> str:
  """``"eos"``: the row ended with the EOS token; ``"length"``: it ran to max_new_tokens."""
  return "eos" if eos_id is not None and length > 0 and int(tokens_N[length - 1]) == eos_id else "length"


def _decode(tok, ids, skip_special: bool = False) -> str:
  ids = [int(i) for i in ids]
  if skip_special:
    try:
      return tok.decode(ids, skip_special_tokens=True)
    except TypeError:  # the byte tokenizer has no special tokens to skip
      pass
  return tok.decode(ids)


def records(prompts, lengths, out, tok, eos_id, items=None) -> list[dict]:
  """One dict per prompt, in order: ``prompt`` (the user's text or chat, or the built-in prompt),
  ``text`` (generated, EOS left out), ``tokens`` (generated ids, EOS included), ``stop``."""
  rows = []
  for r in range(len(prompts)):
    n = int(out.lengths[r])
    ids = out.tokens[r, :n]
    stop = stop_reason(out.tokens[r], n, eos_id)
    if items is not None:
      prompt = items[r]
    elif tok is not None:
      prompt = _decode(tok, prompts[r, :lengths[r]])
    else:
      prompt = prompts[r, :lengths[r]].tolist()
    text = None if tok is None else _decode(tok, ids[:n - 1] if stop == "eos" else ids, skip_special=True)
    rows.append({"index": r, "prompt": prompt, "text": text, "tokens": [int(i) for i in ids], "stop": stop})
  return rows


def write_jsonl(path, rows: list[dict]) -> None:
  path = pathlib.Path(path).expanduser()
  path.parent.mkdir(parents=True, exist_ok=True)
  path.write_text("".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows))


def _shown_prompt(item) -> str:
  """A user prompt as its user wrote it: the text, or a chat's last user message."""
  if isinstance(item, str):
    return item
  users = [m["content"] for m in item if m.get("role") == "user"]
  return users[-1] if users else str(item[-1]["content"])


def _bold(text: str) -> str:
  """Generated text in bold on a terminal; plain where the output goes to a file or a pipe."""
  return f"\033[1m{text}\033[0m" if sys.stdout.isatty() else text


def print_outputs(prompts, lengths, out, tok, eos_id, builtin: bool = False, items=None, chat: bool = False) -> None:
  """Every user prompt with its generated text (bold), in order; built-in prompts: the first few.

  With ``items`` (the user's prompts) a prompt is shown as its user wrote it, and the answer with
  the tokenizer's special tokens (a chat template's markers, EOS) left out, on its own line after
  a chat prompt and right after a completion prompt."""
  shown = min(SHOWN_BUILTIN_ROWS, len(prompts)) if builtin else len(prompts)
  for r in range(shown):
    n = int(out.lengths[r])
    stop = stop_reason(out.tokens[r], n, eos_id)
    print(f"--- prompt {r} ({n} tokens, stop: {stop}) " + "-" * 36)
    if tok is None:
      print("prompt ids:", prompts[r, :lengths[r]].tolist())
      print("generated ids:", out.tokens[r, :n].tolist())
    elif items is not None:
      ids = out.tokens[r, :n - 1] if stop == "eos" else out.tokens[r, :n]
      as_chat = chat or not isinstance(items[r], str)
      print(_shown_prompt(items[r]), end="\n" if as_chat else "")
      print(_bold(_decode(tok, ids, skip_special=True)))
    else:
      print(_decode(tok, prompts[r, :lengths[r]]), end="")
      print(_bold(_decode(tok, out.tokens[r, :n])))
  if shown < len(prompts):
    print(f"({len(prompts) - shown} more built-in prompt rows not shown)")
  print("-" * 66, flush=True)


def print_report(s, prompts, lengths, spec, tok, sampling, text: bool = True):
  """The CLI's report: the outputs (``text``; the CLI shows them earlier, as soon as they exist),
  then timings, acceptance and the exactness check."""
  if text:
    print_outputs(prompts, lengths, spec, tok, s["eos_id"], s["builtin_prompts"])
  print(f"drafter={s['drafter']} gamma={s['gamma']} batch={s['batch_size']} prompts={s['num_prompts']}"
        f"{' (continuous refill)' if s['refill'] else ''} max_len={s['max_len']} temperature={s['temperature']}"
        + (f"  [LOSSY: {s['lossy_reason']}]" if s["lossy"] else ""))
  print(f"autoregressive: {s['baseline_tokens_per_s']:.1f} tok/s ({s['baseline_target_calls']} target calls)")
  print(f"speculative:    {s['tokens_per_s']:.1f} tok/s ({s['target_calls']} target calls)")
  print(f"speedup {s['speedup']:.2f}x measured | {s['predicted_speedup']:.2f}x predicted by the walltime formula "
        f"(alpha={s['alpha']:.3f}, gamma={s['gamma']}, c={s['c']:.3f}, v={s['v']:.2f}) | "
        f"{s['expected_speedup']:.2f}x from the measured tokens per iteration")
  print(f"mean accepted {s['mean_accepted']:.2f} of {s['mean_submitted']:.2f} submitted drafts/iteration; "
        f"per position {s['acceptance_per_position']}")
  if s["adaptive"] is not None and s.get("verify_budgets"):  # a static tree cut to a node budget per round
    costs = s["adaptive"].get("verify_costs") or ()
    print(f"adaptive node budget: rounds at budgets {s['verify_budgets']} nodes: {s['width_histogram']}; tree depth "
          f"offered 0..{s['gamma']} {s['submitted_histogram']} times"
          + (f"; cost of a round per budget in plain rounds, measured in the loop: "
             f"{', '.join(f'{w}: {v:.2f}' for w, v in costs)}" if costs else ""))
  elif s["adaptive"] is not None:
    costs = s["adaptive"].get("verify_costs") or ()
    print(f"adaptive draft length: rows submitted 0..{s['gamma']} drafts {s['submitted_histogram']} times; "
          f"verify widths {s['verify_widths']} ran {s['width_histogram']} times"
          + (f" (the drafter idle in {s['idle_rounds']})" if s.get("idle_rounds") else "")
          + (f"; cost of a round per width in plain rounds, measured in the loop: "
             f"{', '.join(f'{w}: {v:.2f}' for w, v in costs)}" if costs else ""))
  if sampling.greedy:
    print("identical to greedy autoregressive output:", "yes" if s["identical_to_autoregressive"] else "NO")
