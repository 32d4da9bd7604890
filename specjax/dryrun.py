"""Plan a sharded deployment on a laptop: compile decode steps with abstract inputs, no weights.

``dry_run(config)`` lowers three steps on a (fake) mesh of the config's size, with params and KV
cache as ``jax.ShapeDtypeStruct`` carrying ``NamedSharding``s (``jax.eval_shape`` for the shapes,
so nothing is allocated):

* target step: the target reads one token (autoregressive decoding, one call per token);
* draft step: the drafter reads one token (``gamma`` of these per speculative iteration);
* verify step: the target reads ``gamma + 1`` tokens (one per speculative iteration).

Before compiling, the params, KV cache and an activation estimate per device at the full depth
(:func:`memory_need`, from abstract shapes) are checked against the accelerator's memory: a plan
that does not fit is an error naming the numbers (:func:`check_fits`).

Each step is ``forward + argmax`` with the cache donated. From the compiled executable it reads
``cost_analysis()`` (FLOPs, bytes accessed), ``memory_analysis()`` (temp bytes) and counts
collectives in the HLO text; param and KV-cache bytes per device come from shapes and shardings.

Depth is extrapolated, not compiled: each step is compiled at 2 and 4 layers and every per-step
number is taken as linear in depth, ``x(L) = x(2) + (L - 2) * (x(4) - x(2)) / 2`` (layers are
identical and unrolled, so this is exact for collective counts and close for costs). Compiling
80 unrolled layers on 16 fake CPU devices would take minutes each.

Roofline latency per step (per device; all devices run the same SPMD program)::

  t = max(flops / peak_flops, bytes / hbm_bandwidth)         # compute- or memory-bound body
      + n_collectives * collective_latency                     # fixed cost per collective
      + collective_bytes / interconnect_bandwidth              # ring traffic, 2(n-1)/n per all-reduce

Collectives are serialized with compute (no overlap): at batch 1 each all-reduce sits on the
critical path between two matmuls. When the current process has fewer devices than the mesh, the
dry run re-runs itself in a subprocess with ``--xla_force_host_platform_device_count``.
Numbers from the CPU compiler are a plan, not a measurement: the TPU compiler fuses differently
(bytes accessed on CPU include f32 upcasts of bf16 dots), so the table also shows the analytic
weights+cache bytes each step must stream at least once (the roofline uses those on CPU).
Params and caches are planned in the config's compute ``dtype`` (bf16 serving); note that
``api.start`` currently allocates float32 caches, twice the KV bytes planned here.
"""
from __future__ import annotations

import dataclasses
import functools
import json
import math
import re
import subprocess
import sys
import time

import flax.linen as nn
import jax
import jax.numpy as jnp

from specjax import hardware, latency, sharding
from specjax.dryrun_report import format_markdown, format_table, save_report  # noqa: F401  (re-exported)
from specjax.theory import walltime_improvement
from specjax.models import families
from specjax.models import api, bundle
from specjax.models.bundle import Model

COLLECTIVES = ("all-reduce", "all-gather", "reduce-scatter", "all-to-all", "collective-permute")
_OP = re.compile(r"=\s*(?P<shape>\(.*?\)|\w+\[[^\]]*\]\S*)\s+"  # result shape (array or tuple), then op(
                 r"(?P<op>" + "|".join(COLLECTIVES) + r")(?P<start>-start)?\(")
_ARRAY = re.compile(r"(?P<dt>[a-z]+\d*)\[(?P<dims>[\d,]*)\]")
_GROUPS_IOTA = re.compile(r"replica_groups=\[(\d+),(\d+)\]")  # [groups, size]<=[n]
_GROUPS_LIST = re.compile(r"replica_groups=\{\{([\d,]*)\}")   # {{0,1,..},..}
_GROUPS_MESH = re.compile(r"replica_groups=mesh\[([^\]]*)\]\s*\{([^}]*)\}")  # mesh['a'=2,..] {'a'}
_DEPTHS = (2, 4)
PAPER = {
    "chen2023": {"baseline_ms_per_token": 14.1, "sps_greedy_xsum_ms_per_token": 7.00, "gamma": 4,
                 "draft_ms_per_token": 1.8,
                 "speedup_greedy_xsum": round(14.1 / 7.00, 2), "source": "Chen et al. 2023 (arXiv 2302.01318) tab. 1"},
    "leviathan2022": {"speedup": 3.4, "alpha": 0.75, "gamma": 7,
                      "source": "Leviathan et al. 2022 (arXiv 2211.17192) tab. 2, T5-XXL/T5-small EnDe temp 0"},
}


