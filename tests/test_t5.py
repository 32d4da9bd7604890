"""T5 v1.1: cached decoding == full forward, encoder padding, HF bucket logic and HF parity."""
import dataclasses
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import traverse_util

from specjax import checkpoint, testing
from specjax.models import api, bundle, kv_cache
from specjax.models.t5 import T5, T5Config, T5Cache, relative_position_bucket

ATOL = 1e-5
ENC_BxS = np.array([[5, 9, 12, 3, 7, 30, 2], [8, 4, 21, 17, 6, 0, 0]], np.int32)
ENC_LEN_B = np.array([7, 5], np.int32)


@pytest.fixture(scope="module")
def model():
  # small max_distance so short sequences reach the log-spaced and clamped buckets
  return testing.tiny_t5(relative_attention_num_buckets=16, relative_attention_max_distance=12)


# jitted: eager dispatch of a few hundred small ops per call dominates the test time on CPU
_logits = jax.jit(lambda model, dec, enc, lens: api.logits(model, dec, encoder_tokens=enc, encoder_lengths=lens))
_forward = jax.jit(api.forward)
_init_cache = jax.jit(lambda model, enc, lens, max_len: model.module.apply(
    {"params": model.params}, enc, lens, max_len, method="init_cache"), static_argnums=3)
_start = jax.jit(api.start, static_argnums=3)


N_FULL = 12  # every full forward pads to this length, so one compile serves all tests


def _full(model, dec_BxN, enc_BxS=ENC_BxS, enc_len_B=ENC_LEN_B):
  """Full-forward logits for dec; causal, so trailing pad tokens change nothing before them."""
  n = dec_BxN.shape[1]
  dec = np.pad(dec_BxN, ((0, 0), (0, N_FULL - n)), constant_values=2)
  return np.asarray(_logits(model, jnp.asarray(dec), jnp.asarray(enc_BxS), jnp.asarray(enc_len_B)))[:, :n]


def _new_cache(model, max_len=24) -> T5Cache:
  return _init_cache(model, jnp.asarray(ENC_BxS), jnp.asarray(ENC_LEN_B), max_len)


def _seq(b, n, seed, vocab=64):
  return np.asarray(jax.random.randint(jax.random.PRNGKey(seed), (b, n), 2, vocab), np.int32)


def _step(model, cache, tokens_BxT, positions_BxT=None, new_mask_TxT=None):
  logits, _, cache = _forward(model, jnp.asarray(tokens_BxT), cache, positions_BxT, new_mask_TxT)
  return np.asarray(logits), cache


def _prefill(model, cache, seq_BxN):
  """Feeds seq in chunks of 3 (steps use T in {3, 1} only: fewer compiles) and commits it."""
  for a in range(0, seq_BxN.shape[1], 3):
    _, cache = _step(model, cache, seq_BxN[:, a:a + 3])
    cache = cache.with_length(cache.length_B + seq_BxN[:, a:a + 3].shape[1])
  return cache


def test_chunked_prefix_matches_full(model):
  seq = _seq(2, 10, 0)
  cache, got = _new_cache(model), []
  for a, b in [(0, 3), (3, 4), (4, 7), (7, 10)]:
    logits, cache = _step(model, cache, seq[:, a:b])
    np.testing.assert_array_equal(cache.length_B, [a, a])  # the step never commits
    cache = cache.with_length(cache.length_B + (b - a))
    got.append(logits)
  np.testing.assert_allclose(np.concatenate(got, 1), _full(model, seq), atol=ATOL)


def test_ragged_rows_match_full(model):
  seq = _seq(2, 12, 1)
  full = _full(model, seq)
  cache = _prefill(model, _new_cache(model), seq[:, :6])
  length = np.array([3, 6], np.int32)  # row 0 keeps only 3 of the 6 written slots
  cache = cache.with_length(length)
  for t in (3, 1, 1):
    idx = length[:, None] + np.arange(t)[None]
    logits, cache = _step(model, cache, np.take_along_axis(seq, idx, 1))
    for b in range(2):
      np.testing.assert_allclose(logits[b], full[b, length[b]:length[b] + t], atol=ATOL)
    length = length + t
    cache = cache.with_length(length)


