"""Leviathan et al. 2022's EnDe setting: T5 v1.1 XXL target, T5 v1.1 small drafter, gamma 7, greedy.

  python -m specjax.run --config=configs/t5xxl_small.py:cpu          # the trained CPU-sized EnDe pair
  python -m specjax.run --config=configs/t5xxl_small.py:cpu --config.drafter.checkpoint=t5_ende/drafter_large
  python -m specjax.run --config=configs/t5xxl_small.py --dry_run    # plan the real sizes, no weights

``:cpu`` runs the pair trained here by ``python -m specjax.train t5_ende`` (``specjax/assets/t5_ende``: an
8.1M-parameter T5 v1.1 target and the 62K "small" drafter, about 1/130 of it; ``drafter_base`` and
``drafter_large`` are the 1/47 and 1/16 ones) on held-out English -> German catalogue strings
(``t5_ende/prompts.txt``, never seen in training), decoded one prompt at a time (batch 1 via
refill); prompts and translations print as text through the shipped SentencePiece model.

Architecture of the paper-size config (T5 v1.1 release configs, Raffel et al. 2020 + the t5.1.1
checkpoints):
* T5-XXL v1.1 (11B): d_model 4096, d_ff 10240 (gated-GELU), d_kv 64, 64 heads, 24 + 24 layers,
  vocab 32128, untied LM head.
* T5-small v1.1 (77M): d_model 512, d_ff 1024, d_kv 64, 6 heads, 8 + 8 layers, vocab 32128.
Leviathan et al. (arXiv 2211.17192, Table 2): EnDe, temperature 0, gamma 7, alpha 0.75, 3.4X over
T5X on one TPU-v4.

Real checkpoints on a TPU VM: download the HF folders (``config.json``, ``model.safetensors`` or
``pytorch_model.bin`` converted to safetensors, ``tokenizer.json`` / ``spiece.model`` as
``tokenizer.model``) of ``google/t5-v1_1-xxl`` and ``google/t5-v1_1-small`` (or T5-base/large as
drafters), then point the config at them; ``specjax.load_pretrained`` imports T5 v1.1 folders
(``specjax.hf_import``) with their tokenizer, and the shapes above come from the folders:

  python -m specjax.run --config=configs/t5xxl_small.py \
      --config.target.checkpoint=/data/t5-v1_1-xxl --config.drafter.checkpoint=/data/t5-v1_1-small \
      --config.mesh=1x1 --config.prompt="translate English to German: The house is wonderful."

(``--dry_run`` keeps planning from the size fields alone, with no weights.)
"""
import ml_collections

from specjax.drafters import drafter_section
from specjax.models.store import ASSETS


def _t5(**kw):
  return ml_collections.ConfigDict(dict(family="t5", relative_attention_num_buckets=32,
                                        relative_attention_max_distance=128, **kw))


def get_config(arg: str | None = None):
  c = ml_collections.ConfigDict()
  if arg in (None, "", "tpu"):
    c.target = _t5(vocab_size=32128, d_model=4096, num_encoder_layers=24, num_decoder_layers=24, num_heads=64,
                   head_dim=64, mlp_dim=10240, dtype="bfloat16", checkpoint="")
    c.drafter = drafter_section("draft_model", gamma=7, model=_t5(
        vocab_size=32128, d_model=512, num_encoder_layers=8, num_decoder_layers=8, num_heads=6, head_dim=64,
        mlp_dim=1024, dtype="bfloat16"))
    c.mesh = "1x1"  # one TPU-v4 chip, as in the paper
    c.batch_size, c.prompt_len, c.max_new_tokens = 1, 128, 128
  elif arg == "cpu":  # the EnDe pair trained here (python -m specjax.train t5_ende), real held-out prompts
    c.target = _t5(checkpoint="t5_ende/target")
    c.drafter = drafter_section("draft_model", checkpoint="t5_ende/drafter_small", gamma=7)
    c.mesh = ""
    c.prompts_file = str(ASSETS / "t5_ende" / "prompts.txt")
    c.batch_size, c.refill, c.prompt_len, c.max_new_tokens = 1, True, 64, 48
  else:
    raise ValueError(f"unknown config argument {arg!r}; use '' (paper sizes) or 'cpu'")
  c.temperature, c.top_k, c.top_p, c.lenience = 0.0, 0, 1.0, 1.0
  c.eos_id = -1
  c.seed = 0
  c.repeats = 2
  c.distributed = False
  c.max_len, c.output = 0, ""  # cache slots (0: what the run needs); a .jsonl file of the outputs
  c.hardware = "tpu_v4"
  c.alpha = 0.75
  c.paper = ml_collections.ConfigDict({
      "source": "Leviathan et al. 2022, arXiv 2211.17192, Table 2 (T5-XXL / T5-small, EnDe, temp 0)",
      "speedup": 3.4, "alpha": 0.75, "gamma": 7})
  return c