# ----------------------------------------------------------------------------- HLO collectives
def _text(compiled_or_text) -> str:
  return compiled_or_text if isinstance(compiled_or_text, str) else compiled_or_text.as_text()


def count_collectives(compiled_or_text) -> dict[str, int]:
  """Collective ops in (compiled) HLO text, by kind, plus ``total``.

  Static count: an op inside a while loop counts once. Async pairs count by their ``-start``.
  """
  counts = dict.fromkeys(COLLECTIVES, 0)
  for m in _OP.finditer(_text(compiled_or_text)):
    counts[m["op"]] += 1
  counts["total"] = sum(counts.values())
  return counts


def _array_bytes(shape_text: str) -> list[int]:
  out = []
  for m in _ARRAY.finditer(shape_text):
    dims = [int(d) for d in m["dims"].split(",") if d]
    bits = int(re.sub(r"\D", "", m["dt"]) or 8) if m["dt"] != "pred" else 8
    out.append(math.prod(dims) * bits // 8)
  return out


def _group_size(line: str, num_devices: int) -> int:
  if m := _GROUPS_MESH.search(line):
    sizes = {k: int(v) for k, v in re.findall(r"'(\w+)'=(\d+)", m[1])}
    return math.prod(sizes[a] for a in re.findall(r"'(\w+)'", m[2]))
  if m := _GROUPS_IOTA.search(line):
    return int(m[2])
  if m := _GROUPS_LIST.search(line):
    return len(m[1].split(","))
  return num_devices


def collective_ops(compiled_or_text, num_devices: int) -> list[tuple[str, int, int]]:
  """``[(op, result bytes, group size)]`` for every collective in (compiled) HLO text."""
  out = []
  for line in _text(compiled_or_text).splitlines():
    m = _OP.search(line)
    if not m:
      continue
    sizes = _array_bytes(m["shape"])
    size = sizes[-1] if m["start"] else sum(sizes)  # an async start's tuple ends with its output
    out.append((m["op"], int(size), _group_size(line, num_devices)))
  return out


def collective_bytes(compiled_or_text, num_devices: int) -> float:
  """Bytes each device sends for the collectives, ring algorithms (2(n-1)/n per all-reduce)."""
  return float(sum(latency.wire_bytes(op, size, n) for op, size, n in collective_ops(compiled_or_text, num_devices)))


# ----------------------------------------------------------------------------- abstract inputs
def build_module(cfg: dict) -> nn.Module:
  """The module of a family's config fields (a dry run plans from the size fields; weights are never read)."""
  module_cls, config = families.config_from_fields(cfg)
  return module_cls(config)


def with_depth(module: nn.Module, layers: int) -> nn.Module:
  fields = {f.name for f in dataclasses.fields(module.cfg)}
  field = families.of_config(module.cfg).decoder_layers_field()  # T5: its decoder's depth
  extra = {}
  if getattr(module.cfg, "layer_windows", ()):  # per-layer windows follow the depth (the pattern's start)
    extra["layer_windows"] = tuple(module.cfg.layer_windows[:layers])
  if "scan_layers" in fields:  # costs are extrapolated from unrolled layers (module doc)
    extra["scan_layers"] = False
  return type(module)(dataclasses.replace(module.cfg, **{field: layers}, **extra))


def abstract_model(module: nn.Module, mesh, dtype=None, rules=None) -> Model:
  """A Model whose params are sharded ``ShapeDtypeStruct``s in ``dtype`` (default: compute dtype)."""
  dtype = jnp.dtype(dtype or module.cfg.dtype)
  args, kwargs = bundle._dummy_inputs(module)  # pylint: disable=protected-access
  shapes = nn.unbox(jax.eval_shape(lambda: module.init(jax.random.PRNGKey(0), *args, **kwargs))["params"])
  model = Model(module, shapes)
  shards = sharding.param_shardings(model, mesh, rules)
  params = jax.tree_util.tree_map(lambda p, s: jax.ShapeDtypeStruct(p.shape, dtype, sharding=s), shapes, shards)
  return Model(module, params)


def abstract_cache(model: Model, mesh, batch: int, prompt_len: int, max_len: int, dtype=None):
  """The decode cache's shapes (``jax.eval_shape`` of ``api.start``), sharded: 5-D buffers as
  ``[layers, batch, len, heads, head_dim]``, everything else batch-first."""
  dtype = jnp.dtype(dtype or model.config.dtype)
  sharding.check_batch(batch, mesh)
  prompts = jax.ShapeDtypeStruct((batch, prompt_len), jnp.int32)
  lengths = jax.ShapeDtypeStruct((batch,), jnp.int32)
  cache = jax.eval_shape(functools.partial(api.start, max_len=max_len), model, prompts, lengths)[0]

  def place(x):
    if x.ndim == 5:
      return jax.ShapeDtypeStruct(x.shape, dtype if jnp.issubdtype(x.dtype, jnp.floating) else x.dtype,
                                  sharding=sharding.cache_sharding(mesh, shape=x.shape))
    return jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=sharding.batch_sharding(mesh, x.ndim))
  return jax.tree_util.tree_map(place, cache)