def test_rollback_then_rewrite_matches_full(model):
  prefix, junk, fresh = _seq(2, 6, 2), _seq(2, 3, 3), _seq(2, 3, 4)
  cache = _prefill(model, _new_cache(model), prefix)
  _, cache = _step(model, cache, junk)
  cache = cache.with_length(np.array([9, 9]))  # junk committed, then rejected below
  back = np.array([4, 6], np.int32)
  cache = cache.with_length(back)
  logits, _ = _step(model, cache, fresh)
  seq = np.full((2, 9), 2, np.int32)
  for b in range(2):
    seq[b, :back[b] + 3] = np.concatenate([prefix[b, :back[b]], fresh[b]])
  full = _full(model, seq)
  for b in range(2):
    np.testing.assert_allclose(logits[b], full[b, back[b]:back[b] + 3], atol=ATOL)


def test_tree_step_matches_each_branch(model):
  prefix, nodes = _seq(2, 3, 5), _seq(2, 3, 6)  # nodes: a, then siblings b1 and b2 under a
  cache = _prefill(model, _new_cache(model), prefix)
  mask = jnp.array([[1, 0, 0], [1, 1, 0], [1, 0, 1]], bool)
  pos = jnp.array([[3, 4, 4]] * 2, jnp.int32)  # position = prefix length + depth
  logits, _ = _step(model, cache, nodes, pos, mask)
  for node in (1, 2):
    seq = np.concatenate([prefix, nodes[:, :1], nodes[:, node:node + 1]], 1)
    np.testing.assert_allclose(logits[:, [0, node]], _full(model, seq)[:, 3:5], atol=ATOL)


def test_encoder_padding_matches_unpadded(model):
  dec = _seq(2, 5, 7)
  padded = _full(model, dec)
  junk = ENC_BxS.copy()
  junk[1, 5:] = [40, 41]  # whatever sits past the length must not matter
  np.testing.assert_allclose(_full(model, dec, junk), padded, atol=ATOL)
  # plain api.logits, no lengths: the default is the full encoder length
  alone = np.asarray(jax.jit(api.logits)(model, dec[1:], encoder_tokens=ENC_BxS[1:, :5]))
  np.testing.assert_allclose(padded[1:], alone, atol=ATOL)


def test_api_start_feeds_decoder_start_token(model):
  cache, tokens, seq_len = _start(model, jnp.asarray(ENC_BxS), jnp.asarray(ENC_LEN_B), 16)
  np.testing.assert_array_equal(seq_len, [1, 1])
  np.testing.assert_array_equal(cache.length_B, [0, 0])
  assert (np.asarray(tokens) == model.config.decoder_start_id).all()
  logits, _ = _step(model, cache, tokens[:, :1])
  np.testing.assert_allclose(logits, _full(model, np.asarray(tokens[:, :1])), atol=ATOL)


def test_call_without_encoder_tokens_raises(model):
  with pytest.raises(ValueError, match="encoder_tokens"):
    model.module.apply({"params": model.params}, jnp.zeros((1, 2), jnp.int32))


def _np_bucket(rel, bidirectional, num_buckets, max_distance):
  """Line-by-line numpy port of HF T5Attention._relative_position_bucket (float32 like torch)."""
  rel = np.asarray(rel, np.int64)
  buckets = np.zeros_like(rel)
  if bidirectional:
    num_buckets //= 2
    buckets += (rel > 0).astype(np.int64) * num_buckets
    rel = np.abs(rel)
  else:
    rel = -np.minimum(rel, np.zeros_like(rel))
  max_exact = num_buckets // 2
  is_small = rel < max_exact
  with np.errstate(all="ignore"):
    large = max_exact + (np.log(rel.astype(np.float32) / max_exact) / np.float32(math.log(max_distance / max_exact))
                         * (num_buckets - max_exact)).astype(np.int64)
  large = np.minimum(large, np.full_like(large, num_buckets - 1))
  return buckets + np.where(is_small, rel, large)


