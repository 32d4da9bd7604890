"""Reference points for the decode loop's speed: this machine's rates, a step's compiled cost, and
the minimal hand-written loop a jitted ``generate`` should match (``python -m specjax.bench profile``).

* :func:`machine_rates`: measured copy bandwidth (bytes read + written per second) and float32
  matmul rate, so floors are this machine's, not a datasheet's.
* :func:`step_cost`: one cached one-token target step compiled alone: XLA's ``cost_analysis()``
  FLOPs and bytes, and the analytic bytes it must stream (weights once, plus the KV cache read at
  the given length) and FLOPs it must do (2 per weight per row, plus attention).
* :func:`minimal_greedy_loop`: the plainest JAX greedy loop over a Llama-style decoder's params:
  every row at one shared position, ``dynamic_update_slice`` into the stacked cache, argmax.
* :func:`full_cache_copies`: ops in an optimized HLO module that produce a whole KV-cache-shaped
  buffer by copying or transposing one (what an in-place cache update must not do).
"""
from __future__ import annotations

import functools
import re
import time

import jax
import jax.numpy as jnp
import numpy as np

from specjax.models import api, kv_cache, store
from specjax.models.layers import rope


def _best_time(fn, repeats=5):
  jax.block_until_ready(fn())
  best = float("inf")
  for _ in range(repeats):
    t0 = time.perf_counter()
    jax.block_until_ready(fn())
    best = min(best, time.perf_counter() - t0)
  return best