def per_device_bytes(tree) -> int:
  """Bytes one device holds of a pytree of sharded ShapeDtypeStructs (or arrays)."""
  return int(sum(math.prod(x.sharding.shard_shape(x.shape)) * jnp.dtype(x.dtype).itemsize
                 for x in jax.tree_util.tree_leaves(tree)))


def _step(model, cache, tokens_BxT):
  logits_BxTxV, _, cache = api.forward(model, tokens_BxT, cache)
  return jnp.argmax(logits_BxTxV, -1).astype(jnp.int32), cache


def compile_step(model: Model, cache, mesh, batch: int, num_tokens: int):
  """Compiles one decode step (``num_tokens`` new tokens per row) with abstract inputs."""
  tokens = jax.ShapeDtypeStruct((batch, num_tokens), jnp.int32, sharding=sharding.batch_sharding(mesh, 2))
  with jax.set_mesh(mesh):
    return jax.jit(_step, donate_argnums=1).lower(model, cache, tokens).compile()


def step_costs(compiled, num_devices: int, acc=None) -> dict[str, float]:
  cost = compiled.cost_analysis()
  cost = cost[0] if isinstance(cost, (list, tuple)) else cost
  ops = collective_ops(compiled, num_devices)
  out = {"flops": float(cost.get("flops", 0.0)), "bytes_accessed": float(cost.get("bytes accessed", 0.0)),
         "collective_bytes": float(sum(latency.wire_bytes(op, size, n) for op, size, n in ops))}
  out.update({f"n_{k}": v for k, v in count_collectives(compiled).items()})
  if acc is not None:  # hops and wire bytes under both topologies (linear in depth: extrapolated)
    for topo in ("ring", "torus"):
      terms = latency.collective_terms(ops, latency.LatencyModel.of(acc, topology=topo))
      out.update({f"{topo}_{k}": v for k, v in terms.items()})
  try:
    mem = compiled.memory_analysis()
    out["temp_bytes"] = float(mem.temp_size_in_bytes)
  except Exception:  # pylint: disable=broad-except  # not every backend implements it
    out["temp_bytes"] = float("nan")
  return out


# ----------------------------------------------------------------------------- roofline
def roofline_s(flops, memory_bytes, n_collectives, coll_bytes, acc: hardware.Accelerator) -> float:
  return (max(flops / acc.peak_flops, memory_bytes / acc.hbm_bandwidth) + n_collectives * acc.collective_latency_s
          + coll_bytes / acc.interconnect_bandwidth)


