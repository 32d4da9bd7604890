"""T5 importer -> :class:`specjax.models.t5.T5`: T5 v1.1 / FLAN-T5 (gated-GELU, own ``lm_head``) and
the original T5 (ReLU, head tied to the embedding with the ``d_model**-0.5`` rescale), read from
what transformers' ``T5Config`` says: ``feed_forward_proj`` (``[gated-]ACT``, hence ``is_gated_act``
and ``dense_act_fn``), ``tie_word_embeddings`` and, as transformers 5 writes it,
``scale_decoder_outputs``."""
from __future__ import annotations

from specjax.hf_import.common import build, first_id, get, placed_params, reject
from specjax.hf_import.weights import Weights, read_json


# HF dense_act_fn -> T5Config.mlp_activation; transformers maps feed_forward_proj "gated-gelu" to gelu_new
_ACTIVATIONS = {"relu": "relu", "gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh"}


def _mlp_fields(cfg, path) -> dict:
  """``gated_mlp`` and ``mlp_activation`` as transformers' T5Config derives them from feed_forward_proj."""
  ff = str(get(cfg, "feed_forward_proj", path, "relu"))
  parts = ff.split("-")
  if len(parts) > 2 or (len(parts) == 2 and parts[0] != "gated"):
    reject(path, f"feed_forward_proj={ff!r} (transformers reads 'ACT' or 'gated-ACT')")
  gated = parts[0] == "gated"
  act = "gelu_new" if ff == "gated-gelu" else parts[-1]
  stored = cfg.get("dense_act_fn")  # written by transformers from feed_forward_proj: the two agree
  if stored is not None and _ACTIVATIONS.get(stored, stored) != _ACTIVATIONS.get(act, act):
    reject(path, f"dense_act_fn={stored!r} with feed_forward_proj={ff!r}")
  if "is_gated_act" in cfg and bool(cfg["is_gated_act"]) != gated:
    reject(path, f"is_gated_act={cfg['is_gated_act']!r} with feed_forward_proj={ff!r}")
  if act not in _ACTIVATIONS:
    reject(path, f"feed_forward_proj={ff!r} (activation {act!r}; specjax's T5 reads "
                 f"{', '.join(sorted(set(_ACTIVATIONS) - {'gelu_pytorch_tanh'}))}, gated or not)")
  return dict(gated_mlp=gated, mlp_activation=_ACTIVATIONS[act])


def _t5_attn(w, flat, dst, src, e, h, d, buckets=None):
  for n in "qkv":
    flat[f"{dst}/{n}"] = w.take(f"{src}.{n}.weight", (h * d, e)).T.reshape(e, h, d)
  flat[f"{dst}/o"] = w.take(f"{src}.o.weight", (e, h * d)).T.reshape(h, d, e)
  if buckets is not None:  # the bias table lives in layer 0's self-attention only
    flat[f"{dst}/rel_bias"] = w.take(f"{src}.relative_attention_bias.weight", (buckets, h))


def _t5_stack(w, flat, stack, layers, e, h, d, f, buckets, gated):
  for i in range(layers):
    dst, src = f"{stack}/layers_{i}", f"{stack}.block.{i}.layer"
    _t5_attn(w, flat, f"{dst}/self_attn", f"{src}.0.SelfAttention", e, h, d, buckets if i == 0 else None)
    flat[f"{dst}/self_attn_norm/scale"] = w.take(f"{src}.0.layer_norm.weight", (e,))
    if stack == "decoder":
      _t5_attn(w, flat, f"{dst}/cross_attn", f"{src}.1.EncDecAttention", e, h, d)
      flat[f"{dst}/cross_attn_norm/scale"] = w.take(f"{src}.1.layer_norm.weight", (e,))
    ff = f"{src}.{2 if stack == 'decoder' else 1}"
    if gated:
      flat[f"{dst}/mlp/gate"] = w.take(f"{ff}.DenseReluDense.wi_0.weight", (f, e)).T
      flat[f"{dst}/mlp/up"] = w.take(f"{ff}.DenseReluDense.wi_1.weight", (f, e)).T
    else:
      flat[f"{dst}/mlp/up"] = w.take(f"{ff}.DenseReluDense.wi.weight", (f, e)).T
    flat[f"{dst}/mlp/down"] = w.take(f"{ff}.DenseReluDense.wo.weight", (e, f)).T
    flat[f"{dst}/mlp_norm/scale"] = w.take(f"{ff}.layer_norm.weight", (e,))
  flat[f"{stack}/final_norm/scale"] = w.take(f"{stack}.final_layer_norm.weight", (e,))


