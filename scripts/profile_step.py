"""Where one decode step's time goes, and how far each piece is from its floor.

  python scripts/profile_step.py                                        # demo pair, batch 1 and 8
  python scripts/profile_step.py --target=smollm2-135m-instruct --drafter=ngram --out_name=smollm2
  python scripts/profile_step.py --batch_sizes=1 --max_new_tokens=16 --repeats=1 --out_dir=/tmp/p  # smoke

For each batch size, in one process (median of ``--repeats``; generate and the minimal loop are
timed alternately):

* **autoregressive**: ``specjax.generate``'s time per token vs a minimal hand-written JAX loop over
  the same weights (``fori_loop``, one shared position, ``dynamic_update_slice`` into the stacked
  cache, argmax), and vs the floors: weight + KV bytes / the measured copy bandwidth, FLOPs / the
  measured matmul rate. The compiled step's ``cost_analysis()`` gives its FLOPs and bytes.
* **op breakdown**: one ``generate`` under ``jax.profiler``, XLA op time summed by op kind (what
  a profile of one step shows; wall time minus op time is the runtime's dispatch share).
* **speculative iteration** split into draft (``drafter.propose``), verify (one target pass over
  ``gamma + 1`` tokens), accept (the rule on the verify logits) and commit (``drafter.commit`` and
  the row bookkeeping), each jitted alone, beside the whole iteration inside the loop
  (``speculative_generate`` time / iterations): the difference is what the loop itself costs.

Writes ``profile_<out_name>.md`` and ``.json`` under ``--out_dir`` (default benchmarks/profile).
"""
from __future__ import annotations

import datetime
import functools
import json
import pathlib
import time

from absl import app, flags
import jax
import jax.numpy as jnp
import numpy as np

import specjax
from specjax import accept, decode, measure, sampling as sampling_lib
from specjax import tree as tree_lib
from specjax.loading import load_pretrained
from specjax.models import api
from specjax import profiling

_TARGET = flags.DEFINE_string("target", "demo/target", "checkpoint name or path (specjax.load_pretrained)")
_DRAFTER = flags.DEFINE_string("drafter", "demo/drafter", "a draft-model checkpoint, or 'ngram'")
_BATCHES = flags.DEFINE_string("batch_sizes", "1,8", "comma-separated batch sizes")
_GAMMA = flags.DEFINE_integer("gamma", 4, "draft length")
_PROMPT_LEN = flags.DEFINE_integer("prompt_len", 48, "prompt tokens per row")
_NEW = flags.DEFINE_integer("max_new_tokens", 128, "generated tokens per row")
_REPEATS = flags.DEFINE_integer("repeats", 5, "timed repeats (median)")
_OUT_DIR = flags.DEFINE_string("out_dir", "benchmarks/profile", "where the table goes")
_OUT_NAME = flags.DEFINE_string("out_name", "demo", "file name suffix")


def _median(fn, repeats):
  jax.block_until_ready(fn())
  times = []
  for _ in range(repeats):
    t0 = time.perf_counter()
    jax.block_until_ready(fn())
    times.append(time.perf_counter() - t0)
  return float(np.median(times))


@functools.partial(jax.jit, static_argnames=("max_len",))
def _prefilled(target, prompts_BxP, lengths_B, *, max_len):
  return api.start(target, prompts_BxP, lengths_B, max_len)


_LOOPED = 16  # calls per timed sample, inside one jitted loop (in-place carries, as in the real loop)


def _per_call(body, carry, repeats):
  """Seconds per ``body(i, carry) -> carry`` when run _LOOPED times in a ``fori_loop``."""
  looped = jax.jit(lambda c: jax.lax.fori_loop(0, _LOOPED, body, c))
  return _median(lambda: looped(carry), repeats) / _LOOPED


def _target_pass(target, tokens_BxT):
  def body(i, carry):  # the pass's cache writes stay uncommitted: the length is unchanged
    cache, acc = carry
    logits_BxTxV, _, new = api.forward(target, tokens_BxT + 0 * i, cache)
    return new.with_length(cache.length_B), acc + logits_BxTxV[:, -1, :8].sum()
  return body


def _draft_body(drafter, tokens_BxS, seq_len_B, gamma):
  def body(i, carry):  # i enters the (unused) last slot so a stateless drafter is not hoisted
    state, acc = carry
    tokens = tokens_BxS.at[:, -1].set(i)
    state, draft = drafter.propose(state, tokens, seq_len_B, gamma, specjax.Sampling(), jax.random.PRNGKey(i))
    return state, acc + draft.tokens_BxG.sum()
  return body