def implied_alpha(speedup: float, gamma: int, c: float, v: float) -> float | None:
  """The alpha at which :func:`walltime_improvement` equals ``speedup`` (None if unreachable)."""
  lo, hi = 0.0, 1.0
  if walltime_improvement(hi, gamma, c, v) < speedup or walltime_improvement(lo, gamma, c, v) > speedup:
    return None
  for _ in range(60):  # increasing in alpha: bisect
    mid = (lo + hi) / 2
    lo, hi = (mid, hi) if walltime_improvement(mid, gamma, c, v) < speedup else (lo, mid)
  return round((lo + hi) / 2, 4)


def _extrapolate(by_depth: dict[int, dict], depth: int) -> dict[str, float]:
  if depth in by_depth:
    return dict(by_depth[depth])
  (a, xa), (b, xb) = sorted(by_depth.items())
  return {k: xa[k] + (depth - a) * (xb[k] - xa[k]) / (b - a) for k in xa}


def memory_need(module, mesh, batch, prompt_len, max_len, num_tokens, dtype=None, cache_dtype=None) -> dict:
  """Bytes one device holds at the module's true depth, from sharded abstract shapes (nothing is
  compiled; a decoder is traced scanned, so depth costs nothing): params, KV cache and an estimate
  of a ``num_tokens`` step's activations (float32 logits plus a few residual-stream-sized buffers)."""
  fields = {f.name for f in dataclasses.fields(module.cfg)}
  if "scan_layers" in fields:
    module = type(module)(dataclasses.replace(module.cfg, scan_layers=True))
  model = abstract_model(module, mesh, dtype)
  cache = abstract_cache(model, mesh, batch, prompt_len, max_len, cache_dtype)
  cfg = module.cfg
  width = max(cfg.d_model, getattr(cfg, "mlp_dim", 0))
  rows = batch * num_tokens / dict(mesh.shape).get("data", 1)  # the batch splits over 'data'
  activations = 4 * rows * (cfg.vocab_size + 4 * width)
  return {"param_bytes": per_device_bytes(model.params), "cache_bytes": per_device_bytes(cache),
          "activation_bytes": int(activations)}


def check_fits(needs: dict, acc, mesh) -> None:
  """A plan whose params + KV cache + activations per device exceed the accelerator's memory is an
  error before anything compiles, with the numbers and what to change."""
  total = sum(sum(n.values()) for n in needs.values())
  if total <= acc.hbm_bytes:
    return
  parts = ", ".join(f"{name} params {n['param_bytes'] / 1e9:.2f} GB + KV cache {n['cache_bytes'] / 1e9:.2f} GB + "
                    f"activations {n['activation_bytes'] / 1e9:.2f} GB" for name, n in needs.items())
  raise ValueError(f"does not fit: per device {parts} = {total / 1e9:.2f} GB > {acc.name} memory "
                   f"{acc.hbm_bytes / 1e9:.1f} GB on mesh {sharding.mesh_shape_str(mesh)}; use a larger mesh "
                   "(mesh), a bfloat16 dtype, or a smaller batch_size / max_new_tokens")


def profile_step(module, mesh, batch, prompt_len, max_len, num_tokens, acc, dtype=None, cache_dtype=None):
  """Costs of one step at the module's true depth (compiled at <= 4 layers, see module doc)."""
  depth = module.cfg.num_layers
  depths = (depth,) if depth <= max(_DEPTHS) else _DEPTHS
  by_depth, seconds = {}, 0.0
  for d in depths:
    model = abstract_model(with_depth(module, d), mesh, dtype)
    cache = abstract_cache(model, mesh, batch, prompt_len, max_len, cache_dtype)
    t0 = time.perf_counter()
    compiled = compile_step(model, cache, mesh, batch, num_tokens)
    seconds += time.perf_counter() - t0
    by_depth[d] = step_costs(compiled, mesh.size, acc)
    by_depth[d].update(param_bytes=per_device_bytes(model.params), cache_bytes=per_device_bytes(cache))
  out = _extrapolate(by_depth, depth)
  # CPU: bytes accessed include f32 upcasts of bf16 weights; charge what a step must stream instead.
  on_cpu = jax.default_backend() == "cpu"
  out["memory_bytes"] = out["param_bytes"] + out["cache_bytes"] if on_cpu else out["bytes_accessed"]
  out["bandwidth_only_s"] = roofline_s(out["flops"], out["memory_bytes"], out["n_total"], out["collective_bytes"],
                                       dataclasses.replace(acc, collective_latency_s=0.0))
  out["num_layers"] = depth
  out["compiled_depths"], out["compile_s"] = list(depths), round(seconds, 2)
  return out