def machine_rates(copy_mb: int = 128, matmul_n: int = 1024, loops: int = 8) -> dict:
  """Best-of-5 float32 streaming bandwidth and matmul rate of this process's default device.

  Both run ``loops`` times inside one jitted loop on a carried buffer, so no call pays for fresh
  allocations (page faults on a new 128 MB output cost more than the copy itself).
  """
  x = jnp.ones((copy_mb * 2**20 // 4,), jnp.float32)
  stream = jax.jit(lambda a: jax.lax.fori_loop(0, loops, lambda i, a: a * 1.0000001, a))
  t_copy = _best_time(lambda: stream(x)) / loops
  m = jnp.full((matmul_n, matmul_n), 1.0 / matmul_n, jnp.float32)
  mm = jax.jit(lambda a, b: jax.lax.fori_loop(0, loops, lambda i, a: a @ b, a))  # b an argument, not a constant
  t_mm = _best_time(lambda: mm(m, m)) / loops
  return {"copy_bytes_per_s": 2 * x.nbytes / t_copy, "matmul_flops_per_s": 2 * matmul_n ** 3 / t_mm}


def step_cost(target, batch: int, length: int, max_len: int) -> dict:
  """Compiled and analytic cost of one cached one-token step at cache ``length`` (decoder-only)."""
  cfg = target.config
  cache = kv_cache.init_cache(cfg.num_layers, batch, max_len, cfg.num_kv_heads, cfg.head_dim)
  cache = cache.with_length(jnp.full((batch,), length, jnp.int32))
  tokens = jnp.ones((batch, 1), jnp.int32)
  step = jax.jit(lambda m, t, c: api.forward(m, t, c)[::2], donate_argnums=2)
  cost = step.lower(target, tokens, cache).compile().cost_analysis()
  cost = cost[0] if isinstance(cost, (list, tuple)) else cost
  param_bytes = sum(x.nbytes for x in jax.tree_util.tree_leaves(target.params))
  kv_bytes = 2 * cfg.num_layers * batch * length * cfg.num_kv_heads * cfg.head_dim * 4
  embed = cfg.vocab_size * cfg.d_model
  matmul_weights = target.num_params - (0 if cfg.tie_embeddings else embed)  # the input lookup is not a matmul
  attn_flops = 4 * cfg.num_layers * batch * length * cfg.num_heads * cfg.head_dim
  return {"hlo_flops": float(cost.get("flops", 0.0)), "hlo_bytes": float(cost.get("bytes accessed", 0.0)),
          "stream_bytes": float(param_bytes + kv_bytes), "kv_bytes": float(kv_bytes),
          "model_flops": float(2 * matmul_weights * batch + attn_flops)}


def _rms(x, w, eps):
  return x * jax.lax.rsqrt(jnp.mean(x * x, -1, keepdims=True) + eps) * w


def _minimal_forward(cfg, max_len, params, tok_BxT, pos, k_c, v_c):
  b, t = tok_BxT.shape
  params = store.per_layer_params(params)  # per-layer names whether or not the model scans
  x = params["embed"][tok_BxT]
  positions_BxT = jnp.broadcast_to(pos + jnp.arange(t), (b, t))
  mask_TxS = jnp.arange(max_len)[None] <= (pos + jnp.arange(t))[:, None]
  g = cfg.num_heads // cfg.num_kv_heads
  for i in range(cfg.num_layers):
    p = params[f"layer_{i}"]
    h = _rms(x, p["attn_norm"]["scale"], cfg.norm_eps)
    q = jnp.einsum("bte,ehd->bthd", h, p["attn"]["q"])
    k = jnp.einsum("bte,ehd->bthd", h, p["attn"]["k"])
    v = jnp.einsum("bte,ehd->bthd", h, p["attn"]["v"])
    q, k = rope(q, positions_BxT, cfg.rope_theta), rope(k, positions_BxT, cfg.rope_theta)
    k_c = jax.lax.dynamic_update_slice(k_c, k[None], (i, 0, pos, 0, 0))
    v_c = jax.lax.dynamic_update_slice(v_c, v[None], (i, 0, pos, 0, 0))
    q = q.reshape(b, t, cfg.num_kv_heads, g, cfg.head_dim)
    s = jnp.einsum("btkgd,bskd->bkgts", q, k_c[i]) * cfg.head_dim ** -0.5
    s = jnp.where(mask_TxS, s, -1e30)
    o = jnp.einsum("bkgts,bskd->btkgd", jax.nn.softmax(s, -1), v_c[i]).reshape(b, t, cfg.num_heads, cfg.head_dim)
    x = x + jnp.einsum("bthd,hde->bte", o, p["attn"]["o"])
    h = _rms(x, p["mlp_norm"]["scale"], cfg.norm_eps)
    x = x + (jax.nn.silu(h @ p["mlp"]["gate"]) * (h @ p["mlp"]["up"])) @ p["mlp"]["down"]
  x = _rms(x, params["final_norm"]["scale"], cfg.norm_eps)
  return x @ (params["embed"].T if cfg.tie_embeddings else params["lm_head"]), k_c, v_c


def minimal_greedy_loop(target, batch: int, prompt_len: int, max_new_tokens: int, max_len: int):
  """``fn(params, prompts_BxP) -> tokens_BxN``: greedy, equal-length prompts, no EOS, float32.

  Only for plain Llama-style decoders (the demo pair, SmolLM2); other families raise.
  """
  cfg = target.config
  plain = dict(norm_offset=0.0, sandwich_norms=False, qk_norm=False, qkv_bias=False, scale_embeddings=False,
               mlp_activation="silu", query_pre_attn_scalar=0.0, layer_windows=())
  odd = {k: getattr(cfg, k, None) for k, v in plain.items() if getattr(cfg, k, v) != v}
  if target.is_encoder_decoder or odd:
    raise ValueError(f"the minimal loop covers plain Llama-style decoders only; this config has {odd or 'T5'}")
  shape = (cfg.num_layers, batch, max_len, cfg.num_kv_heads, cfg.head_dim)
  fwd = functools.partial(_minimal_forward, cfg, max_len)

  @jax.jit
  def run(params, prompts_BxP):
    k_c, v_c = jnp.zeros(shape), jnp.zeros(shape)
    logits, k_c, v_c = fwd(params, prompts_BxP, 0, k_c, v_c)
    out = jnp.zeros((batch, max_new_tokens), jnp.int32)

    def body(i, carry):
      tok_B, k_c, v_c, out = carry
      out = out.at[:, i].set(tok_B)
      logits, k_c, v_c = fwd(params, tok_B[:, None], prompt_len + i, k_c, v_c)
      return jnp.argmax(logits[:, 0], -1).astype(jnp.int32), k_c, v_c, out

    tok_B = jnp.argmax(logits[:, -1], -1).astype(jnp.int32)
    return jax.lax.fori_loop(0, max_new_tokens, body, (tok_B, k_c, v_c, out))[3]

  return run


def _loop_bodies(hlo_text: str) -> list[str]:
  """The text of every computation that is some ``while`` loop's body."""
  names = set(re.findall(r"body=%?([\w.\-]+)", hlo_text))
  bodies, current = [], None
  for line in hlo_text.splitlines():
    head = re.match(r"\s*%?([\w.\-]+) .*\{\s*$", line) if not line.startswith(" ") else None
    if head and "=" not in line.split("{")[0].split("(")[0]:
      current = [] if head.group(1) in names else None
      if current is not None:
        bodies.append(current)
    elif current is not None:
      current.append(line)
  return ["\n".join(b) for b in bodies]


def full_cache_copies(hlo_text: str, cache_shape) -> list[str]:
  """Ops inside the loop bodies of an optimized HLO module that make a new cache-shaped buffer by
  ``copy`` or ``transpose`` (the initial zero cache, made once before the loop, does not count)."""
  dims = ",".join(str(d) for d in cache_shape)
  pat = re.compile(r"= f32\[" + re.escape(dims) + r"\]\{[\d,]*\} (copy|transpose)\(")
  return [line.strip()[:200] for body in _loop_bodies(hlo_text) for line in body.splitlines() if pat.search(line)]


def op_breakdown(fn, trace_dir: str, top: int = 8) -> dict:
  """Runs ``fn`` (already compiled) under ``jax.profiler`` and sums XLA op time by op kind.

  Returns ``{"op_ms": total op time, "ops": op count, "top": [(kind, ms, count), ...]}``; the
  kind is the op name without its numeric suffix (``transpose_copy_fusion``, ``ynn_fusion``...).
  Wall time minus op time is the runtime's own share (dispatch, thread wake-ups), which grows
  on a loaded machine.
  """
  import collections  # pylint: disable=import-outside-toplevel
  import glob  # pylint: disable=import-outside-toplevel
  import gzip  # pylint: disable=import-outside-toplevel
  import json  # pylint: disable=import-outside-toplevel
  import shutil  # pylint: disable=import-outside-toplevel
  shutil.rmtree(trace_dir, ignore_errors=True)
  t0 = time.perf_counter()
  with jax.profiler.trace(trace_dir, create_perfetto_trace=True):
    jax.block_until_ready(fn())
    wall = time.perf_counter() - t0
  trace = json.load(gzip.open(glob.glob(f"{trace_dir}/**/perfetto_trace.json.gz", recursive=True)[0]))
  events = trace["traceEvents"] if isinstance(trace, dict) else trace
  ms, count = collections.Counter(), collections.Counter()
  for e in events:
    name = e.get("name", "")
    if e.get("ph") != "X" or name.startswith(("$", "Thunk", "Pjit", "Common", "PjRt", "end:", "np.", "Slinky")):
      continue  # python frames, runtime wrappers and waits: not XLA ops
    kind = re.sub(r"[.\d]+$", "", name)
    ms[kind] += e.get("dur", 0) / 1e3
    count[kind] += 1
  return {"wall_ms": 1e3 * wall, "op_ms": sum(ms.values()), "ops": sum(count.values()),
          "top": [(k, round(v, 2), count[k]) for k, v in ms.most_common(top)]}
