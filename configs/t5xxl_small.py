"""Leviathan et al. 2022's EnDe setting: T5-XXL (11B) target, T5-small drafter, gamma 7, greedy.

  python -m specjax.run --config=configs/t5xxl_small.py              # FLAN-T5 XXL + small from the hub
  python -m specjax.run --config=configs/t5xxl_small.py --dry_run    # plan the real sizes, no weights
  python -m specjax.run --config=configs/t5xxl_small.py:cpu          # the trained CPU-sized EnDe pair
  python -m specjax.run --config=configs/t5xxl_small.py:cpu --config.drafter.checkpoint=t5_ende/drafter_large

The paper-size config names real checkpoints by Hugging Face hub id, ``google/flan-t5-xxl`` (target)
and ``google/flan-t5-small`` (drafter): on a machine with hub access (a TPU VM) the command downloads
them into huggingface_hub's cache (``HF_HUB_CACHE``, else ``HF_HOME/hub``; the XXL's float32
shards take tens of GB) and runs them; later runs read the cache in place. Why FLAN-T5 and not the original
``google-t5/t5-11b`` / ``google-t5/t5-small``: the paper's models are T5 v1.1 (gated-GELU, untied
head) fine-tuned on WMT EnDe, checkpoints that were never released; FLAN-T5 is that architecture at
the same sizes (XXL 11B, small 77M) with WMT EnDe in its fine-tuning mixture, so it translates
with the same ``translate English to German:`` prefix, and both repos ship safetensors weights and
a ``tokenizer.json`` (what specjax reads). T5 v1.1 itself (``google/t5-v1_1-*``) is pre-trained on
C4 only and does not translate. The original T5 (``google-t5/t5-11b`` / ``google-t5/t5-small``,
trained with WMT EnDe in its mixture; ReLU feed-forward, head tied to the embedding) is imported too:
pass its folders or ids as ``--config.target.checkpoint`` / ``--config.drafter.checkpoint`` (the
dry run still plans the FLAN-T5 sizes below, which the original's differ from).

Without hub access (``HF_HUB_OFFLINE=1``, or no route to the hub) and with the ids not in the
cache, the command stops before anything loads, with one ``error:`` line naming the ids and the
ways on: download elsewhere (``hf download google/flan-t5-xxl``) and copy the cache here, pass HF
folders (``config.json``, ``*.safetensors``, ``tokenizer.json``), or plan with ``--dry_run``:

  python -m specjax.run --config=configs/t5xxl_small.py \
      --config.target.checkpoint=/data/flan-t5-xxl --config.drafter.checkpoint=/data/flan-t5-small

The run translates one held-out sentence at batch 1 on one chip, as the paper measures; the held-out
catalogue strings run one after another with
``--config.prompts_file=specjax/assets/t5_ende/prompts.txt --config.mesh=`` (refill at batch 1).

Architecture of the paper-size fields (the FLAN-T5 / T5 v1.1 release configs; the dry run plans
from them, a real run reads the checkpoints' own):
* T5-XXL v1.1 (11B): d_model 4096, d_ff 10240 (gated-GELU), d_kv 64, 64 heads, 24 + 24 layers,
  vocab 32128, untied LM head.
* T5-small v1.1 (77M): d_model 512, d_ff 1024, d_kv 64, 6 heads, 8 + 8 layers, vocab 32128.
Leviathan et al. (arXiv 2211.17192, Table 2): EnDe, temperature 0, gamma 7, alpha 0.75, 3.4X over
T5X on one TPU-v4.

``:cpu`` runs the pair trained here by ``python -m specjax.train t5_ende`` (``specjax/assets/t5_ende``: an
8.1M-parameter T5 v1.1 target and the 62K "small" drafter, about 1/130 of it; ``drafter_base`` and
``drafter_large`` are the 1/47 and 1/16 ones) on held-out English -> German catalogue strings
(``t5_ende/prompts.txt``, never seen in training), decoded one prompt at a time (batch 1 via
refill); prompts and translations print as text through the shipped SentencePiece model.
"""
import ml_collections

from specjax.drafters import drafter_section
from specjax.models.store import ASSETS

# checkpoints that translate EnDe at the paper's sizes (the docstring says why these)
TARGET_ID, DRAFTER_ID = "google/flan-t5-xxl", "google/flan-t5-small"


def _t5(**kw):
  return ml_collections.ConfigDict(dict(family="t5", relative_attention_num_buckets=32,
                                        relative_attention_max_distance=128, **kw))


def get_config(arg: str | None = None):
  c = ml_collections.ConfigDict()
  if arg in (None, "", "tpu"):
    c.target = _t5(vocab_size=32128, d_model=4096, num_encoder_layers=24, num_decoder_layers=24, num_heads=64,
                   head_dim=64, mlp_dim=10240, dtype="bfloat16", checkpoint=TARGET_ID)
    c.drafter = drafter_section("draft_model", checkpoint=DRAFTER_ID, gamma=7, model=_t5(
        vocab_size=32128, d_model=512, num_encoder_layers=8, num_decoder_layers=8, num_heads=6, head_dim=64,
        mlp_dim=1024, dtype="bfloat16"))
    c.mesh = "1x1"  # one TPU-v4 chip, as in the paper
    c.batch_size, c.prompt_len, c.max_new_tokens = 1, 128, 128
    c.prompt, c.prompts_file = "translate English to German: The house is wonderful.", ""
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
