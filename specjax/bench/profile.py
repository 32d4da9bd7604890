"""Where one decode step's time goes, and how far each piece is from its floor.

  python -m specjax.bench profile                                       # demo pair, batch 1 and 8
  python -m specjax.bench profile --target=smollm2-135m-instruct --drafter=ngram --out_name=smollm2
  python -m specjax.bench profile --batch_sizes=1 --max_new_tokens=16 --repeats=1 --out_dir=/tmp/p  # smoke

For each batch size, in one process (median of ``--repeats``; generate and the minimal loop are
timed alternately, :func:`specjax.measure.paired_times`):

* **autoregressive**: ``specjax.generate``'s time per token vs a minimal hand-written JAX loop over
  the same weights (``fori_loop``, one shared position, ``dynamic_update_slice`` into the stacked
  cache, argmax), and vs the floors: weight + KV bytes / the measured copy bandwidth, FLOPs / the
  measured matmul rate. The compiled step's ``cost_analysis()`` gives its FLOPs and bytes.
* **op breakdown**: one ``generate`` under ``jax.profiler``, XLA op time summed by op kind (what
  a profile of one step shows; wall time minus op time is the runtime's dispatch share).
* **speculative iteration** split into draft (``drafter.propose``), verify (one target pass over
  ``gamma + 1`` tokens), accept (the rule on the verify logits) and commit (``drafter.commit`` and
  writing the kept tokens into the rows), each jitted alone, beside the whole iteration inside the
  loop (``speculative_generate`` time / iterations): the difference is what the loop itself costs.

Writes ``profile_<out_name>.md`` and ``.json`` under ``--out_dir`` (default benchmarks/profile).
"""
from __future__ import annotations

import datetime
import json

from specjax.bench import common

LOOPED = 16  # calls per timed sample, inside one jitted loop (in-place carries, as in the real loop)
COLUMNS = [("batch", "B", "{}"), ("ar_ms_per_step", "AR ms/step", "{:.2f}"),
           ("minimal_ms_per_step", "minimal loop", "{:.2f}"), ("ar_over_minimal", "AR / minimal", "{:.2f}"),
           ("floor_bytes_ms", "byte floor", "{:.2f}"), ("floor_flops_ms", "FLOP floor", "{:.2f}"),
           ("hlo_flops", "step FLOPs (HLO)", "{:.3g}"), ("hlo_bytes", "step bytes (HLO)", "{:.3g}"),
           ("draft_ms", "draft", "{:.2f}"), ("verify_ms", "verify", "{:.2f}"), ("v", "v", "{:.2f}"),
           ("accept_ms", "accept", "{:.3f}"), ("commit_ms", "commit", "{:.3f}"),
           ("pieces_ms", "sum of pieces", "{:.2f}"), ("iteration_in_loop_ms", "iteration in loop", "{:.2f}")]


def per_call(body, carry, operands, repeats):
  """Seconds per ``body(i, carry, operands) -> carry`` when run LOOPED times in a ``fori_loop``.

  ``operands`` (models, drafters, arrays) enter the jit as arguments: weights closed over would be
  baked into the program as constants, which costs XLA seconds to compile for a 10M-parameter model.
  """
  import jax  # pylint: disable=import-outside-toplevel
  from specjax import measure  # pylint: disable=import-outside-toplevel
  looped = jax.jit(lambda c, ops: jax.lax.fori_loop(0, LOOPED, lambda i, c: body(i, c, ops), c))
  return measure.median_time(lambda: looped(carry, operands), repeats)[1] / LOOPED


def target_pass(i, carry, operands):
  """One target pass over ``tokens_BxT``; operands ``(target, tokens_BxT)``."""
  from specjax.models import api  # pylint: disable=import-outside-toplevel
  target, tokens_BxT = operands
  cache, acc = carry  # the pass's cache writes stay uncommitted: the length is unchanged
  logits_BxTxV, _, new = api.forward(target, tokens_BxT + 0 * i, cache)
  return new.with_length(cache.length_B), acc + logits_BxTxV[:, -1, :8].sum()


