"""Plan a current GQA pair on a TPU slice: Llama-3-70B verified, Llama-3-8B (or a wide, shallow 4B) drafting.

  python -m specjax.dryrun configs/llama3_70b_8b.py --out benchmarks/dryrun/llama3_70b_8b
  python -m specjax.dryrun configs/llama3_70b_8b.py:wide --out benchmarks/dryrun/llama3_70b_wide

Abstract shapes on a fake 16-device mesh; no weights. Architectures (Meta's Llama 3 model card /
``config.json`` of Meta-Llama-3-70B and -8B): 70B: 80 layers, d_model 8192, 64 query heads and 8 KV
heads of 128, SwiGLU 28672, vocab 128256, RoPE theta 500000; 8B: 32 layers, d_model 4096, 32 heads,
8 KV heads, SwiGLU 14336. Both untied.

Mesh 1x16 (pure tensor parallelism at batch 1, 16 TPU v5e chips, 16 GB each): the 8 KV heads do not
fill the 16-way model axis, so the K/V projections and KV caches are replicated on it (each chip
keeps all 8 KV heads and uses the one its 4 query heads need), while query heads, MLP and vocabulary
split 16 ways (specjax/sharding.py). ``:wide`` swaps the drafter for a Chen-style wide, shallow one
(8 layers, d_model 6144, 48 heads, 8 KV heads, SwiGLU 16384: ~4.5B with the 128k vocabulary), which
pays 16 all-reduces per draft step against the 8B's 64.

alpha 0.75 is an assumption (no published alpha for this pair at this setting); the dry run
prints the speedup the walltime formula gives at that alpha.
"""
import ml_collections

from specjax.drafters import drafter_section


def _decoder(**kw):
  return ml_collections.ConfigDict(dict(family="decoder", tie_embeddings=False, dtype="bfloat16",
                                        vocab_size=128256, head_dim=128, rope_theta=500000.0, **kw))


def get_config(arg: str | None = None):
  c = ml_collections.ConfigDict()
  c.name = "Llama-3-70B / " + ("wide-shallow 4.5B" if arg == "wide" else "Llama-3-8B") + " on 16 TPU v5e"
  c.target = _decoder(d_model=8192, num_layers=80, num_heads=64, num_kv_heads=8, mlp_dim=28672)
  if arg in (None, "", "8b"):
    c.drafter = drafter_section("draft_model", gamma=4, model=_decoder(
        d_model=4096, num_layers=32, num_heads=32, num_kv_heads=8, mlp_dim=14336))
  elif arg == "wide":
    c.drafter = drafter_section("draft_model", gamma=4, model=_decoder(
        d_model=6144, num_layers=8, num_heads=48, num_kv_heads=8, mlp_dim=16384))
  else:
    raise ValueError(f"unknown config argument {arg!r}; use '' / '8b' or 'wide'")
  c.mesh = "1x16"
  c.hardware = "tpu_v5e"
  c.batch_size, c.prompt_len, c.max_new_tokens = 1, 1024, 256
  c.alpha = 0.75
  c.temperature = 0.0
  # per-step overhead carried from the Chinchilla calibration (Chen et al.'s drafter, 16 TPU v4):
  # an assumption for this stack; set to 0 for the hardware-only prediction
  c.latency = ml_collections.ConfigDict(dict(step_overhead_us=STEP_OVERHEAD_US, note=(
      f"step overhead {STEP_OVERHEAD_US} us carried from the Chinchilla 70B config's calibration on Chen et al.'s "
      "drafter (1.8 ms on 16 TPU v4); no published latency for this pair to check against")))
  return c


STEP_OVERHEAD_US = 726  # benchmarks/dryrun/chinchilla70b_4b.json: calibration.value_s (fitted on Chen's drafter)
