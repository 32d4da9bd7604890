"""HF checkpoint import: parity with transformers (logits, greedy, speculative, assisted) and bad input.

The parity tests need torch + transformers (``pip install .[hf]``) and skip without them; the
bad-input and format tests build checkpoints with numpy only, so they always run.
"""
import copy
import json

import jax
import ml_dtypes
import numpy as np
import pytest

import specjax
from specjax.checkpoint import CheckpointError
from specjax.hf_import import from_hf
from specjax.models.decoder import Decoder
from specjax.models.t5 import T5

V, E, F, H, K, D = 128, 64, 128, 4, 2, 16  # tiny Llama: vocab, hidden, mlp, heads, kv heads, head_dim
N_NEW = 12
RNG = np.random.RandomState(0)
PROMPT_1xP = RNG.randint(3, V, (1, 7)).astype(np.int32)
PROMPTS_2xP = RNG.randint(3, V, (2, 7)).astype(np.int32)


# ----------------------------------------------------------------------------- numpy-only checkpoints
def _llama_cfg(**over):
  cfg = dict(architectures=["LlamaForCausalLM"], model_type="llama", vocab_size=V, hidden_size=E,
             intermediate_size=F, num_hidden_layers=2, num_attention_heads=H, num_key_value_heads=K,
             head_dim=D, rms_norm_eps=1e-6, hidden_act="silu", attention_bias=False, mlp_bias=False,
             rope_parameters={"rope_type": "default", "rope_theta": 10000.0}, tie_word_embeddings=False)
  cfg.update(over)
  return cfg


def _llama_tensors(layers=2, seed=0):
  rng = np.random.RandomState(seed)
  shapes = {"model.embed_tokens.weight": (V, E), "model.norm.weight": (E,), "lm_head.weight": (V, E)}
  for i in range(layers):
    p = f"model.layers.{i}"
    shapes.update({f"{p}.self_attn.q_proj.weight": (H * D, E), f"{p}.self_attn.k_proj.weight": (K * D, E),
                   f"{p}.self_attn.v_proj.weight": (K * D, E), f"{p}.self_attn.o_proj.weight": (E, H * D),
                   f"{p}.mlp.gate_proj.weight": (F, E), f"{p}.mlp.up_proj.weight": (F, E),
                   f"{p}.mlp.down_proj.weight": (E, F), f"{p}.input_layernorm.weight": (E,),
                   f"{p}.post_attention_layernorm.weight": (E,)})
  return {n: (0.1 * rng.randn(*s)).astype(np.float32) for n, s in shapes.items()}


def _save_raw(path, tensors, dtype="F32"):
  """Writes safetensors by hand (header + raw bytes), so any dtype and any corruption is possible."""
  np_dtype = {"F32": np.float32, "BF16": ml_dtypes.bfloat16, "F16": np.float16}[dtype]
  header, chunks, offset = {"__metadata__": {"format": "pt"}}, [], 0
  for name, arr in tensors.items():
    raw = np.ascontiguousarray(arr.astype(np_dtype)).tobytes()
    header[name] = {"dtype": dtype, "shape": list(arr.shape), "data_offsets": [offset, offset + len(raw)]}
    chunks.append(raw)
    offset += len(raw)
  head = json.dumps(header).encode()
  head += b" " * (-len(head) % 8)
  path.write_bytes(len(head).to_bytes(8, "little") + head + b"".join(chunks))


def _write(folder, cfg, tensors, dtype="F32"):
  folder.mkdir(parents=True, exist_ok=True)
  (folder / "config.json").write_text(json.dumps(cfg))
  _save_raw(folder / "model.safetensors", tensors, dtype)
  return folder


@pytest.fixture
def llama_dir(tmp_path):
  return _write(tmp_path / "llama", _llama_cfg(), _llama_tensors())


