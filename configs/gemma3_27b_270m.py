"""Plan Gemma 3 27B verified by speculative decoding with Gemma 3 270M (or 1B) drafting, on 8 TPU v5e.

  python -m specjax.dryrun configs/gemma3_27b_270m.py --out benchmarks/dryrun/gemma3_27b_270m
  python -m specjax.dryrun configs/gemma3_27b_270m.py:1b --out benchmarks/dryrun/gemma3_27b_1b

Abstract shapes on a fake 8-device mesh; no weights. Architectures (the ``config.json`` of
google/gemma-3-27b-pt, -1b-pt and -270m; as recalled): 27B: 62 layers, d_model 5376, 32 query
heads and 16 KV heads of 128, GeGLU 21504, query_pre_attn_scalar 168, sliding window 1024 on five
of every six layers (RoPE theta 10k local, 1M global); 1B: 26 layers, d_model 1152, 4 heads, ONE KV
head of 256, GeGLU 6912, window 512; 270M: 18 layers, d_model 640, 4 heads, one KV head of 256,
GeGLU 2048, window 512. All: vocabulary 262144, tied embeddings, 1+w norms, sandwich norms, q/k
norms, embeddings scaled by sqrt(d_model).

Mesh 1x8 (tensor parallelism, batch 1): the 27B splits every head 8 ways (4 query heads and 2 KV
heads per chip); the drafters' 4 heads and single KV head cannot split 8 ways, so their attention
is replicated while their MLP and 262k-row embedding split (the dry run prints this).
"""
import ml_collections

from specjax.drafters import drafter_section


def _gemma3(num_layers, d_model, num_heads, num_kv_heads, head_dim, mlp_dim, window, query_pre_attn_scalar):
  windows = tuple(0 if (i + 1) % 6 == 0 else window for i in range(num_layers))
  return ml_collections.ConfigDict(dict(
      family="decoder", vocab_size=262144, d_model=d_model, num_layers=num_layers, num_heads=num_heads,
      num_kv_heads=num_kv_heads, head_dim=head_dim, mlp_dim=mlp_dim, tie_embeddings=True, dtype="bfloat16",
      rope_theta=1_000_000.0, local_rope_theta=10_000.0, layer_windows=windows, norm_offset=1.0,
      sandwich_norms=True, qk_norm=True, scale_embeddings=True, mlp_activation="gelu_tanh",
      query_pre_attn_scalar=float(query_pre_attn_scalar)))


def get_config(arg: str | None = None):
  c = ml_collections.ConfigDict()
  c.target = _gemma3(62, 5376, 32, 16, 128, 21504, 1024, 168)
  if arg in (None, "", "270m"):
    c.drafter = drafter_section("draft_model", gamma=4, model=_gemma3(18, 640, 4, 1, 256, 2048, 512, 256))
    c.name = "Gemma 3 27B / Gemma 3 270M on 8 TPU v5e"
  elif arg == "1b":
    c.drafter = drafter_section("draft_model", gamma=4, model=_gemma3(26, 1152, 4, 1, 256, 6912, 512, 256))
    c.name = "Gemma 3 27B / Gemma 3 1B on 8 TPU v5e"
  else:
    raise ValueError(f"unknown config argument {arg!r}; use '' / '270m' or '1b'")
  c.mesh = "1x8"
  c.hardware = "tpu_v5e"
  c.batch_size, c.prompt_len, c.max_new_tokens = 1, 1024, 256
  c.alpha = 0.7  # an assumption: no published alpha for this pair
  c.temperature = 0.0
  c.latency = ml_collections.ConfigDict(dict(step_overhead_us=STEP_OVERHEAD_US, note=(
      f"step overhead {STEP_OVERHEAD_US} us carried from the Chinchilla 70B config's calibration on Chen et al.'s "
      "drafter (1.8 ms on 16 TPU v4); no published latency for this pair to check against")))
  return c


STEP_OVERHEAD_US = 726  # benchmarks/dryrun/chinchilla70b_4b.json: calibration.value_s (fitted on Chen's drafter)
