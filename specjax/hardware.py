"""Per-chip accelerator numbers for the dry run's roofline (specjax.dryrun).

=======  ============  ========  ==============  ==========  =================================================
name     bf16 TFLOP/s  HBM GB/s  link GB/s/chip  coll. lat.  source
=======  ============  ========  ==============  ==========  =================================================
tpu_v4   275           1200      300 (6 x 50)    10 us       Google Cloud "TPU v4" system-architecture page
tpu_v5e  197           819       400 (bidir.)    10 us       Google Cloud "TPU v5e" system-architecture page
tpu_v5p  459           2765      1200 (bidir.)   10 us       Google Cloud "TPU v5p" system-architecture page
h100     989           3350      900 (NVLink)    10 us       NVIDIA H100 Tensor Core GPU datasheet (SXM5)
h200     989           4800      900 (NVLink)    10 us       NVIDIA H200 Tensor Core GPU datasheet (SXM)
=======  ============  ========  ==============  ==========  =================================================

Caveats. FLOP/s are dense bf16 (NVIDIA's headline figures with sparsity are twice these). TPU v4's
Cloud page gives no per-chip ICI figure; 6 links x 50 GB/s is the TPU v4 paper's (Jouppi et al.,
ISCA 2023) order of magnitude, treat it as approximate.

Collective latency (:mod:`specjax.latency`): each collective pays ``dispatch + hops x hop_latency
+ wire bytes / link bandwidth``.

=======  ===============  ===========  ========  ========  =========================================
name     link GB/s 1-way  hop latency  dispatch  topology  source
=======  ===============  ===========  ========  ========  =========================================
tpu_v4   45               1 us         5 us      ring      [SB] tab. "ICI BW/link" (v4p 4.5e10 one-way)
tpu_v5e  45               1 us         5 us      ring      [SB] (v5e 4.5e10 one-way), 2-D torus
tpu_v5p  90               1 us         5 us      ring      [SB] (v5p 9e10 one-way)
h100     450              0.5 us       5 us      ring      NVLink 4: 900 GB/s bidirectional per GPU
h200     450              0.5 us       5 us      ring      as h100 (NVLink 4)
=======  ===============  ===========  ========  ========  =========================================

[SB] = Austin et al., "How to Scale Your Model" (Google DeepMind, 2025; jax-ml.github.io/scaling-book),
read from its source (jax-ml/scaling-book, commit of 2025-02-18): tpus.md's interconnect table;
sharding.md: "Each hop over an ICI link has some intrinsic overhead regardless of the data volume.
This is typically around 1us", and a profiled small all-gather over 3 hops (v5e) that theory puts at
~3 us: "In practice, it's closer to 8us". The 5 us dispatch is that measurement minus its 3 hops,
carried to every TPU generation (an assumption: no per-generation figure is published there).
GPU hop latency and dispatch are NOT from a datasheet: round figures that make an 8-GPU small
all-reduce ~12 us, the order nccl-tests report on NVLink systems (as recalled, approximate).
``topology="ring"`` charges XLA's unidirectional ring (2(n-1) hops per all-reduce); ``"torus"``
(bidirectional rings per torus dim, torus_ndim dims) is the optimistic alternative the dry run
also reports. The old fixed ``collective_latency_s`` (10 us, a round assumption) is kept for the
"per-collective cost the published baseline implies" diagnostic only.
"""
from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class Accelerator:
  name: str
  peak_flops: float           # dense bf16 FLOP/s per chip
  hbm_bandwidth: float        # bytes/s per chip
  hbm_bytes: float            # capacity per chip
  interconnect_bandwidth: float  # bytes/s per chip (ICI or NVLink)
  collective_latency_s: float    # assumed fixed cost per collective op (legacy, diagnostic only)
  source: str
  link_bandwidth: float = 45e9        # bytes/s, one link, one direction
  hop_latency_s: float = 1e-6         # per serial link step of a collective
  collective_dispatch_s: float = 5e-6  # fixed cost per collective (launch, synchronisation)
  topology: str = "ring"              # see specjax.latency.hops
  torus_ndim: int = 3
  latency_source: str = ("Austin et al. 2025, 'How to Scale Your Model' (scaling-book): ~1 us per ICI hop; "
                         "a profiled 3-hop all-gather ~8 us -> 5 us dispatch")


_TABLE = {
    "tpu_v4": Accelerator("tpu_v4", 275e12, 1200e9, 32 * 2**30, 300e9, 10e-6,
                          "Google Cloud TPU v4 docs: 275 TFLOP/s bf16, 32 GiB HBM2 at 1200 GB/s; "
                          "ICI approx. per TPU v4 paper (Jouppi et al. 2023)", link_bandwidth=45e9),
    "tpu_v5e": Accelerator("tpu_v5e", 197e12, 819e9, 16e9, 400e9, 10e-6,
                           "Google Cloud TPU v5e docs: 197 TFLOP/s bf16, 16 GB HBM2 at 819 GB/s, "
                           "400 GB/s bidirectional ICI per chip", link_bandwidth=45e9, torus_ndim=2),
    "tpu_v5p": Accelerator("tpu_v5p", 459e12, 2765e9, 95e9, 1200e9, 10e-6,
                           "Google Cloud TPU v5p docs: 459 TFLOP/s bf16, 95 GB HBM2e at 2765 GB/s, "
                           "1200 GB/s bidirectional ICI per chip", link_bandwidth=90e9),
    "h100": Accelerator("h100", 989e12, 3.35e12, 80e9, 900e9, 10e-6,
                        "NVIDIA H100 datasheet (SXM5): 989 TFLOP/s dense bf16, 80 GB HBM3 at 3.35 TB/s, "
                        "NVLink 900 GB/s", link_bandwidth=450e9, hop_latency_s=0.5e-6, torus_ndim=1,
                        latency_source="round figures (0.5 us/step, 5 us dispatch): an 8-GPU small all-reduce "
                                       "~12 us, the order nccl-tests report on NVLink (as recalled)"),
    "h200": Accelerator("h200", 989e12, 4.8e12, 141e9, 900e9, 10e-6,
                        "NVIDIA H200 datasheet (SXM): 989 TFLOP/s dense bf16, 141 GB HBM3e at 4.8 TB/s, "
                        "NVLink 900 GB/s", link_bandwidth=450e9, hop_latency_s=0.5e-6, torus_ndim=1,
                        latency_source="round figures (0.5 us/step, 5 us dispatch): an 8-GPU small all-reduce "
                                       "~12 us, the order nccl-tests report on NVLink (as recalled)"),
}


def get(name: str) -> Accelerator:
  if name not in _TABLE:
    raise ValueError(f"unknown accelerator {name!r}; known: {sorted(_TABLE)}")
  return _TABLE[name]


def names() -> list[str]:
  return sorted(_TABLE)