def test_numpy_llama_maps_every_layout(llama_dir):
  t = _llama_tensors()
  model = from_hf(llama_dir)
  assert isinstance(model.module, Decoder) and not model.config.tie_embeddings
  assert (model.config.num_heads, model.config.num_kv_heads, model.config.head_dim) == (H, K, D)
  p = model.params
  q = t["model.layers.1.self_attn.q_proj.weight"]  # [H*D, E]: row h*D + d is head h, dim d
  np.testing.assert_array_equal(p["layer_1"]["attn"]["q"][:, 2, 5], q[2 * D + 5])
  o = t["model.layers.0.self_attn.o_proj.weight"]  # [E, H*D]
  np.testing.assert_array_equal(p["layer_0"]["attn"]["o"][3, 1], o[:, 3 * D + 1])
  np.testing.assert_array_equal(p["layer_0"]["mlp"]["down"], t["model.layers.0.mlp.down_proj.weight"].T)
  np.testing.assert_array_equal(p["lm_head"], t["lm_head.weight"].T)


def test_bf16_checkpoint_loads_as_float32(tmp_path):
  t = _llama_tensors()
  model = from_hf(_write(tmp_path / "bf16", _llama_cfg(), t, dtype="BF16"))
  want = t["model.embed_tokens.weight"].astype(ml_dtypes.bfloat16).astype(np.float32)
  assert model.params["embed"].dtype == np.float32
  np.testing.assert_array_equal(model.params["embed"], want)