def step_latency(step: dict, acc, lat: latency.LatencyModel) -> dict[str, float]:
  """The latency-aware breakdown of one profiled step under ``lat`` (see specjax.latency)."""
  coll = latency.collective_seconds(step, lat, prefix=f"{lat.topology}_")
  return latency.step_breakdown(step["flops"], step["memory_bytes"], coll, int(step["num_layers"]), acc, lat)


# ----------------------------------------------------------------------------- dry run
def _plain(config) -> dict:
  return config.to_dict() if hasattr(config, "to_dict") else json.loads(json.dumps(config))


def mesh_size(config) -> int:
  return math.prod(sharding.parse_mesh_shape(_plain(config).get("mesh", "1x1")).values())


def dry_run(config) -> dict:
  """Plans ``config`` (see configs/chinchilla70b_4b.py); abstract shapes only, no weights."""
  cfg = _plain(config)
  need = mesh_size(cfg)
  if jax.device_count() < need:
    return _in_subprocess(cfg, need)
  acc = hardware.get(cfg.get("hardware", "tpu_v4"))
  if cfg.get("collective_latency_us") is not None:  # legacy diagnostic override
    acc = dataclasses.replace(acc, collective_latency_s=float(cfg["collective_latency_us"]) * 1e-6)
  mesh = sharding.factored_mesh(sharding.make_mesh(cfg.get("mesh", "1x1")))  # the layout shard() uses
  draft_cfg = dict(cfg.get("drafter") or {})
  gamma, batch, prompt_len = int(draft_cfg.get("gamma", 4)), int(cfg["batch_size"]), int(cfg["prompt_len"])
  max_len = prompt_len + int(cfg["max_new_tokens"]) + gamma + 1
  alpha = float(cfg.get("alpha", 0.75))
  target = build_module(cfg["target"])
  args = (mesh, batch, prompt_len, max_len)
  needs = {"target": memory_need(target, *args, gamma + 1)}
  if draft_cfg.get("kind", "draft_model") == "draft_model" and draft_cfg.get("model"):
    needs["draft"] = memory_need(build_module(draft_cfg["model"]), *args, 1)
  check_fits(needs, acc, mesh)
  steps = {"target": profile_step(target, *args, 1, acc), "verify": profile_step(target, *args, gamma + 1, acc)}
  layout = {"target": _layout(target, mesh)}
  if draft_cfg.get("kind", "draft_model") == "draft_model" and draft_cfg.get("model"):
    drafter = build_module(draft_cfg["model"])
    steps["draft"] = profile_step(drafter, *args, 1, acc)
    layout["draft"] = _layout(drafter, mesh)
  else:  # weightless drafters (ngram): no device step worth charging
    steps["draft"] = dict.fromkeys(steps["target"], 0.0) | {"compiled_depths": [], "compile_s": 0.0}
  lat, calibration, variants = calibrated_latency_model(cfg, steps, acc)
  for step in steps.values():
    step.update(step_latency(step, acc, lat) if step["compiled_depths"] else
                dict(compute_s=0.0, memory_s=0.0, body_s=0.0, collective_s=0.0, overhead_s=0.0, latency_s=0.0))
  t_ms = {k: s["latency_s"] * 1e3 for k, s in steps.items()}
  c, v = t_ms["draft"] / t_ms["target"], t_ms["verify"] / t_ms["target"]
  speedup = float(walltime_improvement(alpha, gamma, c, v))
  chen = PAPER["chen2023"]
  param_bytes = steps["target"]["param_bytes"] + steps["draft"]["param_bytes"]
  cache_bytes = steps["target"]["cache_bytes"] + steps["draft"]["cache_bytes"]
  return {
      "hardware": acc.name, "hardware_source": acc.source, "mesh": sharding.mesh_shape_str(mesh),
      "num_devices": mesh.size, "compile_backend": jax.default_backend(), "gamma": gamma, "alpha": alpha,
      "batch_size": batch, "max_len": max_len, "name": cfg.get("name"),
      "target_step_ms": round(t_ms["target"], 4), "draft_step_ms": round(t_ms["draft"], 4),
      "verify_step_ms": round(t_ms["verify"], 4), "c": round(c, 4), "v": round(v, 4),
      "per_device_param_bytes": int(param_bytes), "per_device_kv_cache_bytes": int(cache_bytes),
      "per_device_target_param_bytes": int(steps["target"]["param_bytes"]),
      "per_device_draft_param_bytes": int(steps["draft"]["param_bytes"]),
      "fits_hbm": bool(param_bytes + cache_bytes < acc.hbm_bytes), "hbm_bytes": acc.hbm_bytes,
      "collectives_per_target_step": int(round(steps["target"]["n_total"])),
      "collectives_per_draft_step": int(round(steps["draft"]["n_total"])),
      "collectives_per_verify_step": int(round(steps["verify"]["n_total"])),
      "predicted_speedup": round(speedup, 3),
      "predicted_ar_ms_per_token": round(t_ms["target"], 3),
      "predicted_sd_ms_per_token": round(t_ms["target"] / speedup, 3),
      "bandwidth_only_target_ms": round(steps["target"]["bandwidth_only_s"] * 1e3, 3),
      "alpha_implied_by_chen_greedy_xsum": implied_alpha(chen["speedup_greedy_xsum"], chen["gamma"], c, v),
      "paper": PAPER, "steps": steps, "layout": layout,
      "latency_model": dataclasses.asdict(lat) | {"source": acc.latency_source}, "calibration": calibration,
      "published_vs_predicted": variants,
      "collective_latency_us_to_match_paper_baseline": _latency_to_match(cfg, steps["target"], acc, lat),
      "paper_baseline_ms": (cfg.get("paper") or {}).get("baseline_ms_per_token"),
  }


