"""Leviathan et al. 2022's EnDe setting: T5 v1.1 XXL target, T5 v1.1 small drafter, gamma 7, greedy.

  python -m specjax.run --config=configs/t5xxl_small.py:cpu          # the CPU-sized twin (random weights)
  python -m specjax.run --config=configs/t5xxl_small.py --dry_run    # plan the real sizes, no weights

Architecture (T5 v1.1 release configs, Raffel et al. 2020 + the t5.1.1 checkpoints):
* T5-XXL v1.1 (11B): d_model 4096, d_ff 10240 (gated-GELU), d_kv 64, 64 heads, 24 + 24 layers,
  vocab 32128, untied LM head.
* T5-small v1.1 (77M): d_model 512, d_ff 1024, d_kv 64, 6 heads, 8 + 8 layers, vocab 32128.
Leviathan et al. (arXiv 2211.17192, Table 2): EnDe, temperature 0, gamma 7, alpha 0.75, 3.4X over
T5X on one TPU-v4. With real checkpoints, import them with specjax.hf_import.from_hf and set
``target.checkpoint`` / ``drafter.checkpoint`` to their folders.
"""
import ml_collections


def _t5(**kw):
  return ml_collections.ConfigDict(dict(family="t5", relative_attention_num_buckets=32,
                                        relative_attention_max_distance=128, **kw))


def get_config(arg: str | None = None):
  c = ml_collections.ConfigDict()
  if arg in (None, "", "tpu"):
    c.target = _t5(vocab_size=32128, d_model=4096, num_encoder_layers=24, num_decoder_layers=24, num_heads=64,
                   head_dim=64, mlp_dim=10240, dtype="bfloat16")
    c.drafter = _t5(vocab_size=32128, d_model=512, num_encoder_layers=8, num_decoder_layers=8, num_heads=6,
                    head_dim=64, mlp_dim=1024, dtype="bfloat16")
    c.mesh = "1x1"  # one TPU-v4 chip, as in the paper
    c.batch_size, c.prompt_len, c.max_new_tokens = 1, 128, 128
  elif arg == "cpu":  # same depth ratio 3:1 and width ratio 8:1, CPU-sized, random weights
    c.target = _t5(vocab_size=512, d_model=256, num_encoder_layers=6, num_decoder_layers=6, num_heads=8,
                   head_dim=32, mlp_dim=640)
    c.drafter = _t5(vocab_size=512, d_model=32, num_encoder_layers=2, num_decoder_layers=2, num_heads=2,
                    head_dim=16, mlp_dim=64)
    c.mesh = ""
    c.batch_size, c.prompt_len, c.max_new_tokens = 1, 32, 48
  else:
    raise ValueError(f"unknown config argument {arg!r}; use '' (paper sizes) or 'cpu'")
  c.drafter_kind = "draft_model"
  c.ngram_n = 3
  c.gamma = 7
  c.temperature, c.top_k, c.top_p, c.lenience = 0.0, 0, 1.0, 1.0
  c.eos_id = -1
  c.seed = 0
  c.repeats = 2
  c.distributed = False
  c.hardware = "tpu_v4"
  c.alpha = 0.75
  c.paper = ml_collections.ConfigDict({
      "source": "Leviathan et al. 2022, arXiv 2211.17192, Table 2 (T5-XXL / T5-small, EnDe, temp 0)",
      "speedup": 3.4, "alpha": 0.75, "gamma": 7})
  return c