def test_sharded_checkpoint_matches_single_file(tmp_path, llama_dir):
  t = _llama_tensors()
  names = sorted(t)
  folder = tmp_path / "sharded"
  folder.mkdir()
  (folder / "config.json").write_text(json.dumps(_llama_cfg()))
  shards = {"model-00001-of-00002.safetensors": names[::2], "model-00002-of-00002.safetensors": names[1::2]}
  for shard, members in shards.items():
    _save_raw(folder / shard, {n: t[n] for n in members})
  weight_map = {n: shard for shard, members in shards.items() for n in members}
  (folder / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
  jax.tree_util.tree_map(np.testing.assert_array_equal, from_hf(folder).params, from_hf(llama_dir).params)
  (folder / "model-00002-of-00002.safetensors").unlink()
  with pytest.raises(CheckpointError, match="model-00002-of-00002.safetensors.*missing"):
    from_hf(folder)


# ----------------------------------------------------------------------------- bad input
def test_missing_folder(tmp_path):
  with pytest.raises(CheckpointError, match="folder not found.*nope"):
    from_hf(tmp_path / "nope")


def test_missing_or_broken_config(llama_dir):
  (llama_dir / "config.json").write_text("{not json")
  with pytest.raises(CheckpointError, match="config.json: not valid JSON"):
    from_hf(llama_dir)
  (llama_dir / "config.json").unlink()
  with pytest.raises(CheckpointError, match="file missing.*config.json"):
    from_hf(llama_dir)


def test_pickle_only_folder_is_refused(tmp_path):
  folder = tmp_path / "bin"
  folder.mkdir()
  (folder / "config.json").write_text(json.dumps(_llama_cfg()))
  (folder / "pytorch_model.bin").write_bytes(b"\x80\x04 not unpickled, ever")
  with pytest.raises(CheckpointError, match=r"pytorch_model\.bin.*not loaded on purpose"):
    from_hf(folder)


@pytest.mark.parametrize("keep", [4, 100, -10])
def test_truncated_safetensors(llama_dir, keep):
  path = llama_dir / "model.safetensors"
  data = path.read_bytes()
  path.write_bytes(data[:keep] if keep > 0 else data[:keep])  # no header / cut header / cut data
  with pytest.raises(CheckpointError, match="model.safetensors: .*truncated"):
    from_hf(llama_dir)


def test_corrupt_safetensors_header(llama_dir):
  path = llama_dir / "model.safetensors"
  path.write_bytes((16).to_bytes(8, "little") + b"\xff" * 16 + b"\0" * 64)
  with pytest.raises(CheckpointError, match="model.safetensors: corrupt safetensors header"):
    from_hf(llama_dir)


@pytest.mark.parametrize("arch", ["GPT2LMHeadModel", "Gemma2ForCausalLM"])
def test_unsupported_architecture(tmp_path, arch):
  folder = _write(tmp_path / "x", _llama_cfg(architectures=[arch]), _llama_tensors())
  with pytest.raises(CheckpointError, match=f"unsupported architecture '{arch}'"):
    from_hf(folder)


@pytest.mark.parametrize("over,match", [
    (dict(attention_bias=True), "attention_bias"),
    (dict(mlp_bias=True), "mlp_bias"),
    (dict(hidden_act="gelu"), "hidden_act='gelu'"),
    (dict(rope_parameters={"rope_type": "llama3", "rope_theta": 5e5, "factor": 8.0}), "rope_type='llama3'"),
    (dict(rope_parameters=None, rope_theta=1e4, rope_scaling={"type": "linear", "factor": 2.0}), "rope_scaling"),
])
def test_unsupported_llama_features(tmp_path, over, match):
  folder = _write(tmp_path / "x", _llama_cfg(**over), _llama_tensors())
  with pytest.raises(CheckpointError, match=f"unsupported .*{match}"):
    from_hf(folder)


def test_v4_style_rope_theta_is_read(tmp_path):
  cfg = _llama_cfg(rope_parameters=None, rope_theta=500000.0, rope_scaling=None)
  assert from_hf(_write(tmp_path / "x", cfg, _llama_tensors())).config.rope_theta == 500000.0


def test_mistral_sliding_window_is_imported_on_every_layer(tmp_path):
  folder = _write(tmp_path / "m", _llama_cfg(architectures=["MistralForCausalLM"], sliding_window=4096),
                  _llama_tensors())
  model = from_hf(folder)
  assert isinstance(model.module, Decoder) and model.config.layer_windows == (4096, 4096)


def test_shape_mismatch_names_tensor_and_shapes(tmp_path):
  folder = _write(tmp_path / "x", _llama_cfg(intermediate_size=96), _llama_tensors())
  with pytest.raises(CheckpointError, match=r"'model\.layers\.0\.mlp\.gate_proj\.weight' has shape \(128, 64\), "
                                            r"but the config implies \(96, 64\)"):
    from_hf(folder)


def test_missing_and_unexpected_tensors(tmp_path):
  t = _llama_tensors()
  del t["model.layers.1.mlp.up_proj.weight"]
  with pytest.raises(CheckpointError, match=r"missing tensors \['model\.layers\.1\.mlp\.up_proj\.weight'\]"):
    from_hf(_write(tmp_path / "a", _llama_cfg(), t))
  t = _llama_tensors()
  t["model.layers.0.self_attn.q_proj.bias"] = np.zeros(H * D, np.float32)
  with pytest.raises(CheckpointError, match=r"unexpected tensors \['model\.layers\.0\.self_attn\.q_proj\.bias'\]"):
    from_hf(_write(tmp_path / "b", _llama_cfg(), t))


def test_tied_config_without_lm_head(tmp_path):
  t = _llama_tensors()
  del t["lm_head.weight"]
  model = from_hf(_write(tmp_path / "x", _llama_cfg(tie_word_embeddings=True), t))
  assert model.config.tie_embeddings and "lm_head" not in model.params
  with pytest.raises(CheckpointError, match="missing tensors.*lm_head"):  # untied needs a head
    from_hf(_write(tmp_path / "y", _llama_cfg(), t))


@pytest.mark.parametrize("over,match", [
    (dict(feed_forward_proj="gated-silu"), "feed_forward_proj='gated-silu'"),
    (dict(feed_forward_proj="swish-gelu"), "feed_forward_proj='swish-gelu'"),
    (dict(feed_forward_proj="relu", dense_act_fn="gelu_new"), "dense_act_fn='gelu_new'"),
    (dict(feed_forward_proj="gated-gelu", is_gated_act=False), "is_gated_act=False")])
def test_t5_unsupported_feed_forward_is_refused(tmp_path, over, match):
  cfg = dict(architectures=["T5ForConditionalGeneration"], vocab_size=V, d_model=E, d_kv=8, d_ff=F, num_layers=1,
             num_heads=4, **over)
  with pytest.raises(CheckpointError, match=match):
    from_hf(_write(tmp_path / "t5", cfg, {}))


# ----------------------------------------------------------------------------- parity with transformers
def _hf():
  torch = pytest.importorskip("torch", reason="HF parity needs torch (pip install .[hf])")
  transformers = pytest.importorskip("transformers", reason="HF parity needs transformers (pip install .[hf])")
  return torch, transformers


def _no_eos(m):
  """Greedy runs the full length on both sides: no EOS, so min_new_tokens never masks a logit."""
  m.generation_config.eos_token_id = None
  m.generation_config.pad_token_id = 0
  return m


def _perturb_norms(torch, m):
  with torch.no_grad():  # norms init to ones; make a swapped norm visible
    for name, p in m.named_parameters():
      if "norm" in name:
        p.add_(0.2 * torch.randn_like(p))


def _hf_llama(torch, transformers, layers, tied, seed):
  cfg = transformers.LlamaConfig(vocab_size=V, hidden_size=E, intermediate_size=F, num_hidden_layers=layers,
                                 num_attention_heads=H, num_key_value_heads=K, tie_word_embeddings=tied,
                                 initializer_range=0.1, rope_parameters={"rope_type": "default", "rope_theta": 5e3})
  torch.manual_seed(seed)
  m = transformers.LlamaForCausalLM(cfg).eval()
  _perturb_norms(torch, m)
  return _no_eos(m)


def _hf_llama_drafter(torch, transformers, target):
  """1 layer, untied: the target's embedding, first layer and final norm, so it often agrees."""
  m = _hf_llama(torch, transformers, layers=1, tied=False, seed=1)
  own = m.state_dict()
  m.load_state_dict({k: v for k, v in target.state_dict().items() if k in own and k != "lm_head.weight"},
                    strict=False)
  with torch.no_grad():
    m.lm_head.weight.copy_(target.model.embed_tokens.weight)
  return m


@pytest.fixture(scope="module")
def llama(tmp_path_factory):
  """Target: tied, 2 layers (the second damped). Drafter: untied, 1 layer. HF models and imports."""
  torch, transformers = _hf()
  target = _hf_llama(torch, transformers, layers=2, tied=True, seed=0)
  with torch.no_grad():  # a weaker last layer: the drafter agrees often, but not always
    target.model.layers[1].self_attn.o_proj.weight.mul_(0.3)
    target.model.layers[1].mlp.down_proj.weight.mul_(0.3)
  out = {"target_hf": target, "drafter_hf": _hf_llama_drafter(torch, transformers, target)}
  for name in ("target", "drafter"):
    folder = tmp_path_factory.mktemp(name)
    out[name + "_hf"].save_pretrained(folder, safe_serialization=True)
    out[name], out[name + "_dir"] = from_hf(folder), folder
  assert out["target"].config.tie_embeddings and not out["drafter"].config.tie_embeddings
  return out


def _hf_greedy(hf, prompts, **kw):
  torch, _ = _hf()
  ids = torch.tensor(prompts, dtype=torch.long)
  with torch.no_grad():
    out = hf.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False, max_new_tokens=N_NEW,
                      min_new_tokens=N_NEW, **kw)
  return out[:, ids.shape[1]:].numpy()


