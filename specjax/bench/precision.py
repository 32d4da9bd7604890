"""Decode speed per precision: params' storage dtype, compute dtype and KV cache dtype.

  python -m specjax.bench precision                                  # demo target and SmolLM2-135M
  python -m specjax.bench precision --models=demo/target --max_new_tokens=16 --name=smoke

For each model (anything ``specjax.load_pretrained`` takes) and each setting of
:data:`SETTINGS` -- float32 throughout, bfloat16 params cast to float32 at each use, bfloat16
throughout -- it loads the model, runs greedy ``generate`` once to compile, then times
``--repeats`` calls alternately across the settings (so every setting sees the same machine load)
and reports the median milliseconds per generated token,
plus whether each setting's greedy tokens equal float32's. ``param_dtype="auto"``
(:mod:`specjax.precision`) picks the setting that is fastest here for the platform. Writes
``<out_dir>/<name>.json`` and ``.md`` and prints the table.
"""
from __future__ import annotations

import platform
import time

from specjax.bench import common

# name -> (param_dtype, compute dtype, cache dtype)
SETTINGS = {"float32": ("float32", "float32", "float32"),
            "bf16 params, f32 compute": ("bfloat16", "float32", "float32"),
            "bfloat16": ("bfloat16", "bfloat16", "bfloat16")}
PROMPT = "def fibonacci(n):\n"


def measure_model(fv, source: str) -> list[dict]:
  import jax  # pylint: disable=import-outside-toplevel
  import numpy as np  # pylint: disable=import-outside-toplevel
  import specjax  # pylint: disable=import-outside-toplevel
  models, tok = {}, None
  for name, (param_dtype, dtype, cache_dtype) in SETTINGS.items():
    models[name], tok = specjax.load_pretrained(source, param_dtype=param_dtype, dtype=dtype, cache_dtype=cache_dtype,
                                                verbose=False)
  ids = np.asarray([tok.encode(PROMPT)] * fv.batch, np.int32)
  lengths = np.full((fv.batch,), ids.shape[1], np.int32)
  run = {name: (lambda m=m: specjax.generate(m, ids, lengths, max_new_tokens=fv.max_new_tokens))
         for name, m in models.items()}
  tokens = {name: np.asarray(fn().tokens) for name, fn in run.items()}  # compile + warm up
  times = {name: [] for name in run}
  for _ in range(fv.repeats):  # alternate, so every setting sees the same load
    for name, fn in run.items():
      start = time.perf_counter()
      jax.block_until_ready(fn().tokens)
      times[name].append(time.perf_counter() - start)
  rows = []
  base = float(np.median(times["float32"]))
  for name, (param_dtype, dtype, cache_dtype) in SETTINGS.items():
    secs = float(np.median(times[name]))
    rows.append({"model": source, "setting": name, "param_dtype": param_dtype, "dtype": dtype,
                 "cache_dtype": cache_dtype, "batch": fv.batch, "ms_per_token": round(1e3 * secs / fv.max_new_tokens, 3),
                 "vs_float32": round(secs / base, 3),
                 "same_tokens_as_float32": bool(np.array_equal(tokens[name], tokens["float32"]))})
    print(f"{source} {name:26s} {rows[-1]['ms_per_token']:8.2f} ms/token ({rows[-1]['vs_float32']:.2f}x float32's "
          f"time), tokens {'=' if rows[-1]['same_tokens_as_float32'] else '!='} float32's", flush=True)
  del models
  jax.clear_caches()
  return rows


def markdown(rows) -> str:
  lines = ["| model | setting (params / compute / KV cache) | ms per token | time vs float32 | greedy tokens = float32's |",
           "|---|---|---|---|---|"]
  for r in rows:
    lines.append(f"| {r['model']} | {r['setting']} ({r['param_dtype']} / {r['dtype']} / {r['cache_dtype']}) | "
                 f"{r['ms_per_token']:.2f} | {r['vs_float32']:.2f}x | {'yes' if r['same_tokens_as_float32'] else 'no'} |")
  return "\n".join(lines)


def _flags():
  from absl import flags  # pylint: disable=import-outside-toplevel
  fv = flags.FlagValues()
  flags.DEFINE_list("models", "demo/target,smollm2-135m-instruct", "load_pretrained sources", flag_values=fv)
  flags.DEFINE_integer("batch", 1, "rows per call (the same prompt)", flag_values=fv)
  flags.DEFINE_integer("max_new_tokens", 32, "greedy tokens per row", flag_values=fv)
  flags.DEFINE_integer("repeats", 5, "timed calls per setting after the compile run (median)", flag_values=fv)
  flags.DEFINE_string("out_dir", str(common.REPO / "benchmarks" / "precision"), "where <name>.md/.json go",
                      flag_values=fv)
  flags.DEFINE_string("name", "precision", "output file stem", flag_values=fv)
  return fv


def _run(fv) -> int:
  sources = common.parse_list(fv.models, str, "models", bool)
  for name in ("batch", "max_new_tokens", "repeats"):
    if fv[name].value < 1:
      raise common.UsageError(f"--{name} must be >= 1, got {fv[name].value}")
  import jax  # pylint: disable=import-outside-toplevel
  rows = [r for source in sources for r in measure_model(fv, source)]
  meta = {"batch": fv.batch, "max_new_tokens": fv.max_new_tokens, "repeats": fv.repeats, "prompt": PROMPT,
          "jax": jax.__version__, "backend": jax.default_backend(),
          "machine": platform.processor() or platform.machine()}
  header = (f"Greedy generate, batch {fv.batch}, {fv.max_new_tokens} new tokens, median of {fv.repeats} alternating "
            f"calls; jax {jax.__version__} on {jax.default_backend()}.")
  table = markdown(rows)
  common.write_report(fv.out_dir, fv.name, header, table, meta, rows)
  return 0


def main(argv) -> int:
  fv = _flags()
  return common.run_task(fv, argv, __doc__, "precision", lambda: _run(fv))