def draft_body(gamma):
  """``drafter.propose`` for ``gamma`` tokens; operands ``(drafter, tokens_BxS, seq_len_B)``."""
  import jax  # pylint: disable=import-outside-toplevel
  import specjax  # pylint: disable=import-outside-toplevel

  def body(i, carry, operands):
    drafter, tokens_BxS, seq_len_B = operands
    state, acc = carry
    tokens = tokens_BxS.at[:, -1].set(i)  # i enters the (unused) last slot so a stateless drafter is not hoisted
    state, draft = drafter.propose(state, tokens, seq_len_B, gamma, specjax.Sampling(), jax.random.PRNGKey(i))
    return state, acc + draft.tokens_BxG.sum()
  return body


def accept_body(i, acc, operands):
  """The greedy rule on fixed verify logits; operands ``(logits_BxTxV, tokens_BxT)``."""
  import jax.numpy as jnp  # pylint: disable=import-outside-toplevel
  from specjax import accept, sampling as sampling_lib, tree as tree_lib  # pylint: disable=import-outside-toplevel
  logits_BxTxV, tokens_BxT = operands
  chain = tree_lib.chain(tokens_BxT.shape[1] - 1)
  best_BxT = sampling_lib.argmax(logits_BxTxV + i.astype(jnp.float32) * 1e-30)  # i: not hoisted out of the loop
  leaf_B, next_B = accept.greedy_from_argmax(best_BxT, tokens_BxT, chain)
  return acc + leaf_B.sum() + next_B.sum()


def commit_body(max_new):
  """``drafter.commit``, then the kept tokens (n + 1 per row, up to ``max_new`` in all) written into the
  rows; operands ``(drafter, new_BxG1, n_B, hidden)``."""
  import jax.numpy as jnp  # pylint: disable=import-outside-toplevel
  from specjax.models import kv_cache  # pylint: disable=import-outside-toplevel

  def body(i, carry, operands):
    drafter, new_BxG1, n_B, hidden = operands
    state, tokens_BxS, seq_len_B, new_B, cache = carry
    state = drafter.commit(state, tokens_BxS, seq_len_B, n_B, hidden)
    count_B = jnp.minimum(n_B + 1, max_new - new_B)
    tokens_BxS = kv_cache.write_rows(tokens_BxS, new_BxG1 + 0 * i, seq_len_B)
    seq_len_B = seq_len_B + count_B
    return state, tokens_BxS, seq_len_B, new_B + count_B, cache.with_length(seq_len_B - 1)
  return body