@pytest.mark.parametrize("which", ["target", "drafter"])
def test_llama_logits_match_hf(llama, which):
  torch, _ = _hf()
  tokens = RNG.randint(0, V, (2, 16))
  with torch.no_grad():
    want = llama[which + "_hf"](torch.tensor(tokens)).logits.numpy()
  np.testing.assert_allclose(np.asarray(specjax.logits(llama[which], tokens)), want, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("prompts", [PROMPT_1xP, PROMPTS_2xP], ids=["batch1", "batch2"])
def test_llama_greedy_generate_matches_hf(llama, prompts):
  got = specjax.generate(llama["target"], prompts, [prompts.shape[1]] * len(prompts), max_new_tokens=N_NEW)
  np.testing.assert_array_equal(got.tokens, _hf_greedy(llama["target_hf"], prompts))


def _speculative(llama, prompts):
  drafter = specjax.drafters.DraftModel(llama["drafter"])
  return specjax.speculative_generate(llama["target"], drafter, prompts, [prompts.shape[1]] * len(prompts), gamma=3,
                                      max_new_tokens=N_NEW)


@pytest.mark.parametrize("prompts", [PROMPT_1xP, PROMPTS_2xP], ids=["batch1", "batch2"])
def test_llama_speculative_matches_hf_greedy(llama, prompts):
  got = _speculative(llama, prompts)
  np.testing.assert_array_equal(got.tokens, _hf_greedy(llama["target_hf"], prompts))
  assert 0 < got.stats["mean_accepted"] < 3, got.stats  # drafts were both accepted and rejected


def test_hf_assisted_generation_matches_specjax_speculative(llama):
  assistant = llama["drafter_hf"]
  assistant.generation_config.num_assistant_tokens = 3  # HF's gamma
  assistant.generation_config.num_assistant_tokens_schedule = "constant"
  want = _hf_greedy(llama["target_hf"], PROMPT_1xP, assistant_model=assistant)
  np.testing.assert_array_equal(_speculative(llama, PROMPT_1xP).tokens, want)


def test_llama_bf16_save_loads_rounded_weights(tmp_path, llama):
  torch, _ = _hf()
  copy.deepcopy(llama["target_hf"]).to(torch.bfloat16).save_pretrained(tmp_path, safe_serialization=True)
  rounded = jax.tree_util.tree_map(lambda x: np.asarray(x).astype(ml_dtypes.bfloat16).astype(np.float32),
                                   llama["target"].params)
  jax.tree_util.tree_map(np.testing.assert_array_equal, from_hf(tmp_path).params, rounded)


# ----------------------------------------------------------------------------- T5 (v1.1 and the original)
# name -> (feed_forward_proj, tie_word_embeddings, weight scale): v1.1 / FLAN-T5, the original T5
# (t5-small ... t5-11b), and a tied gated model (a transformers default that no release uses, yet
# importable). The original's random init, scaled 6x, decodes varied tokens instead of one repeated.
T5_VARIANTS = {"v1_1": ("gated-gelu", False, 1.0), "original": ("relu", True, 6.0), "tied": ("gated-gelu", True, 1.0)}


def _hf_t5(torch, transformers, tied, seed, dec_layers=2, ff="gated-gelu", weight_scale=1.0):
  cfg = transformers.T5Config(vocab_size=V, d_model=32, d_kv=8, d_ff=48, num_layers=2, num_decoder_layers=dec_layers,
                              num_heads=4, relative_attention_num_buckets=16, relative_attention_max_distance=12,
                              feed_forward_proj=ff, tie_word_embeddings=tied, dropout_rate=0.0,
                              decoder_start_token_id=0, pad_token_id=0, eos_token_id=1)
  torch.manual_seed(seed)
  m = transformers.T5ForConditionalGeneration(cfg).eval()
  if not tied:  # random init shares lm_head with the embedding; a v1.1 checkpoint has its own
    with torch.no_grad():
      m.lm_head.weight = torch.nn.Parameter(torch.randn(V, 32))
  with torch.no_grad():
    for name, p in m.named_parameters():
      if p.ndim == 2 and "relative_attention_bias" not in name:
        p.mul_(weight_scale)
  _perturb_norms(torch, m)
  return _no_eos(m)


@pytest.fixture(scope="module")
def t5(tmp_path_factory):
  torch, transformers = _hf()
  out = {}
  for name, (ff, tied, scale) in T5_VARIANTS.items():
    hf = _hf_t5(torch, transformers, tied, seed=2, ff=ff, weight_scale=scale)
    folder = tmp_path_factory.mktemp("t5_" + name)
    hf.save_pretrained(folder, safe_serialization=True)
    out[name], out[name + "_hf"] = from_hf(folder), hf
  return out


ENC_2xS = RNG.randint(2, V, (2, 9)).astype(np.int32)
ENC_LEN = np.array([9, 6], np.int32)


@pytest.mark.parametrize("which", list(T5_VARIANTS))
def test_t5_logits_match_hf(t5, which):
  torch, _ = _hf()
  dec = RNG.randint(2, V, (2, 8))
  mask = torch.tensor(np.arange(9)[None] < ENC_LEN[:, None], dtype=torch.long)
  with torch.no_grad():
    want = t5[which + "_hf"](input_ids=torch.tensor(ENC_2xS, dtype=torch.long), attention_mask=mask,
                             decoder_input_ids=torch.tensor(dec)).logits.numpy()
  assert isinstance(t5[which].module, T5)
  got = np.asarray(specjax.logits(t5[which], dec, encoder_tokens=ENC_2xS, encoder_lengths=ENC_LEN))
  np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-3 * np.abs(want).max())  # 1e-3 of the logits' scale
  if T5_VARIANTS[which][2] == 1.0:  # at init scale (logits of order 1) closer still
    np.testing.assert_allclose(got, want, atol=1e-4, rtol=1e-4)


