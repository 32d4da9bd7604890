"""T5 v1.1 importer (gated-GELU, no biases) -> :class:`specjax.models.t5.T5`."""
from __future__ import annotations

from specjax.hf_import.common import build, first_id, get, placed_params, reject
from specjax.hf_import.weights import Weights, read_json


def _check_t5_features(cfg, path):
  ff = cfg.get("feed_forward_proj", "relu")
  if ff != "gated-gelu":
    reject(path, f"feed_forward_proj={ff!r} (specjax's T5 is v1.1: gated-gelu)")
  if cfg.get("dense_act_fn", "gelu_new") not in ("gelu_new", "gelu_pytorch_tanh"):
    reject(path, f"dense_act_fn={cfg['dense_act_fn']!r} (specjax's T5 uses tanh-approximate GELU)")


def _t5_attn(w, flat, dst, src, e, h, d, buckets=None):
  for n in "qkv":
    flat[f"{dst}/{n}"] = w.take(f"{src}.{n}.weight", (h * d, e)).T.reshape(e, h, d)
  flat[f"{dst}/o"] = w.take(f"{src}.o.weight", (e, h * d)).T.reshape(h, d, e)
  if buckets is not None:  # the bias table lives in layer 0's self-attention only
    flat[f"{dst}/rel_bias"] = w.take(f"{src}.relative_attention_bias.weight", (buckets, h))


def _t5_stack(w, flat, stack, layers, e, h, d, f, buckets):
  for i in range(layers):
    dst, src = f"{stack}/layers_{i}", f"{stack}.block.{i}.layer"
    _t5_attn(w, flat, f"{dst}/self_attn", f"{src}.0.SelfAttention", e, h, d, buckets if i == 0 else None)
    flat[f"{dst}/self_attn_norm/scale"] = w.take(f"{src}.0.layer_norm.weight", (e,))
    if stack == "decoder":
      _t5_attn(w, flat, f"{dst}/cross_attn", f"{src}.1.EncDecAttention", e, h, d)
      flat[f"{dst}/cross_attn_norm/scale"] = w.take(f"{src}.1.layer_norm.weight", (e,))
    ff = f"{src}.{2 if stack == 'decoder' else 1}"
    flat[f"{dst}/mlp/gate"] = w.take(f"{ff}.DenseReluDense.wi_0.weight", (f, e)).T
    flat[f"{dst}/mlp/up"] = w.take(f"{ff}.DenseReluDense.wi_1.weight", (f, e)).T
    flat[f"{dst}/mlp/down"] = w.take(f"{ff}.DenseReluDense.wo.weight", (e, f)).T
    flat[f"{dst}/mlp_norm/scale"] = w.take(f"{ff}.layer_norm.weight", (e,))
  flat[f"{stack}/final_norm/scale"] = w.take(f"{stack}.final_layer_norm.weight", (e,))


def _t5_ignored(name):
  # aliases of shared.weight, and a cross-attention bias HF itself never uses
  return name in ("encoder.embed_tokens.weight", "decoder.embed_tokens.weight",
                  "decoder.block.0.layer.1.EncDecAttention.relative_attention_bias.weight")


def t5(path, source, cfg, w: Weights, overrides):
  from specjax.models.t5 import T5, T5Config  # pylint: disable=import-outside-toplevel
  _check_t5_features(cfg, path)
  folder = path.parent
  gen = read_json(folder / "generation_config.json") if (folder / "generation_config.json").is_file() else {}
  v, e = get(cfg, "vocab_size", path, required=True), get(cfg, "d_model", path, required=True)
  h, d = get(cfg, "num_heads", path, required=True), get(cfg, "d_kv", path, required=True)
  f, enc_layers = get(cfg, "d_ff", path, required=True), get(cfg, "num_layers", path, required=True)
  dec_layers = get(cfg, "num_decoder_layers", path, enc_layers)
  buckets = get(cfg, "relative_attention_num_buckets", path, 32)
  shared = next((n for n in ("shared.weight", "encoder.embed_tokens.weight", "decoder.embed_tokens.weight")
                 if n in w), "shared.weight")
  pad = first_id(get(cfg, "pad_token_id", path, 0))
  start = get(gen, "decoder_start_token_id", path, get(cfg, "decoder_start_token_id", path, pad))
  fields = dict(vocab_size=v, d_model=e, num_encoder_layers=enc_layers, num_decoder_layers=dec_layers,
                num_heads=h, head_dim=d, mlp_dim=f, relative_attention_num_buckets=buckets,
                relative_attention_max_distance=get(cfg, "relative_attention_max_distance", path, 128),
                norm_eps=float(get(cfg, "layer_norm_epsilon", path, 1e-6)), decoder_start_id=first_id(start),
                pad_id=pad, eos_id=first_id(get(cfg, "eos_token_id", path, 1)))
  flat = placed_params(path, T5, T5Config, fields, overrides, w.mesh)
  flat["embed"] = w.take(shared, (v, e))
  _t5_stack(w, flat, "encoder", enc_layers, e, h, d, f, buckets)
  _t5_stack(w, flat, "decoder", dec_layers, e, h, d, f, buckets)
  # a tied head is the shared embedding read once more (on the host, not back from the device)
  head_VxE = w.take("lm_head.weight" if "lm_head.weight" in w else shared, (v, e))
  # transformers 4: a tied head also rescales the decoder output by d_model**-0.5; 5 names that
  # scale_decoder_outputs. specjax's T5 has no rescale, so it is folded into lm_head (exact).
  scale = cfg.get("scale_decoder_outputs", cfg.get("tie_word_embeddings", True))
  flat["lm_head"] = head_VxE.T * (e ** -0.5 if scale else 1.0)
  w.finish(source, ignored=_t5_ignored)
  return build(path, T5, T5Config, fields, overrides, flat, source=source, mesh=w.mesh)
