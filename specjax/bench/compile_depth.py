"""First-call (compile) time against depth, with the decoder's layers unrolled or scanned.

  python -m specjax.bench compile_depth                          # depths 8, 32, 80; both layouts
  python -m specjax.bench compile_depth --depths=2,8 --name=smoke
  python -m specjax.bench compile_depth --d_model=576 --mlp_dim=1536 --heads=9 --kv_heads=3 --depths=30 \\
      --max_new_tokens=64 --name=smollm2_shape                  # step time at SmolLM2-135M's shape

For each depth and layout, a random decoder of that depth (``specjax.testing.tiny_decoder``, width
``--d_model``) is the target, and a 1-layer decoder of the same vocabulary drafts for it
(``DraftModel``, ``--gamma``). With every compiled program dropped first (``jax.clear_caches``, no
persistent cache), it times the first call of ``generate`` and of ``speculative_generate`` (trace
+ compile + run) and then the median of ``--repeats`` further calls, which run the compiled loop
(``ar_ms_per_token``: the autoregressive time per generated token). The scanned layout is one
``lax.scan`` over params stacked ``[L, ...]`` (``DecoderConfig.scan_layers``), so its compile should
not grow with depth. Writes ``<out_dir>/<name>.json`` and ``.md`` and prints the table.
"""
from __future__ import annotations

import platform
import time

from specjax.bench import common

LAYOUTS = ("unrolled", "scanned")


def measure_one(fv, depth: int, layout: str) -> dict:
  import jax  # pylint: disable=import-outside-toplevel
  import numpy as np  # pylint: disable=import-outside-toplevel
  import specjax  # pylint: disable=import-outside-toplevel
  from specjax import measure, testing  # pylint: disable=import-outside-toplevel
  jax.clear_caches()
  scan = layout == "scanned"
  target = testing.tiny_decoder(fv.vocab, seed=0, d_model=fv.d_model, mlp_dim=fv.mlp_dim, num_heads=fv.heads,
                                num_kv_heads=fv.kv_heads, head_dim=fv.d_model // fv.heads, num_layers=depth,
                                scan_layers=scan, weight_scale=1.0)
  draft = testing.tiny_decoder(fv.vocab, seed=1, d_model=32, mlp_dim=64, num_layers=1, scan_layers=scan)
  rng = np.random.default_rng(0)
  prompts = rng.integers(1, fv.vocab, (fv.batch, 8)).astype(np.int32)
  lengths = np.full((fv.batch,), 8, np.int32)
  new = fv.max_new_tokens
  ar = lambda: specjax.generate(target, prompts, lengths, max_new_tokens=new)
  spec = lambda: specjax.speculative_generate(target, specjax.drafters.DraftModel(draft), prompts, lengths,
                                              gamma=fv.gamma, max_new_tokens=new)
  row = {"depth": depth, "layout": layout}
  for name, fn in (("generate", ar), ("speculative", spec)):
    start = time.perf_counter()
    jax.block_until_ready(fn().tokens)
    row[f"{name}_first_s"] = round(time.perf_counter() - start, 2)
    _, secs = measure.median_time(fn, fv.repeats)
    row[f"{name}_ms_per_token"] = round(1e3 * secs / new, 3)
  print(f"depth {depth:3d} {layout:8s}: first call generate {row['generate_first_s']:.1f} s, speculative "
        f"{row['speculative_first_s']:.1f} s; then {row['generate_ms_per_token']:.2f} / "
        f"{row['speculative_ms_per_token']:.2f} ms per token", flush=True)
  return row


def markdown(rows) -> str:
  lines = ["| depth | layout | generate first call (s) | speculative first call (s) | generate ms/token | "
           "speculative ms/token |", "|---|---|---|---|---|---|"]
  for r in rows:
    lines.append(f"| {r['depth']} | {r['layout']} | {r['generate_first_s']:.1f} | {r['speculative_first_s']:.1f} | "
                 f"{r['generate_ms_per_token']:.2f} | {r['speculative_ms_per_token']:.2f} |")
  return "\n".join(lines)


def _flags():
  from absl import flags  # pylint: disable=import-outside-toplevel
  fv = flags.FlagValues()
  flags.DEFINE_list("depths", "8,32,80", "target depths", flag_values=fv)
  flags.DEFINE_list("layouts", ",".join(LAYOUTS), "unrolled and/or scanned", flag_values=fv)
  flags.DEFINE_integer("d_model", 64, "target width", flag_values=fv)
  flags.DEFINE_integer("mlp_dim", 128, "target MLP width", flag_values=fv)
  flags.DEFINE_integer("heads", 4, "target query heads (head_dim = d_model / heads)", flag_values=fv)
  flags.DEFINE_integer("kv_heads", 2, "target KV heads", flag_values=fv)
  flags.DEFINE_integer("vocab", 256, "vocabulary of both models", flag_values=fv)
  flags.DEFINE_integer("batch", 1, "rows per call", flag_values=fv)
  flags.DEFINE_integer("gamma", 4, "drafts per round", flag_values=fv)
  flags.DEFINE_integer("max_new_tokens", 16, "new tokens per row", flag_values=fv)
  flags.DEFINE_integer("repeats", 3, "timed calls after the first (median)", flag_values=fv)
  flags.DEFINE_string("out_dir", str(common.REPO / "benchmarks" / "compile_depth"), "where <name>.md/.json go",
                      flag_values=fv)
  flags.DEFINE_string("name", "results", "output file stem", flag_values=fv)
  return fv


def _run(fv) -> int:
  depths = common.parse_list(fv.depths, int, "depths", lambda d: d >= 1)
  layouts = common.parse_list(fv.layouts, str, "layouts", lambda x: x in LAYOUTS)
  for name in ("d_model", "mlp_dim", "heads", "kv_heads", "vocab", "batch", "gamma", "max_new_tokens", "repeats"):
    if fv[name].value < 1:
      raise common.UsageError(f"--{name} must be >= 1, got {fv[name].value}")
  if fv.d_model % fv.heads or fv.heads % fv.kv_heads:
    raise common.UsageError(f"--d_model={fv.d_model} must be a multiple of --heads={fv.heads}, and --heads of "
                            f"--kv_heads={fv.kv_heads}")
  import jax  # pylint: disable=import-outside-toplevel
  cache_was = jax.config.jax_enable_compilation_cache
  jax.config.update("jax_enable_compilation_cache", False)  # first calls must compile
  try:
    rows = [measure_one(fv, d, layout) for d in depths for layout in layouts]
  finally:  # the setting is part of every later cache key: left off, a caller's cached programs all miss
    jax.config.update("jax_enable_compilation_cache", cache_was)
  meta = {k: fv[k].value for k in ("d_model", "mlp_dim", "heads", "kv_heads", "vocab", "batch", "gamma",
                                    "max_new_tokens", "repeats")}
  meta.update(jax=jax.__version__, backend=jax.default_backend(), machine=platform.processor() or platform.machine())
  header = (f"Random decoder targets of width {fv.d_model} (MLP {fv.mlp_dim}, {fv.heads} heads / {fv.kv_heads} KV), "
            f"a 1-layer draft model, gamma {fv.gamma}, batch {fv.batch}, {fv.max_new_tokens} new tokens; jax "
            f"{jax.__version__} on {jax.default_backend()}. First call: trace + compile + run, every cache dropped.")
  table = markdown(rows)
  common.write_report(fv.out_dir, fv.name, header, table, meta, rows)
  return 0


def main(argv) -> int:
  fv = _flags()
  return common.run_task(fv, argv, __doc__, "compile_depth", lambda: _run(fv))