def test_t5_variants_import_as_their_config_says(t5):
  """Each variant's fields and params: a relu checkpoint imported as gated (or tied as untied) would
  have other param names; the rescale changes every logit (checked against HF above)."""
  cfg = {name: t5[name].config for name in T5_VARIANTS}
  assert (cfg["v1_1"].gated_mlp, cfg["v1_1"].mlp_activation, cfg["v1_1"].tie_embeddings,
          cfg["v1_1"].scale_decoder_output) == (True, "gelu_tanh", False, False)
  assert (cfg["original"].gated_mlp, cfg["original"].mlp_activation, cfg["original"].tie_embeddings,
          cfg["original"].scale_decoder_output) == (False, "relu", True, True)
  assert (cfg["tied"].tie_embeddings, cfg["tied"].scale_decoder_output) == (True, True)
  assert "lm_head" in t5["v1_1"].params and "lm_head" not in t5["original"].params
  assert set(t5["original"].params["encoder"]["layers_0"]["mlp"]) == {"up", "down"}
  assert set(t5["v1_1"].params["encoder"]["layers_0"]["mlp"]) == {"gate", "up", "down"}


@pytest.mark.parametrize("which", ["v1_1", "original"])
def test_t5_greedy_generate_matches_hf(t5, which):
  torch, _ = _hf()
  model, hf = t5[which], t5[which + "_hf"]
  assert model.config.decoder_start_id == 0
  got = specjax.generate(model, ENC_2xS, ENC_LEN, max_new_tokens=N_NEW)
  mask = torch.tensor(np.arange(9)[None] < ENC_LEN[:, None], dtype=torch.long)
  with torch.no_grad():
    want = hf.generate(torch.tensor(ENC_2xS, dtype=torch.long), attention_mask=mask, do_sample=False,
                       max_new_tokens=N_NEW, min_new_tokens=N_NEW).numpy()
  np.testing.assert_array_equal(want[:, 0], 0)  # HF starts the decoder at decoder_start_token_id
  np.testing.assert_array_equal(got.tokens, want[:, 1:])
  assert len(set(got.tokens.ravel().tolist())) > 2  # varied output: equality is not a repeated token