def profile_batch(target, drafter, b, cfg, rates) -> dict:
  import jax  # pylint: disable=import-outside-toplevel
  import jax.numpy as jnp  # pylint: disable=import-outside-toplevel
  import numpy as np  # pylint: disable=import-outside-toplevel
  import specjax  # pylint: disable=import-outside-toplevel
  from specjax import measure, profiling  # pylint: disable=import-outside-toplevel
  from specjax.models import api  # pylint: disable=import-outside-toplevel
  p, n, g, reps = cfg["prompt_len"], cfg["max_new_tokens"], cfg["gamma"], cfg["repeats"]
  rng = np.random.default_rng(0)
  prompts = rng.integers(3, min(target.vocab_size, 250), (b, p)).astype(np.int32)
  lengths = np.full((b,), p, np.int32)
  max_len = p + n + g + 2
  generate = lambda: specjax.generate(target, prompts, lengths, max_new_tokens=n, max_len=max_len).tokens
  # -- autoregressive: specjax vs the minimal loop, alternately (load drifts hit both)
  minimal = profiling.minimal_greedy_loop(target, b, p, n, max_len)
  _, _, t_gen, t_min = measure.paired_times(generate, lambda: minimal(target.params, prompts), reps)
  same = bool((np.asarray(minimal(target.params, prompts)) == generate()).all())
  step = profiling.step_cost(target, b, p + n // 2, max_len)
  floor_bytes_s = step["stream_bytes"] / rates["copy_bytes_per_s"]
  floor_flops_s = step["model_flops"] / rates["matmul_flops_per_s"]
  ops = profiling.op_breakdown(generate, f"/tmp/specjax_profile_trace_b{b}")
  row = {"batch": b, "ar_ms_per_step": 1e3 * t_gen / n, "ar_op_ms_per_step": ops["op_ms"] / n,
         "ar_top_ops": [(k, round(v / n, 3), c // n) for k, v, c in ops["top"]], "minimal_ms_per_step": 1e3 * t_min / n,
         "ar_over_minimal": t_gen / t_min, "minimal_same_tokens": same,
         "floor_bytes_ms": 1e3 * floor_bytes_s, "floor_flops_ms": 1e3 * floor_flops_s, **step}
  # -- speculative iteration, piece by piece
  prefill = jax.jit(api.start, static_argnums=3)
  cache, tokens_BxS, seq_len_B = prefill(target, jnp.asarray(prompts), jnp.asarray(lengths), max_len)
  state, _ = measure.initial_state(target, drafter, jnp.asarray(prompts), jnp.asarray(lengths), max_len=max_len)
  zero = jnp.zeros((), jnp.float32)
  t_draft = per_call(draft_body(g), (state, jnp.zeros((), jnp.int32)), (drafter, tokens_BxS, seq_len_B), reps)
  draft_BxG = measure.propose_tokens(drafter, state, tokens_BxS, seq_len_B, jax.random.PRNGKey(0), gamma=g,
                                    sampling=specjax.Sampling())
  verify_in = jnp.concatenate([tokens_BxS[:, p - 1:p], draft_BxG], axis=1)
  t_verify = per_call(target_pass, (cache, zero), (target, verify_in), reps)
  t_one = per_call(target_pass, (cache, zero), (target, verify_in[:, :1]), reps)
  logits = jax.jit(lambda m, c, t: api.forward(m, t, c)[0])(target, cache, verify_in)
  t_accept = per_call(accept_body, jnp.zeros((), jnp.int32), (logits, verify_in), reps)
  n_B = jnp.full((b,), g // 2, jnp.int32)
  new_BxG1 = jnp.concatenate([draft_BxG, draft_BxG[:, :1]], 1)
  hidden = jnp.zeros((b, g + 1, target.config.d_model))
  t_commit = per_call(commit_body(n), (state, tokens_BxS, seq_len_B, jnp.zeros_like(seq_len_B), cache),
                      (drafter, new_BxG1, n_B, hidden), reps)
  spec = lambda: specjax.speculative_generate(target, drafter, prompts, lengths, gamma=g, max_new_tokens=n,
                                              max_len=max_len)
  out, t_spec = measure.median_time(spec, reps)
  iters = out.stats["iterations"]
  row.update({"one_token_pass_ms": 1e3 * t_one, "draft_ms": 1e3 * t_draft, "verify_ms": 1e3 * t_verify,
              "v": t_verify / t_one, "accept_ms": 1e3 * t_accept, "commit_ms": 1e3 * t_commit,
              "pieces_ms": 1e3 * (t_draft + t_verify + t_accept + t_commit),
              "iteration_in_loop_ms": 1e3 * t_spec / iters, "iterations": iters,
              "tokens_per_iteration": out.stats["tokens_per_iteration"]})
  return row


def _flags():
  from absl import flags  # pylint: disable=import-outside-toplevel
  fv = flags.FlagValues()
  flags.DEFINE_string("target", "demo/target", "checkpoint name or path (specjax.load_pretrained)", flag_values=fv)
  flags.DEFINE_string("drafter", "demo/drafter", "a draft-model checkpoint, or 'ngram'", flag_values=fv)
  flags.DEFINE_list("batch_sizes", "1,8", "batch sizes", flag_values=fv)
  flags.DEFINE_integer("gamma", 4, "draft length", flag_values=fv)
  flags.DEFINE_integer("prompt_len", 48, "prompt tokens per row", flag_values=fv)
  flags.DEFINE_integer("max_new_tokens", 128, "generated tokens per row", flag_values=fv)
  flags.DEFINE_integer("repeats", 5, "timed repeats (median)", flag_values=fv)
  flags.DEFINE_integer("copy_mb", 128, "buffer of the bandwidth measurement (MB; the byte floor)", flag_values=fv)
  flags.DEFINE_integer("matmul_n", 1024, "square matmul of the FLOP-rate measurement (the FLOP floor)",
                       flag_values=fv)
  flags.DEFINE_string("out_dir", "benchmarks/profile", "where the table goes", flag_values=fv)
  flags.DEFINE_string("out_name", "demo", "file name suffix", flag_values=fv)
  return fv


def _run(fv) -> int:
  batches = common.parse_list(fv.batch_sizes, int, "batch_sizes", lambda b: b >= 1)
  for name in ("gamma", "prompt_len", "max_new_tokens", "repeats", "copy_mb", "matmul_n"):
    if fv[name].value < 1:
      raise common.UsageError(f"--{name} must be >= 1, got {fv[name].value}")
  import jax  # pylint: disable=import-outside-toplevel
  import specjax  # pylint: disable=import-outside-toplevel
  from specjax import profiling  # pylint: disable=import-outside-toplevel
  target, _ = specjax.load_pretrained(fv.target)
  drafter = (specjax.drafters.NGram(n=3) if fv.drafter == "ngram"
             else specjax.drafters.DraftModel(specjax.load_pretrained(fv.drafter)[0]))
  cfg = {"prompt_len": fv.prompt_len, "max_new_tokens": fv.max_new_tokens, "gamma": fv.gamma, "repeats": fv.repeats}
  rates = profiling.machine_rates(copy_mb=fv.copy_mb, matmul_n=fv.matmul_n)
  print(f"machine: copy {rates['copy_bytes_per_s'] / 1e9:.1f} GB/s, matmul {rates['matmul_flops_per_s'] / 1e9:.1f} "
        "GFLOP/s (float32)")
  rows = []
  for b in batches:
    rows.append(profile_batch(target, drafter, b, cfg, rates))
    print({k: (round(v, 4) if isinstance(v, float) else v) for k, v in rows[-1].items()})
  out_dir = common.out_dir(fv.out_dir)
  head = (f"{fv.target} ({target.num_params:,} params) with {fv.drafter}, gamma {cfg['gamma']}, greedy, "
          f"prompt {cfg['prompt_len']}, {cfg['max_new_tokens']} new tokens, median of {cfg['repeats']}; "
          f"copy {rates['copy_bytes_per_s'] / 1e9:.1f} GB/s, matmul {rates['matmul_flops_per_s'] / 1e9:.1f} GFLOP/s; "
          f"jax {jax.__version__}, {datetime.date.today()}. Times in ms.")
  md = [head, "", "| " + " | ".join(c[1] for c in COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
  md += ["| " + " | ".join(fmt.format(r[k]) for k, _, fmt in COLUMNS) + " |" for r in rows]
  (out_dir / f"profile_{fv.out_name}.json").write_text(
      json.dumps({"header": head, "rates": rates, "config": cfg, "rows": rows}, indent=1))
  md += ["", "Where one autoregressive step's op time goes (jax.profiler; ms per step incl. the prefill's "
         "share, summed over XLA's threads, so it can exceed wall time; ops per step):", ""]
  for r in rows:
    md.append(f"- B={r['batch']}: {r['ar_op_ms_per_step']:.2f} ms in ops of {r['ar_ms_per_step']:.2f} ms wall; "
              + ", ".join(f"{k} {v:.2f} ({c})" for k, v, c in r["ar_top_ops"][:5]))
  (out_dir / f"profile_{fv.out_name}.md").write_text("\n".join(md) + "\n")
  print("\n".join(md))
  return 0


def main(argv) -> int:
  fv = _flags()
  return common.run_task(fv, argv, __doc__, "profile", lambda: _run(fv))