def _layout(module, mesh) -> dict:
  report = sharding.layout_report(abstract_model(with_depth(module, 1), mesh), mesh)
  return {name: e["note"] for name, e in report.items()}


def calibrated_latency_model(cfg: dict, steps: dict, acc):
  """The latency model the config asks for, its calibration, and predicted-vs-published rows.

  ``cfg["latency"]`` may set ``topology``, ``hop_latency_us``, ``dispatch_us``, ``step_overhead_us``,
  ``layer_overhead_us``. With ``calibrate="draft_step_overhead"`` (the default when the config's
  ``paper`` has ``draft_ms_per_token``) the per-step overhead is fitted on the DRAFT step's
  published time and then predicts the TARGET step's published time: the target's number is
  never used to fit anything.
  """
  lc = dict(cfg.get("latency") or {})
  us = lambda key: None if lc.get(key) is None else float(lc[key]) * 1e-6
  lat = latency.LatencyModel.of(acc, topology=lc.get("topology"), hop_latency_s=us("hop_latency_us"),
                                dispatch_s=us("dispatch_us"), step_overhead_s=us("step_overhead_us"),
                                layer_overhead_s=us("layer_overhead_us"))
  paper = dict(cfg.get("paper") or {})
  draft_pub, target_pub = paper.get("draft_ms_per_token"), paper.get("baseline_ms_per_token")
  mode = cfg.get("calibrate", "draft_step_overhead" if draft_pub and steps["draft"]["compiled_depths"] else None)
  calibration = {"mode": mode, "note": lc.get("note")}
  hw = dataclasses.replace(lat, step_overhead_s=0.0, layer_overhead_s=0.0)
  t_hw = {k: step_latency(s, acc, hw)["latency_s"] for k, s in steps.items() if s["compiled_depths"]}
  variants = {"hardware only": hw}
  if mode == "draft_step_overhead":
    gap = draft_pub * 1e-3 - t_hw["draft"]
    lat = dataclasses.replace(lat, step_overhead_s=max(0.0, gap), layer_overhead_s=0.0)
    calibration.update(fitted="step_overhead_s", value_s=lat.step_overhead_s, on="draft step",
                       published_ms=draft_pub, source=paper.get("draft_source", paper.get("source")))
    variants["+ step overhead fit on draft"] = lat
    layer = dataclasses.replace(hw, layer_overhead_s=max(0.0, gap) / max(1, int(steps["draft"]["num_layers"])))
    variants["+ layer overhead fit on draft"] = layer
    torus = dataclasses.replace(hw, topology="torus")
    t_torus = step_latency(steps["draft"], acc, torus)["latency_s"]
    variants["torus + step overhead fit on draft"] = dataclasses.replace(
        torus, step_overhead_s=max(0.0, draft_pub * 1e-3 - t_torus))
  elif mode not in (None, "none"):
    raise ValueError(f"unknown calibrate={mode!r}; expected 'draft_step_overhead' or None")
  rows = []
  for step, published, role in (("target", target_pub, "prediction"), ("draft", draft_pub, "calibration")):
    if not published or step not in t_hw:
      continue
    row = {"step": step, "published_ms": published, "role": role if mode else "prediction",
           "source": paper.get("source") if step == "target" else paper.get("draft_source", paper.get("source")),
           "bandwidth_only_ms": round(steps[step]["bandwidth_only_s"] * 1e3, 3), "predicted_ms": {}}
    for name, model in variants.items():
      ms = step_latency(steps[step], acc, model)["latency_s"] * 1e3
      row["predicted_ms"][name] = {"ms": round(ms, 3), "error": round(latency.relative_error(ms, published), 3)}
    rows.append(row)
  return lat, calibration, rows