def _t5_ignored(name):
  # aliases of shared.weight, and a cross-attention bias HF itself never uses
  return name in ("encoder.embed_tokens.weight", "decoder.embed_tokens.weight",
                  "decoder.block.0.layer.1.EncDecAttention.relative_attention_bias.weight")


def t5(path, source, cfg, w: Weights, overrides):
  from specjax.models.t5 import T5, T5Config  # pylint: disable=import-outside-toplevel
  mlp = _mlp_fields(cfg, path)
  folder = path.parent
  gen = read_json(folder / "generation_config.json") if (folder / "generation_config.json").is_file() else {}
  v, e = get(cfg, "vocab_size", path, required=True), get(cfg, "d_model", path, required=True)
  h, d = get(cfg, "num_heads", path, required=True), get(cfg, "d_kv", path, required=True)
  f, enc_layers = get(cfg, "d_ff", path, required=True), get(cfg, "num_layers", path, required=True)
  dec_layers = get(cfg, "num_decoder_layers", path, enc_layers)
  buckets = get(cfg, "relative_attention_num_buckets", path, 32)
  shared = next((n for n in ("shared.weight", "encoder.embed_tokens.weight", "decoder.embed_tokens.weight")
                 if n in w), "shared.weight")
  # transformers 4: a tied head (tie_word_embeddings, default true) rescales the decoder output by
  # d_model**-0.5; 5 writes that as scale_decoder_outputs. A checkpoint without lm_head.weight reads
  # the embedding (tied); one with it keeps its own head, rescaled or not as the config says.
  scale = bool(get(cfg, "scale_decoder_outputs", path, get(cfg, "tie_word_embeddings", path, True)))
  pad = first_id(get(cfg, "pad_token_id", path, 0))
  start = get(gen, "decoder_start_token_id", path, get(cfg, "decoder_start_token_id", path, pad))
  fields = dict(vocab_size=v, d_model=e, num_encoder_layers=enc_layers, num_decoder_layers=dec_layers,
                num_heads=h, head_dim=d, mlp_dim=f, relative_attention_num_buckets=buckets,
                relative_attention_max_distance=get(cfg, "relative_attention_max_distance", path, 128),
                norm_eps=float(get(cfg, "layer_norm_epsilon", path, 1e-6)), decoder_start_id=first_id(start),
                pad_id=pad, eos_id=first_id(get(cfg, "eos_token_id", path, 1)), **mlp,
                tie_embeddings="lm_head.weight" not in w, scale_decoder_output=scale)
  flat = placed_params(path, T5, T5Config, fields, overrides, w.mesh)
  flat["embed"] = w.take(shared, (v, e))
  _t5_stack(w, flat, "encoder", enc_layers, e, h, d, f, buckets, mlp["gated_mlp"])
  _t5_stack(w, flat, "decoder", dec_layers, e, h, d, f, buckets, mlp["gated_mlp"])
  if not fields["tie_embeddings"]:
    flat["lm_head"] = w.take("lm_head.weight", (v, e)).T
  w.finish(source, ignored=_t5_ignored)
  return build(path, T5, T5Config, fields, overrides, flat, source=source, mesh=w.mesh)