def test_t5_original_transformers4_config_reads_the_same(t5, tmp_path):
  """The original T5's config.json as transformers 4 wrote it (t5-small): no tie_word_embeddings and
  no scale key (both default to a tied, rescaled head), feed_forward_proj only."""
  folder = tmp_path / "v4"
  t5["original_hf"].save_pretrained(folder, safe_serialization=True)
  cfg = json.loads((folder / "config.json").read_text())
  for key in ("scale_decoder_outputs", "tie_word_embeddings", "dense_act_fn", "is_gated_act"):
    cfg.pop(key, None)
  cfg["architectures"] = ["T5WithLMHeadModel"]  # the name those configs still carry
  (folder / "config.json").write_text(json.dumps(cfg))
  model = from_hf(folder)
  assert model.config == t5["original"].config
  jax.tree_util.tree_map(np.testing.assert_array_equal, model.params, t5["original"].params)


def test_t5_transformers4_config_reads_the_same(t5, tmp_path):
  """A v1.1 config.json as transformers 4 wrote it: tie_word_embeddings false, no scale key."""
  folder = tmp_path / "v4"
  t5["v1_1_hf"].save_pretrained(folder, safe_serialization=True)
  cfg = json.loads((folder / "config.json").read_text())
  assert cfg.pop("scale_decoder_outputs") is False
  cfg["tie_word_embeddings"] = False
  (folder / "config.json").write_text(json.dumps(cfg))
  jax.tree_util.tree_map(np.testing.assert_array_equal, from_hf(folder).params, t5["v1_1"].params)