def _latency_to_match(cfg, target_step, acc, lat):
  """Per-collective cost (all in) at which the target step takes the config's published baseline."""
  baseline_ms = (cfg.get("paper") or {}).get("baseline_ms_per_token")
  n = target_step["n_total"]
  if not baseline_ms or not n:
    return None
  rest_s = target_step["body_s"] + target_step["overhead_s"]
  del acc, lat
  return round((baseline_ms * 1e-3 - rest_s) / n * 1e6, 2)


def _in_subprocess(cfg: dict, num_devices: int) -> dict:
  env = sharding.force_cpu_devices_env(num_devices)
  env["JAX_PLATFORMS"] = "cpu"  # the fake mesh lives on the host CPU
  proc = subprocess.run([sys.executable, "-m", "specjax.dryrun", "--json", "-"], input=json.dumps(cfg),
                        capture_output=True, text=True, env=env, check=False)
  lines = [l for l in proc.stdout.splitlines() if l.startswith("DRYRUN_JSON ")]
  if proc.returncode or not lines:
    raise RuntimeError(f"dry run subprocess failed (rc={proc.returncode}):\n{proc.stderr[-3000:]}")
  return json.loads(lines[-1][len("DRYRUN_JSON "):])


def _load_config(spec: str):
  import importlib.util  # pylint: disable=import-outside-toplevel
  path, _, arg = spec.partition(":")
  mod_spec = importlib.util.spec_from_file_location("_dryrun_config", path)
  mod = importlib.util.module_from_spec(mod_spec)
  mod_spec.loader.exec_module(mod)
  return mod.get_config(arg) if arg else mod.get_config()


def main(argv):
  """``python -m specjax.dryrun configs/x.py[:arg] [--out benchmarks/dryrun/NAME]`` prints the table (and
  saves NAME.md + NAME.json); ``--json -`` is the subprocess protocol."""
  if argv[:1] == ["--json"]:
    cfg = json.loads(sys.stdin.read() if argv[1] == "-" else argv[1])
    print("DRYRUN_JSON " + json.dumps(dry_run(cfg)))
    return
  out = argv[argv.index("--out") + 1] if "--out" in argv else None
  result = dry_run(_load_config(argv[0]))
  result["config"] = argv[0]
  print(format_table(result))
  if out:
    print("saved", *save_report(result, out))


if __name__ == "__main__":
  main(sys.argv[1:])
