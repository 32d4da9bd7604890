"""Spec-Bench-format suite: each drafter's speedup over autoregressive decoding, per category.

  python -m specjax.bench specbench --target=smollm2-135m-instruct --drafters=ngram,mtp:smollm2/mtp \\
      --limit=3 --max_new_tokens=64 --json_out=out.json
  python -m specjax.bench specbench --target=qwen2.5-coder-1.5b-instruct \\
      --drafters=draft_model:qwen2.5-coder-0.5b-instruct --adaptive=on

A drafter is ``KIND[:CHECKPOINT]`` of a registered kind (``specjax.drafters.kinds()``), at the kind's
default gamma unless ``--gamma`` is given, with its kind's ``--drafter_option=KIND.OPTION=VALUE``; each runs with the loop's adaptive draft length and/or
with a fixed one (``--adaptive=on,off``). Adaptive rows use ``--confidence`` (greedy) or
``--sampled_confidence`` (temperature > 0) and the cost of a round at each compiled width measured in
the loop once per drafter (:func:`specjax.measure.loop_costs`, on the first call's prompts at batch
``--batch_size``) unless ``--verify_slope`` is given (then a line).

Reads any file in Spec-Bench's ``question.jsonl`` format (default: ours, built by
:mod:`specjax.data.specbench_prompts`) and decodes each question's first turn (chat-templated when
the tokenizer has a template) with the autoregressive baseline and with every drafter, in one
process, timing the two alternately after an untimed compile-and-warm-up call
(:func:`specjax.measure.paired_times`). MT-bench's eight categories in a Spec-Bench file are one
group, ``mt_bench``, as on its leaderboard.

As Spec-Bench computes them: a group's speedup is the mean of per-question speculative tokens/s
over the mean of per-question baseline tokens/s, and its mean accepted tokens is per target call
(``tokens_per_iteration``: drafts kept + the target's own token). alpha is weighted by the
positions each question verified. Each question runs as its own batch-1 call unless
``--batch_size`` > 1 (then questions of one group share a call, rows right-padded). Prompts are
right-padded to a power-of-two width (at least ``--min_prompt_width``) so a suite compiles once per
width, not once per question; the baseline and the drafter see the same padding and cache length.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import pathlib
import sys
import time

import numpy as np

from specjax.bench import common

DEFAULT_TARGET = "smollm2-135m-instruct"
MT_BENCH = ("writing", "roleplay", "reasoning", "math", "coding", "extraction", "stem", "humanities")


class InputError(common.UsageError):
  """Bad input found while setting up (file, checkpoint, drafter spec, prompt): reported in one line."""


def make_drafter(spec: str, target, gamma: int = 0, option_texts=()):
  """``(drafter, gamma)`` for ``KIND[:CHECKPOINT]`` from the registry, with the ``KIND.OPTION=VALUE``
  strings of its kind (gamma 0: the kind's default)."""
  import specjax  # pylint: disable=import-outside-toplevel
  kind, options = specjax.drafters.parse_drafter(spec, option_texts)
  if gamma:
    options["gamma"] = gamma
  options = specjax.drafters.make_options(kind, options)
  return specjax.drafters.build(kind, options, target), options.gamma


def check_corpus_held_out(spec: str, option_texts, records, rows) -> None:
  """Refuses a drafter whose ``corpus`` (a ``python -m specjax.train data`` folder) was generated from a
  question evaluated here: its drafts would copy the target's own answer."""
  import specjax  # pylint: disable=import-outside-toplevel
  kind, values = specjax.drafters.parse_drafter(spec, option_texts)
  if not values.get("corpus"):
    return
  from specjax.data import generated  # pylint: disable=import-outside-toplevel
  seen = {tuple(p) for p in generated.corpus_prompts(values["corpus"])}
  for record, ids in zip(records, rows):
    if tuple(int(t) for t in ids) in seen:
      raise ValueError(f"{kind} corpus {values['corpus']} holds the target's answer to question "
                       f"{record['question_id']} evaluated here; build the corpus from other questions")


def loop_costs(target, drafter, gamma: int, adaptive, call, *, max_new_tokens: int, sampling, eos_id, seed: int,
               repeats: int):
  """``((w, v(w)), ...)`` measured on ``call``'s prompts: a round of the adaptive loop at each
  compiled width in rounds at width 0, with the settings :func:`measure_call` runs."""
  import specjax  # pylint: disable=import-outside-toplevel
  extra = gamma + 1 if drafter.tree is None else drafter.tree.num_nodes  # the verify's tokens, as measure_call
  kw = _generate_kw(call, extra, max_new_tokens, sampling, eos_id, seed)
  return specjax.measure.loop_costs(target, drafter, call.prompts_BxP, call.lengths_B, gamma=gamma, adaptive=adaptive,
                                    repeats=repeats, **kw)


def _generate_kw(call, extra: int, max_new_tokens: int, sampling, eos_id, seed: int) -> dict:
  import jax  # pylint: disable=import-outside-toplevel
  return dict(max_new_tokens=max_new_tokens, sampling=sampling, rng=jax.random.PRNGKey(seed), eos_id=eos_id,
              max_len=call.prompts_BxP.shape[1] + max_new_tokens + extra)


def group_of(category: str) -> str:
  return "mt_bench" if category in MT_BENCH else category


def bucket_width(length: int, min_width: int) -> int:
  width = max(int(min_width), 1)
  while width < length:
    width *= 2
  return width


@dataclasses.dataclass(frozen=True)
class Call:
  """One decoding call: questions of one group, right-padded rows + their lengths."""
  group: str
  question_ids: tuple
  prompts_BxP: np.ndarray
  lengths_B: np.ndarray


def make_calls(records, rows, batch_size: int, min_width: int) -> list[Call]:
  """Calls of up to ``batch_size`` questions, each from one group, in file order."""
  by_group: dict[str, list] = {}
  for record, ids in zip(records, rows):
    by_group.setdefault(group_of(record["category"]), []).append((record["question_id"], ids))
  calls = []
  for group, items in by_group.items():
    for start in range(0, len(items), batch_size):
      chunk = items[start:start + batch_size]
      lengths_B = np.array([len(ids) for _, ids in chunk], np.int32)
      if lengths_B.min() < 1:
        raise ValueError(f"question {chunk[int(lengths_B.argmin())][0]} encodes to no tokens")
      prompts_BxP = np.zeros((len(chunk), bucket_width(int(lengths_B.max()), min_width)), np.int32)
      for r, (_, ids) in enumerate(chunk):
        prompts_BxP[r, :len(ids)] = ids
      calls.append(Call(group, tuple(q for q, _ in chunk), prompts_BxP, lengths_B))
  return calls


def measure_call(target, drafter, gamma: int, call: Call, *, max_new_tokens: int, sampling, eos_id, seed: int,
                 repeats: int, adaptive=None) -> tuple[dict, object]:
  """Baseline and speculative decoding of one call, timed alternately: raw counts for aggregation, and
  the drafter the call returned (carrying what it learned, ``Drafter.memory``). Every timed repeat
  starts from the drafter given, so none drafts from this call's own output."""
  import specjax  # pylint: disable=import-outside-toplevel
  tree = drafter.tree  # token trees verify every node; a chain gamma + 1 tokens
  extra = tree.num_nodes if tree is not None else gamma + 1
  common = _generate_kw(call, extra, max_new_tokens, sampling, eos_id, seed)
  base_fn = lambda: specjax.generate(target, call.prompts_BxP, call.lengths_B, **common)
  spec_fn = lambda: specjax.speculative_generate(target, drafter, call.prompts_BxP, call.lengths_B, gamma=gamma,
                                                 adaptive=adaptive, **common)
  base, spec, t_base, t_spec = specjax.measure.paired_times(base_fn, spec_fn, repeats)
  st = spec.stats
  accepted = np.asarray(st["accepted_per_position"], np.float64)
  return {
      "group": call.group,
      "question_ids": list(call.question_ids),
      "prompt_tokens": call.lengths_B.tolist(),
      "tokens": int(np.sum(spec.lengths)),
      "baseline_tokens": int(np.sum(base.lengths)),
      "seconds": t_spec,
      "baseline_seconds": t_base,
      "target_calls": int(st["target_calls"]),
      "baseline_target_calls": int(base.stats["target_calls"]),
      "row_iterations": int(st["row_iterations"]),
      "accepted": float(accepted.sum()),
      "verified": float(st["verified_positions"]),  # drafts the accept rule tested (alpha's weight)
      "submitted": float(np.sum(st["drafted_per_position"])),
      "alpha": float(st["alpha"]),
      "width_histogram": list(st["width_histogram"]),  # rounds per verify width or node budget
      "verify_widths": st.get("verify_widths", st.get("verify_budgets")),
      "tokens_per_iteration": float(st["tokens_per_iteration"]),
      "lossy": bool(st["lossy"]),
      "identical": bool(np.array_equal(spec.lengths, base.lengths) and np.array_equal(spec.tokens, base.tokens)),
  }, spec.drafter


def aggregate(measurements: list[dict], greedy: bool) -> dict:
  """One group's (or all groups') numbers, Spec-Bench style: speedup = mean spec speed / mean base speed."""
  speed = float(np.mean([m["tokens"] / m["seconds"] for m in measurements]))
  base_speed = float(np.mean([m["baseline_tokens"] / m["baseline_seconds"] for m in measurements]))
  row_iters = max(sum(m["row_iterations"] for m in measurements), 1)
  accepted = sum(m["accepted"] for m in measurements)
  verified = sum(m["verified"] for m in measurements)
  return {
      "num_questions": sum(len(m["question_ids"]) for m in measurements),
      "speedup": round(speed / base_speed, 4),
      "tokens_per_iteration": round(1.0 + accepted / row_iters, 4),  # Spec-Bench's mean accepted tokens
      "mean_accepted": round(accepted / row_iters, 4),                # drafts kept per target call
      "mean_submitted": round(sum(m["submitted"] for m in measurements) / row_iters, 4),
      "tokens_per_s": round(speed, 3),
      "baseline_tokens_per_s": round(base_speed, 3),
      "alpha": round(sum(m["alpha"] * m["verified"] for m in measurements) / max(verified, 1.0), 4),
      "identical_to_autoregressive": all(m["identical"] for m in measurements) if greedy else None,
      "lossy": any(m["lossy"] for m in measurements),
      "generated_tokens": sum(m["tokens"] for m in measurements),
      "baseline_generated_tokens": sum(m["baseline_tokens"] for m in measurements),
      "target_calls": sum(m["target_calls"] for m in measurements),
      "baseline_target_calls": sum(m["baseline_target_calls"] for m in measurements),
      "seconds": round(sum(m["seconds"] for m in measurements), 4),
      "baseline_seconds": round(sum(m["baseline_seconds"] for m in measurements), 4),
      "verify_widths": measurements[0].get("verify_widths"),
      "width_histogram": np.sum([m["width_histogram"] for m in measurements], axis=0).astype(int).tolist(),
  }


def benchmark(records, target, tokenizer, drafter_specs, *, max_new_tokens: int = 64, temperature: float = 0.0,
              batch_size: int = 1, chat: bool | None = None, repeats: int = 1, seed: int = 0,
              min_prompt_width: int = 64, progress: bool = True, gamma: int = 0, adaptive=("on", "off"),
              confidence: float = 0.4, sampled_confidence: float = 0.0, slope: float = -1.0,
              scale_confidence: bool = True, memory: float = -1.0,
              stop_at_eos: bool = True, drafter_options=()) -> dict:
  """Every drafter (with and/or without adaptive draft length) against the baseline on ``records``'
  first turns; the JSON-ready result."""
  import specjax  # pylint: disable=import-outside-toplevel
  from specjax import prompts as prompts_lib  # pylint: disable=import-outside-toplevel
  from tqdm import tqdm  # pylint: disable=import-outside-toplevel
  if chat is None:
    chat = bool(getattr(tokenizer, "chat_template", None))
  try:  # every input error surfaces here, before any compile
    built = {spec: make_drafter(spec, target, gamma, drafter_options) for spec in drafter_specs}
    rows = [prompts_lib.encode(tokenizer, r["turns"][0], chat) for r in records]
    for spec in drafter_specs:
      check_corpus_held_out(spec, drafter_options, records, rows)
    calls = make_calls(records, rows, batch_size, min_prompt_width)
  except (ValueError, FileNotFoundError) as e:
    raise InputError(str(e)) from e
  sampling = specjax.Sampling(temperature, 0, 1.0)
  eos_id = tokenizer.eos_id if stop_at_eos else None  # None: every row writes max_new_tokens
  estimate = {} if memory < 0 else {"memory": memory}  # < 0: Adaptive's default
  confidence = specjax.adaptive.run_cut(confidence, sampled_confidence, temperature)
  drafters, settings = {}, {}  # row name -> (drafter, gamma); row name -> its specjax.Adaptive or None
  for spec, (drafter, g) in built.items():
    for mode in adaptive:
      if mode == "on" and drafter.tree is not None and not drafter.tree_budgets:
        continue  # token trees verify every node, unless cut to node budgets: no adaptive row
      name = spec if len(adaptive) == 1 else f"{spec} {'adaptive' if mode == 'on' else 'fixed'}"
      drafters[name] = (drafter, g)
      settings[name] = None
      if mode == "on":
        if slope >= 0:
          settings[name] = specjax.Adaptive(confidence=confidence, verify_slope=slope,
                                            scale_confidence=scale_confidence, **estimate)
        else:
          unmeasured = specjax.Adaptive(confidence=confidence, scale_confidence=scale_confidence, **estimate)
          started = time.time()
          if progress:  # a few minutes per drafter on a small CPU: say what is running
            print(f"specbench: {name}: loop-measured round cost per width or budget ...", file=sys.stderr, flush=True)
          costs = loop_costs(target, drafter, g, unmeasured, calls[0], max_new_tokens=max_new_tokens,
                             sampling=sampling, eos_id=eos_id, seed=seed, repeats=max(repeats, 2))
          settings[name] = dataclasses.replace(unmeasured, verify_costs=costs)
          if progress:
            print(f"specbench: {name}: round costs {dict(costs)} (plain steps), {time.time() - started:.0f} s",
                  file=sys.stderr, flush=True)
  per_drafter: dict[str, list] = {spec: [] for spec in drafters}
  bar = tqdm(calls, desc="specbench", unit="call", disable=not progress)
  for call in bar:
    for spec, (drafter, gamma) in drafters.items():
      bar.set_postfix_str(f"{call.group}, {spec} and its baseline")  # a long-prompt call takes minutes
      m, learned = measure_call(target, drafter, gamma, call, max_new_tokens=max_new_tokens, sampling=sampling,
                                eos_id=eos_id, seed=seed, repeats=repeats, adaptive=settings[spec])
      per_drafter[spec].append({"drafter": spec, **m})
      if drafter.memory is not None:  # later questions draft from this one's text, never their own
        drafters[spec] = (learned, gamma)
  groups = list(dict.fromkeys(c.group for c in calls))
  results = {}
  for spec, ms in per_drafter.items():
    results[spec] = {
        "gamma": drafters[spec][1],
        "drafter_params": int(drafters[spec][0].num_params),
        "memory_bytes": _memory_bytes(drafters[spec][0]),
        "options": _options_of(spec.split(" ")[0], drafter_options),
        "adaptive": None if settings[spec] is None else dataclasses.asdict(settings[spec]),
        "categories": {g: aggregate([m for m in ms if m["group"] == g], sampling.greedy) for g in groups},
        "overall": aggregate(ms, sampling.greedy),
    }
    costs = (settings[spec].verify_costs or None) if settings[spec] is not None else None
    for agg in (*results[spec]["categories"].values(), results[spec]["overall"]):
      agg["predicted_speedup"] = predicted_speedup(agg, costs)
  return {
      "config": {"max_new_tokens": max_new_tokens, "temperature": temperature, "batch_size": batch_size,
                 "chat": chat, "repeats": repeats, "seed": seed, "eos_id": eos_id, "stop_at_eos": stop_at_eos,
                 "min_prompt_width": min_prompt_width, "num_questions": len(records), "num_calls": len(calls),
                 "drafters": {spec: g for spec, (_, g) in drafters.items()},
                 "target_params": int(target.num_params)},
      "categories": groups,
      "drafters": results,
      "calls": [m for ms in per_drafter.values() for m in ms],
  }


def predicted_speedup(agg: dict, costs) -> float | None:
  """Tokens per target call over the mean round cost in plain steps, the cost of each round's width
  (or node budget) from the loop-measured ``costs`` ``((w, v(w)), ...)``: the walltime formula fed
  what the rows measured. None without measured costs (fixed-length rows)."""
  if not costs or not agg.get("verify_widths"):
    return None
  ws, vs = zip(*sorted(costs))
  hist = np.asarray(agg["width_histogram"], np.float64)
  if hist.sum() == 0:
    return None
  round_cost = float(np.dot(hist, np.interp(agg["verify_widths"], ws, vs)) / hist.sum())
  return round(agg["tokens_per_iteration"] / round_cost, 4)


def _options_of(spec: str, option_texts) -> dict:
  import specjax  # pylint: disable=import-outside-toplevel
  return {k: list(v) if isinstance(v, tuple) else v for k, v in specjax.drafters.parse_drafter(spec, option_texts)[1].items()}


def _memory_bytes(drafter) -> int:
  import jax  # pylint: disable=import-outside-toplevel
  return int(sum(x.size * x.dtype.itemsize for x in jax.tree_util.tree_leaves(drafter.memory)))


def format_table(result: dict) -> str:
  """Spec-Bench's leaderboard columns: speedup per category, overall, mean accepted tokens, tokens/s."""
  groups = result["categories"]
  head = ["drafter", *groups, "overall", "accepted/call", "tok/s", "AR tok/s"]
  body = []
  for spec, r in result["drafters"].items():
    body.append([f"{spec} (γ={r['gamma']})", *(f"{r['categories'][g]['speedup']:.2f}x" for g in groups),
                 f"{r['overall']['speedup']:.2f}x", f"{r['overall']['tokens_per_iteration']:.2f}",
                 f"{r['overall']['tokens_per_s']:.1f}", f"{r['overall']['baseline_tokens_per_s']:.1f}"])
  widths = [max(len(row[i]) for row in [head, *body]) for i in range(len(head))]
  fmt = lambda row: "  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths)))
  lines = [fmt(head), "  ".join("-" * w for w in widths), *map(fmt, body)]
  for spec, r in result["drafters"].items():
    same = r["overall"]["identical_to_autoregressive"]
    lines.append(f"{spec}: alpha {r['overall']['alpha']:.3f}, accepted/call per category "
                 + ", ".join(f"{g} {r['categories'][g]['tokens_per_iteration']:.2f}" for g in groups)
                 + ("" if same is None else f"; identical to greedy autoregressive: {'yes' if same else 'NO'}")
                 + (f"; rounds per width/budget {r['overall']['verify_widths']}: {r['overall']['width_histogram']}"
                    if r["overall"].get("verify_widths") else ""))
  return "\n".join(lines)


def limit_per_category(records, limit: int) -> list[dict]:
  if not limit:
    return list(records)
  from specjax.data import specbench_prompts  # pylint: disable=import-outside-toplevel
  return specbench_prompts.head(records, limit)


def _flags():
  from absl import flags  # pylint: disable=import-outside-toplevel
  from specjax.data import specbench_prompts  # pylint: disable=import-outside-toplevel
  fv = flags.FlagValues()
  flags.DEFINE_string("questions", str(specbench_prompts.SHIPPED), "a Spec-Bench-format question.jsonl",
                      flag_values=fv)
  flags.DEFINE_string("target", DEFAULT_TARGET, "anything specjax.load_pretrained takes", flag_values=fv)
  flags.DEFINE_list("drafters", ["ngram"], "comma-separated KIND[:CHECKPOINT], e.g. ngram,mtp:smollm2/mtp",
                    flag_values=fv)
  flags.DEFINE_multi_string("drafter_option", [], "KIND.OPTION=VALUE for every drafter of that kind, e.g. "
                            "suffix.corpus=~/.cache/specjax/data/smollm2-135m-instruct-chat (repeatable)",
                            flag_values=fv)
  flags.DEFINE_integer("gamma", 0, "drafts per round (0: each kind's default)", flag_values=fv)
  flags.DEFINE_list("adaptive", ["on", "off"], "adaptive draft length: on, off, or both (a row each)",
                    flag_values=fv)
  flags.DEFINE_float("confidence", 0.4, "adaptive, greedy: a row stops at its drafter's first less sure position",
                     flag_values=fv)
  flags.DEFINE_float("sampled_confidence", 0.0, "adaptive, temperature > 0: the same cut (0: none)", flag_values=fv)
  flags.DEFINE_boolean("scale_confidence", True, "adaptive: a row's cut falls with its miss rate (false: the same "
                       "--confidence for every row)", flag_values=fv)
  flags.DEFINE_float("acceptance_memory", -1.0, "adaptive: weight of one observed draft in a row's acceptance "
                     "estimate (< 0: specjax.Adaptive's default)", flag_values=fv)
  flags.DEFINE_float("verify_slope", -1.0, "adaptive: verify cost per draft in target steps, a line (< 0: measured per width)",
                     flag_values=fv)
  flags.DEFINE_integer("limit", 0, "questions per category (0: all)", flag_values=fv)
  flags.DEFINE_integer("max_new_tokens", 128, "tokens generated per question (fewer at EOS)", flag_values=fv)
  flags.DEFINE_float("temperature", 0.0, "0: greedy", flag_values=fv)
  flags.DEFINE_integer("batch_size", 1, "questions of one category per call", flag_values=fv)
  flags.DEFINE_boolean("chat", None, "apply the chat template (default: when the tokenizer has one)",
                       flag_values=fv)
  flags.DEFINE_boolean("stop_at_eos", True, "rows stop at EOS (false: every row writes --max_new_tokens, so "
                       "sampled baseline and speculative runs, which draw different text, time the same length)",
                       flag_values=fv)
  flags.DEFINE_integer("repeats", 1, "timed runs of each side per question, after the warm-up", flag_values=fv)
  flags.DEFINE_integer("seed", 0, "sampling seed (temperature > 0)", flag_values=fv)
  flags.DEFINE_integer("min_prompt_width", 64, "prompts are padded to a power-of-two width >= this",
                       flag_values=fv)
  flags.DEFINE_string("json_out", "", "write the result here", flag_values=fv)
  flags.DEFINE_string("table", "", "print the table of a result JSON written by --json_out (no run)",
                      flag_values=fv)
  return fv


def _check(fv) -> None:
  for name, low in (("limit", 0), ("max_new_tokens", 1), ("batch_size", 1), ("repeats", 1), ("min_prompt_width", 1)):
    if getattr(fv, name) < low:
      raise ValueError(f"--{name} must be >= {low}, got {getattr(fv, name)}")
  if fv.temperature < 0:
    raise ValueError(f"--temperature must be >= 0, got {fv.temperature}")
  if not fv.drafters:
    raise ValueError("--drafters is empty; give at least one (ngram, draft_model:<checkpoint>)")
  if not fv.adaptive or set(fv.adaptive) - {"on", "off"}:
    raise ValueError(f"--adaptive must list on and/or off, got {fv.adaptive}")
  if fv.acceptance_memory > 1:
    raise ValueError(f"--acceptance_memory must be in [0, 1] (< 0: the default), got {fv.acceptance_memory}")
  if fv.gamma < 0:
    raise ValueError(f"--gamma must be >= 0 (0: each kind's default), got {fv.gamma}")
  _check_shared(fv)


def _check_shared(fv) -> None:
  """The ranges ``python -m specjax.run`` checks, for the flags this task shares with it."""
  from specjax import checks  # pylint: disable=import-outside-toplevel
  checks.check_ranges({k: fv[k].value for k in checks.RANGES if k in fv}, prefix="--")
  if fv.gamma:
    checks.check_gamma(fv.gamma, prefix="--")


def main(argv) -> int:
  fv = _flags()
  return common.run_task(fv, argv, __doc__, "specbench", lambda: _run(fv))


def _run(fv) -> int:
  try:
    _check(fv)
    if fv.table:
      print(format_table(json.loads(pathlib.Path(fv.table).read_text())))
      return 0
  except (ValueError, OSError) as e:
    raise InputError(str(e)) from e
  import jax  # pylint: disable=import-outside-toplevel
  import specjax  # pylint: disable=import-outside-toplevel
  from specjax.data import specbench_prompts  # pylint: disable=import-outside-toplevel
  try:
    records = limit_per_category(specbench_prompts.read(fv.questions), fv.limit)
    target, tokenizer = specjax.load_pretrained(fv.target)
  except (ValueError, FileNotFoundError) as e:
    raise InputError(str(e)) from e
  result = benchmark(records, target, tokenizer, fv.drafters, max_new_tokens=fv.max_new_tokens,
                     temperature=fv.temperature, batch_size=fv.batch_size, chat=fv.chat, repeats=fv.repeats,
                     seed=fv.seed, min_prompt_width=fv.min_prompt_width, gamma=fv.gamma,
                     adaptive=tuple(dict.fromkeys(fv.adaptive)), confidence=fv.confidence,
                     sampled_confidence=fv.sampled_confidence, slope=fv.verify_slope,
                     scale_confidence=fv.scale_confidence, memory=fv.acceptance_memory, stop_at_eos=fv.stop_at_eos,
                     drafter_options=tuple(fv.drafter_option))
  device = jax.devices()[0]
  result["config"].update(questions=str(fv.questions), target=fv.target, limit=fv.limit,
                          questions_sha256=hashlib.sha256(pathlib.Path(fv.questions).read_bytes()).hexdigest(),
                          platform=device.platform, device=device.device_kind, device_count=jax.device_count())
  c = result["config"]
  print(f"target {fv.target} on {c['device_count']}x {c['device']} | {c['num_questions']} questions | "
        f"max_new_tokens {c['max_new_tokens']} | temperature {c['temperature']} | batch {c['batch_size']} | "
        f"chat {c['chat']}")
  print(format_table(result))
  if fv.json_out:
    pathlib.Path(fv.json_out).write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {fv.json_out}")
  return 0