def _accept_body(logits_BxTxV, tokens_BxT):
  chain = tree_lib.chain(tokens_BxT.shape[1] - 1)
  def body(i, acc):  # i enters the logits so the rule is not hoisted out of the loop
    best_BxT = sampling_lib.argmax(logits_BxTxV + i.astype(jnp.float32) * 1e-30)
    leaf_B, next_B = accept.greedy_from_argmax(best_BxT, tokens_BxT, chain)
    return acc + leaf_B.sum() + next_B.sum()
  return body


def _commit_body(drafter, new_BxG1, n_B, hidden, max_new):
  def body(i, carry):
    state, rows, cache = carry
    state = drafter.commit(state, rows.tokens_BxS, rows.seq_len_B, n_B, hidden)
    rows, _ = decode._append(rows, new_BxG1 + 0 * i, n_B + 1, max_new, None)  # pylint: disable=protected-access
    return state, rows, cache.with_length(rows.seq_len_B - 1)
  return body


def profile_batch(target, drafter, b, cfg, rates) -> dict:
  p, n, g, reps = cfg["prompt_len"], cfg["max_new_tokens"], cfg["gamma"], cfg["repeats"]
  rng = np.random.default_rng(0)
  prompts = rng.integers(3, min(target.vocab_size, 250), (b, p)).astype(np.int32)
  lengths = np.full((b,), p, np.int32)
  max_len = p + n + g + 2
  # -- autoregressive: specjax vs the minimal loop, alternately
  minimal = profiling.minimal_greedy_loop(target, b, p, n, max_len)
  _, _, t_gen, t_min = measure.paired_times(  # alternately, so load drifts hit both
      lambda: specjax.generate(target, prompts, lengths, max_new_tokens=n, max_len=max_len).tokens,
      lambda: minimal(target.params, prompts), reps)
  same = bool((np.asarray(minimal(target.params, prompts)) ==
               specjax.generate(target, prompts, lengths, max_new_tokens=n, max_len=max_len).tokens).all())
  step = profiling.step_cost(target, b, p + n // 2, max_len)
  floor_bytes_s = step["stream_bytes"] / rates["copy_bytes_per_s"]
  floor_flops_s = step["model_flops"] / rates["matmul_flops_per_s"]
  ops = profiling.op_breakdown(
      lambda: specjax.generate(target, prompts, lengths, max_new_tokens=n, max_len=max_len).tokens,
      f"/tmp/specjax_profile_trace_b{b}")
  row = {"batch": b, "ar_ms_per_step": 1e3 * t_gen / n, "ar_op_ms_per_step": ops["op_ms"] / n,
         "ar_top_ops": [(k, round(v / n, 3), c // n) for k, v, c in ops["top"]], "minimal_ms_per_step": 1e3 * t_min / n,
         "ar_over_minimal": t_gen / t_min, "minimal_same_tokens": same,
         "floor_bytes_ms": 1e3 * floor_bytes_s, "floor_flops_ms": 1e3 * floor_flops_s, **step}
  # -- speculative iteration, piece by piece
  cache, tokens_BxS, seq_len_B = _prefilled(target, jnp.asarray(prompts), jnp.asarray(lengths), max_len=max_len)
  rows = decode.Rows(tokens_BxS, seq_len_B, jnp.zeros_like(seq_len_B), jnp.zeros_like(seq_len_B, bool))
  state = jax.jit(drafter.init, static_argnums=3)(target, jnp.asarray(prompts), jnp.asarray(lengths), max_len)
  zero = jnp.zeros((), jnp.float32)
  t_draft = _per_call(_draft_body(drafter, tokens_BxS, seq_len_B, g), (state, jnp.zeros((), jnp.int32)), reps)
  _, draft = jax.jit(drafter.propose, static_argnums=(3, 4))(state, tokens_BxS, seq_len_B, g, specjax.Sampling(),
                                                             jax.random.PRNGKey(0))
  verify_in = jnp.concatenate([tokens_BxS[:, p - 1:p], draft.tokens_BxG], axis=1)
  t_verify = _per_call(_target_pass(target, verify_in), (cache, zero), reps)
  t_one = _per_call(_target_pass(target, verify_in[:, :1]), (cache, zero), reps)
  logits = jax.jit(lambda c, t: api.forward(target, t, c)[0])(cache, verify_in)
  t_accept = _per_call(_accept_body(logits, verify_in), jnp.zeros((), jnp.int32), reps)
  n_B = jnp.full((b,), g // 2, jnp.int32)
  new_BxG1 = jnp.concatenate([draft.tokens_BxG, draft.tokens_BxG[:, :1]], 1)
  hidden = jnp.zeros((b, g + 1, target.config.d_model))
  t_commit = _per_call(_commit_body(drafter, new_BxG1, n_B, hidden, n), (state, rows, cache), reps)
  spec = lambda: specjax.speculative_generate(target, drafter, prompts, lengths, gamma=g, max_new_tokens=n,
                                              max_len=max_len)
  out = spec()
  t_spec = _median(lambda: spec().tokens, reps)
  iters = out.stats["iterations"]
  row.update({"one_token_pass_ms": 1e3 * t_one, "draft_ms": 1e3 * t_draft, "verify_ms": 1e3 * t_verify,
              "v": t_verify / t_one, "accept_ms": 1e3 * t_accept, "commit_ms": 1e3 * t_commit,
              "pieces_ms": 1e3 * (t_draft + t_verify + t_accept + t_commit),
              "iteration_in_loop_ms": 1e3 * t_spec / iters, "iterations": iters,
              "tokens_per_iteration": out.stats["tokens_per_iteration"]})
  return row


_COLUMNS = [("batch", "B", "{}"), ("ar_ms_per_step", "AR ms/step", "{:.2f}"),
            ("minimal_ms_per_step", "minimal loop", "{:.2f}"), ("ar_over_minimal", "AR / minimal", "{:.2f}"),
            ("floor_bytes_ms", "byte floor", "{:.2f}"), ("floor_flops_ms", "FLOP floor", "{:.2f}"),
            ("hlo_flops", "step FLOPs (HLO)", "{:.3g}"), ("hlo_bytes", "step bytes (HLO)", "{:.3g}"),
            ("draft_ms", "draft", "{:.2f}"), ("verify_ms", "verify", "{:.2f}"), ("v", "v", "{:.2f}"),
            ("accept_ms", "accept", "{:.3f}"), ("commit_ms", "commit", "{:.3f}"),
            ("pieces_ms", "sum of pieces", "{:.2f}"), ("iteration_in_loop_ms", "iteration in loop", "{:.2f}")]


def main(argv):
  del argv
  target, _ = load_pretrained(_TARGET.value)
  drafter = (specjax.drafters.NGram(n=3) if _DRAFTER.value == "ngram"
             else specjax.drafters.DraftModel(load_pretrained(_DRAFTER.value)[0]))
  cfg = {"prompt_len": _PROMPT_LEN.value, "max_new_tokens": _NEW.value, "gamma": _GAMMA.value,
         "repeats": _REPEATS.value}
  rates = profiling.machine_rates()
  print(f"machine: copy {rates['copy_bytes_per_s'] / 1e9:.1f} GB/s, matmul {rates['matmul_flops_per_s'] / 1e9:.1f} "
        "GFLOP/s (float32)")
  rows = []
  for b in [int(x) for x in _BATCHES.value.split(",")]:
    rows.append(profile_batch(target, drafter, b, cfg, rates))
    print({k: (round(v, 4) if isinstance(v, float) else v) for k, v in rows[-1].items()})
  out_dir = pathlib.Path(_OUT_DIR.value)
  out_dir.mkdir(parents=True, exist_ok=True)
  head = (f"{_TARGET.value} ({target.num_params:,} params) with {_DRAFTER.value}, gamma {cfg['gamma']}, greedy, "
          f"prompt {cfg['prompt_len']}, {cfg['max_new_tokens']} new tokens, median of {cfg['repeats']}; "
          f"copy {rates['copy_bytes_per_s'] / 1e9:.1f} GB/s, matmul {rates['matmul_flops_per_s'] / 1e9:.1f} GFLOP/s; "
          f"jax {jax.__version__}, {datetime.date.today()}. Times in ms.")
  md = [head, "", "| " + " | ".join(c[1] for c in _COLUMNS) + " |", "|" + "---|" * len(_COLUMNS)]
  md += ["| " + " | ".join(fmt.format(r[k]) for k, _, fmt in _COLUMNS) + " |" for r in rows]
  (out_dir / f"profile_{_OUT_NAME.value}.md").write_text("\n".join(md) + "\n")
  (out_dir / f"profile_{_OUT_NAME.value}.json").write_text(
      json.dumps({"header": head, "rates": rates, "config": cfg, "rows": rows}, indent=1))
  md += ["", "Where one autoregressive step's op time goes (jax.profiler; ms per step incl. the prefill's "
         "share, summed over XLA's threads, so it can exceed wall time; ops per step):", ""]
  for r in rows:
    md.append(f"- B={r['batch']}: {r['ar_op_ms_per_step']:.2f} ms in ops of {r['ar_ms_per_step']:.2f} ms wall; "
              + ", ".join(f"{k} {v:.2f} ({c})" for k, v, c in r["ar_top_ops"][:5]))
  (out_dir / f"profile_{_OUT_NAME.value}.md").write_text("\n".join(md) + "\n")
  print("\n".join(md))


if __name__ == "__main__":
  app.run(main)