@pytest.mark.parametrize("bidirectional", [True, False])
@pytest.mark.parametrize("num_buckets,max_distance", [(32, 128), (16, 12), (8, 20)])
def test_relative_position_bucket_matches_hf(bidirectional, num_buckets, max_distance):
  rel = np.arange(-400, 401)
  got = np.asarray(relative_position_bucket(rel, bidirectional, num_buckets, max_distance))
  np.testing.assert_array_equal(got, _np_bucket(rel, bidirectional, num_buckets, max_distance))
  assert got.min() >= 0 and got.max() < num_buckets


def test_every_param_has_logical_axes(model):
  specs = traverse_util.flatten_dict(bundle.logical_axes(model), sep="/")
  params = traverse_util.flatten_dict(model.params, sep="/")
  assert set(specs) == set(params)
  for name, p in params.items():
    assert specs[name] is not None and len(specs[name]) == p.ndim, name
    assert all(isinstance(a, str) for a in specs[name]), name
  # the bias table lives only in the first layer of each stack
  assert sorted(k for k in params if "rel_bias" in k) == [
      "decoder/layers_0/self_attn/rel_bias", "encoder/layers_0/self_attn/rel_bias"]


def test_checkpoint_roundtrip(model, tmp_path):
  loaded = checkpoint.load_model(checkpoint.save_model(model, tmp_path / "t5"))
  assert isinstance(loaded.module, T5) and loaded.config == model.config
  jax.tree_util.tree_map(np.testing.assert_array_equal, loaded.params, model.params)


def _hf_to_flat(sd, cfg: T5Config):
  """HF T5ForConditionalGeneration state dict -> specjax '/'-joined params (the import mapping)."""
  e, h, d = cfg.d_model, cfg.num_heads, cfg.head_dim
  w = lambda k: sd[k].detach().cpu().numpy().astype(np.float32)
  flat = {"embed": w("shared.weight"), "lm_head": w("lm_head.weight").T,
          "encoder/final_norm/scale": w("encoder.final_layer_norm.weight"),
          "decoder/final_norm/scale": w("decoder.final_layer_norm.weight")}

  def attn(dst, src):
    for n in "qkv":
      flat[f"{dst}/{n}"] = w(f"{src}.{n}.weight").T.reshape(e, h, d)
    flat[f"{dst}/o"] = w(f"{src}.o.weight").T.reshape(h, d, e)
    if f"{src}.relative_attention_bias.weight" in sd:
      flat[f"{dst}/rel_bias"] = w(f"{src}.relative_attention_bias.weight")

  def mlp(dst, src):
    for ours, theirs in (("gate", "wi_0"), ("up", "wi_1"), ("down", "wo")):
      flat[f"{dst}/mlp/{ours}"] = w(f"{src}.DenseReluDense.{theirs}.weight").T
    flat[f"{dst}/mlp_norm/scale"] = w(f"{src}.layer_norm.weight")

  for stack, n in (("encoder", cfg.num_encoder_layers), ("decoder", cfg.num_decoder_layers)):
    for i in range(n):
      dst, src = f"{stack}/layers_{i}", f"{stack}.block.{i}.layer"
      attn(f"{dst}/self_attn", f"{src}.0.SelfAttention")
      flat[f"{dst}/self_attn_norm/scale"] = w(f"{src}.0.layer_norm.weight")
      if stack == "decoder":
        attn(f"{dst}/cross_attn", f"{src}.1.EncDecAttention")
        flat[f"{dst}/cross_attn_norm/scale"] = w(f"{src}.1.layer_norm.weight")
      mlp(dst, f"{src}.{2 if stack == 'decoder' else 1}")
  return flat


