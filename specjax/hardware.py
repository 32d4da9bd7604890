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
ISCA 2023) order of magnitude, treat it as approximate. The per-collective latency (fixed cost of
one small all-reduce: launch, synchronisation, hops) is NOT a datasheet number: 10 us is a round
assumption for small messages on ICI/NVLink. At batch 1 a decode step's collectives move a few KB,
so this latency, not bandwidth, is what the roofline charges them; a config's
``collective_latency_us`` overrides it (calibrate against a measurement).
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
  collective_latency_s: float    # assumed fixed cost per collective op
  source: str


_TABLE = {
    "tpu_v4": Accelerator("tpu_v4", 275e12, 1200e9, 32 * 2**30, 300e9, 10e-6,
                          "Google Cloud TPU v4 docs: 275 TFLOP/s bf16, 32 GiB HBM2 at 1200 GB/s; "
                          "ICI approx. per TPU v4 paper (Jouppi et al. 2023)"),
    "tpu_v5e": Accelerator("tpu_v5e", 197e12, 819e9, 16e9, 400e9, 10e-6,
                           "Google Cloud TPU v5e docs: 197 TFLOP/s bf16, 16 GB HBM2 at 819 GB/s, "
                           "400 GB/s bidirectional ICI per chip"),
    "tpu_v5p": Accelerator("tpu_v5p", 459e12, 2765e9, 95e9, 1200e9, 10e-6,
                           "Google Cloud TPU v5p docs: 459 TFLOP/s bf16, 95 GB HBM2e at 2765 GB/s, "
                           "1200 GB/s bidirectional ICI per chip"),
    "h100": Accelerator("h100", 989e12, 3.35e12, 80e9, 900e9, 10e-6,
                        "NVIDIA H100 datasheet (SXM5): 989 TFLOP/s dense bf16, 80 GB HBM3 at 3.35 TB/s, "
                        "NVLink 900 GB/s"),
    "h200": Accelerator("h200", 989e12, 4.8e12, 141e9, 900e9, 10e-6,
                        "NVIDIA H200 datasheet (SXM): 989 TFLOP/s dense bf16, 141 GB HBM3e at 4.8 TB/s, "
                        "NVLink 900 GB/s"),
}


def get(name: str) -> Accelerator:
  if name not in _TABLE:
    raise ValueError(f"unknown accelerator {name!r}; known: {sorted(_TABLE)}")
  return _TABLE[name]


def names() -> list[str]:
  return sorted(_TABLE)
