"""Latency-aware step time for the dry run: collectives pay latency + bytes / bandwidth.

At batch 1 on 16 chips a decode step's all-reduces move ~16 KB each: a bandwidth-only model
charges them ~0.4 us and misses most of their real cost. Here every collective pays

  t_coll = dispatch + hops(op, n) * hop_latency + wire_bytes / link_bandwidth

* ``hops``: the serial link steps of the algorithm over ``n`` chips. ``ring`` (default, XLA's
  unidirectional ring): all-reduce ``2(n-1)`` (reduce-scatter then all-gather), all-gather /
  reduce-scatter / all-to-all ``n-1``, collective-permute 1. ``torus``: dimension-ordered
  bidirectional rings over the slice's torus dims (:func:`torus_dims`), ``2*floor(d/2)`` per dim
  for an all-reduce, twice the bandwidth.
* ``wire_bytes``: the ring volume per device (``2(n-1)/n`` x size for an all-reduce).

and the step is ``max(FLOPs / peak, bytes / HBM) + sum(t_coll) + step_overhead +
layers * layer_overhead`` (collectives serialized with compute: at batch 1 each all-reduce sits
between two matmuls). Constants and where they come from are in :mod:`specjax.hardware`; what is
calibrated on what is in :func:`calibrate_step_overhead` and the dry-run table.
"""
from __future__ import annotations

import dataclasses
import math

_BANDWIDTH_FACTOR = {"all-reduce": lambda n: 2 * (n - 1) / n, "collective-permute": lambda n: 1.0}


def torus_dims(n: int, ndim: int = 3) -> tuple[int, ...]:
  """A balanced factorisation of ``n`` chips into ``ndim`` torus dims (16 -> (4, 2, 2))."""
  dims = [1] * ndim
  for p in sorted(prime_factors(n), reverse=True):
    dims[dims.index(min(dims))] *= p
  return tuple(sorted(dims, reverse=True))


def prime_factors(n: int) -> list[int]:
  """``n``'s prime factors with repeats, ascending (16 -> 2, 2, 2, 2)."""
  out, p = [], 2
  while n > 1:
    while n % p == 0:
      out.append(p)
      n //= p
    p += 1
  return out


def hops(op: str, n: int, topology: str = "ring", torus_ndim: int = 3) -> int:
  """Serial link steps of one collective over ``n`` chips (0 for n <= 1)."""
  if n <= 1:
    return 0
  if op == "collective-permute":
    return 1
  per_dim = [n] if topology == "ring" else list(torus_dims(n, torus_ndim))
  if topology == "ring":
    steps = [d - 1 for d in per_dim]
  elif topology == "torus":
    steps = [d // 2 for d in per_dim if d > 1]  # bidirectional ring per dim: half the way each direction
  else:
    raise ValueError(f"unknown topology {topology!r}; expected 'ring' or 'torus'")
  return int(sum(steps) * (2 if op == "all-reduce" else 1))


def wire_bytes(op: str, size_bytes: float, n: int) -> float:
  if n <= 1:
    return 0.0
  return _BANDWIDTH_FACTOR.get(op, lambda n: (n - 1) / n)(n) * size_bytes


@dataclasses.dataclass(frozen=True)
class LatencyModel:
  """Fixed costs on top of the roofline; defaults from :mod:`specjax.hardware`'s accelerator."""
  hop_latency_s: float
  dispatch_s: float
  link_bandwidth: float  # bytes/s one way, one link
  topology: str = "ring"
  torus_ndim: int = 3
  step_overhead_s: float = 0.0
  layer_overhead_s: float = 0.0

  @classmethod
  def of(cls, acc, **overrides) -> "LatencyModel":
    base = dict(hop_latency_s=acc.hop_latency_s, dispatch_s=acc.collective_dispatch_s,
                link_bandwidth=acc.link_bandwidth, topology=acc.topology, torus_ndim=acc.torus_ndim)
    base.update({k: v for k, v in overrides.items() if v is not None})
    return cls(**base)

  def collective_s(self, op: str, size_bytes: float, n: int) -> float:
    if n <= 1:
      return 0.0
    bw = self.link_bandwidth * (2 if self.topology == "torus" else 1)
    return (self.dispatch_s + hops(op, n, self.topology, self.torus_ndim) * self.hop_latency_s
            + wire_bytes(op, size_bytes, n) / bw)


def collective_terms(ops, model: LatencyModel) -> dict[str, float]:
  """Sums over ``ops`` (``[(op, size_bytes, group)]``): count, hops, wire bytes and seconds.

  Every term is linear in the op list, so the dry run can extrapolate them in depth.
  """
  out = dict(coll_n=0.0, coll_hops=0.0, coll_wire_bytes=0.0, coll_s=0.0)
  for op, size, n in ops:
    if n <= 1:
      continue
    out["coll_n"] += 1
    out["coll_hops"] += hops(op, n, model.topology, model.torus_ndim)
    out["coll_wire_bytes"] += wire_bytes(op, size, n)
    out["coll_s"] += model.collective_s(op, size, n)
  return out


def step_breakdown(flops: float, memory_bytes: float, coll_s: float, num_layers: int, acc,
                   model: LatencyModel) -> dict[str, float]:
  """Seconds per term and in total (the roofline table's columns)."""
  compute, memory = flops / acc.peak_flops, memory_bytes / acc.hbm_bandwidth
  fixed = model.step_overhead_s + num_layers * model.layer_overhead_s
  return dict(compute_s=compute, memory_s=memory, body_s=max(compute, memory), collective_s=coll_s,
              overhead_s=fixed, latency_s=max(compute, memory) + coll_s + fixed)


def relative_error(predicted: float, published: float) -> float:
  return (predicted - published) / published if published else math.nan


def collective_seconds(terms: dict, model: LatencyModel, prefix: str = "") -> float:
  """``dispatch * n + hop_latency * hops + wire / bandwidth`` from (extrapolated) summed terms."""
  bw = model.link_bandwidth * (2 if model.topology == "torus" else 1)
  return (terms[prefix + "coll_n"] * model.dispatch_s + terms[prefix + "coll_hops"] * model.hop_latency_s
          + terms[prefix + "coll_wire_bytes"] / bw)