def test_matches_hf_t5_v1_1():
  torch = pytest.importorskip("torch", reason="HF parity needs torch (pip install .[hf])")
  transformers = pytest.importorskip("transformers", reason="HF parity needs transformers (pip install .[hf])")
  cfg = T5Config(vocab_size=64, d_model=32, num_encoder_layers=2, num_decoder_layers=3, num_heads=4, head_dim=8,
                 mlp_dim=48, relative_attention_num_buckets=16, relative_attention_max_distance=12)
  hf_cfg = transformers.T5Config(
      vocab_size=cfg.vocab_size, d_model=cfg.d_model, d_kv=cfg.head_dim, d_ff=cfg.mlp_dim,
      num_layers=cfg.num_encoder_layers, num_decoder_layers=cfg.num_decoder_layers, num_heads=cfg.num_heads,
      relative_attention_num_buckets=cfg.relative_attention_num_buckets,
      relative_attention_max_distance=cfg.relative_attention_max_distance, feed_forward_proj="gated-gelu",
      tie_word_embeddings=False, dropout_rate=0.0, layer_norm_epsilon=cfg.norm_eps,
      decoder_start_token_id=0, pad_token_id=0, eos_token_id=1)
  torch.manual_seed(0)
  hf = transformers.T5ForConditionalGeneration(hf_cfg).eval()
  with torch.no_grad():
    # random init ties lm_head to the embedding; untie it so the mapping of both is checked,
    # and perturb the norms (init to ones) so a swapped norm would show
    hf.lm_head.weight = torch.nn.Parameter(torch.randn(cfg.vocab_size, cfg.d_model))
    for name, p in hf.named_parameters():
      if "layer_norm" in name:
        p.add_(0.2 * torch.randn_like(p))
  enc = _seq(2, 20, 8)
  enc_len = np.array([20, 14], np.int32)
  dec = _seq(2, 16, 10)
  with torch.no_grad():
    want = hf(input_ids=torch.tensor(enc, dtype=torch.long),
              attention_mask=torch.tensor(np.arange(20)[None] < enc_len[:, None], dtype=torch.long),
              decoder_input_ids=torch.tensor(dec, dtype=torch.long)).logits.numpy()
  ours = checkpoint.from_flat_params(T5(cfg), _hf_to_flat(hf.state_dict(), cfg), source="hf")
  got = np.asarray(_logits(ours, jnp.asarray(dec), jnp.asarray(enc), jnp.asarray(enc_len)))
  np.testing.assert_allclose(got, want, atol=1e-4, rtol=1e-4)


# ----------------------------------------------------------------------------- the original T5 (ReLU, tied head)
@pytest.fixture(scope="module")
def original():
  return testing.tiny_t5(relative_attention_num_buckets=16, relative_attention_max_distance=12, seed=3,
                         mlp_activation="relu", gated_mlp=False, tie_embeddings=True, scale_decoder_output=True)


def test_original_params_and_roundtrip(original, tmp_path):
  params = traverse_util.flatten_dict(original.params, sep="/")
  assert "lm_head" not in params and not any(k.endswith("/mlp/gate") for k in params)
  assert set(traverse_util.flatten_dict(bundle.logical_axes(original), sep="/")) == set(params)
  loaded = checkpoint.load_model(checkpoint.save_model(original, tmp_path / "t5"))
  assert loaded.config == original.config
  np.testing.assert_array_equal(_full(loaded, _seq(2, 5, 11)), _full(original, _seq(2, 5, 11)))


def test_original_chunked_prefix_matches_full(original):
  seq = _seq(2, 7, 12)
  cache = _prefill(original, _new_cache(original), seq[:, :6])
  logits, _ = _step(original, cache, seq[:, 6:7])
  np.testing.assert_allclose(logits, _full(original, seq)[:, 6:7], atol=ATOL)


def test_head_follows_the_config(original):
  """The tied head is the embedding after the d_model**-0.5 rescale; without the rescale every logit
  is d_model**0.5 times larger (so a dropped rescale cannot pass the HF parity tests)."""
  dec = _seq(2, 5, 13)
  unscaled = original.replace(module=T5(dataclasses.replace(original.config, scale_decoder_output=False)))
  np.testing.assert_allclose(_full(unscaled, dec), _full(original, dec) * original.config.d_model ** 0.5,
                             rtol=1e-4, atol=1e-4)


def test_default_config_is_v1_1():
  """Bundles saved before these fields existed load as what they are: gated-GELU, own head."""
  cfg = T5Config()
  assert (cfg.mlp_activation, cfg.gated_mlp, cfg.tie_embeddings, cfg.scale_decoder_output) == (
      "gelu_tanh", True, False, False)
  with pytest.raises(ValueError, match="mlp_activation='swish'"):
    T5Config(mlp_activation="swish")
