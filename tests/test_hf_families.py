"""Gemma 3 (text), Qwen2 and Qwen3 imports: parity with transformers (float32 logits past the sliding
window, greedy generate), greedy speculative == greedy autoregressive with chain and tree drafters on
prompts longer than the window, a transformers-4 Gemma 3 config, and the refused features.

Needs torch + transformers (``pip install .[hf]``); skips without them.
"""
import json
import shutil

import numpy as np
import pytest

import specjax
from specjax import testing
from specjax.checkpoint import CheckpointError
from specjax.hf_import import from_hf

V, E, F, H, D = 128, 64, 128, 4, 16
WINDOW = 4  # Gemma 3's sliding window: far shorter than the sequences below
N_NEW = 12
RNG = np.random.RandomState(0)
PROMPT_1xP = RNG.randint(3, V, (1, 10)).astype(np.int32)   # 10 > WINDOW
PROMPTS_2xP = RNG.randint(3, V, (2, 10)).astype(np.int32)
LONG_2xT = RNG.randint(0, V, (2, 20))
FAMILIES = ["gemma3", "qwen2", "qwen3"]


def _hf():
  torch = pytest.importorskip("torch", reason="HF parity needs torch (pip install .[hf])")
  transformers = pytest.importorskip("transformers", reason="HF parity needs transformers (pip install .[hf])")
  return torch, transformers


def _config(transformers, family, **over):
  common = dict(vocab_size=V, hidden_size=E, intermediate_size=F, num_attention_heads=H, head_dim=D,
                rms_norm_eps=1e-6)
  if family == "gemma3":  # 6 layers, default layer_types: 5 sliding + 1 global
    return transformers.Gemma3TextConfig(
        **common, num_hidden_layers=6, initializer_range=0.05, num_key_value_heads=1, sliding_window=WINDOW,
        query_pre_attn_scalar=24,
        rope_parameters={"sliding_attention": {"rope_type": "default", "rope_theta": 50.0},
                         "full_attention": {"rope_type": "default", "rope_theta": 3e4}})
  cls = {"qwen2": transformers.Qwen2Config, "qwen3": transformers.Qwen3Config}[family]
  return cls(**common, num_hidden_layers=2, initializer_range=0.2, num_key_value_heads=2,
             tie_word_embeddings=family == "qwen3",
             rope_parameters={"rope_type": "default", "rope_theta": 5e3}, **over)


def _build(torch, transformers, family, **over):
  cfg = _config(transformers, family, **over)
  cls = {"gemma3": transformers.Gemma3ForCausalLM, "qwen2": transformers.Qwen2ForCausalLM,
         "qwen3": transformers.Qwen3ForCausalLM}[family]
  torch.manual_seed(FAMILIES.index(family))
  m = cls(cfg).eval()
  gemma = family == "gemma3"
  with torch.no_grad():  # scales chosen so that greedy output is varied, not one repeated token
    for name, p in m.named_parameters():
      if "norm" in name:  # norms init to ones (Gemma: zeros of 1 + w); make a swapped norm visible
        p.add_((1.0 if gemma else 0.2) * torch.randn_like(p))
      elif name.endswith(".bias"):  # Qwen2's q/k/v biases init to zero
        p.add_(0.5 * torch.randn_like(p))
    if gemma:
      m.model.norm.weight.add_(2.0)  # sharper logits
  m.generation_config.eos_token_id = None  # greedy runs the full length on both sides
  m.generation_config.pad_token_id = 0
  return m


@pytest.fixture(scope="module")
def models(tmp_path_factory):
  torch, transformers = _hf()
  out = {}
  for family in FAMILIES:
    hf = _build(torch, transformers, family)
    folder = tmp_path_factory.mktemp(family)
    hf.save_pretrained(folder, safe_serialization=True)
    out[family] = dict(hf=hf, model=from_hf(folder), dir=folder)
  return out


def test_imported_configs(models):
  g = models["gemma3"]["model"].config
  assert g.layer_windows == (WINDOW,) * 5 + (0,) and g.min_window == WINDOW
  assert (g.rope_theta, g.local_rope_theta, g.query_pre_attn_scalar) == (3e4, 50.0, 24.0)
  assert g.norm_offset == 1.0 and g.sandwich_norms and g.qk_norm and g.scale_embeddings and g.tie_embeddings
  assert g.mlp_activation == "gelu_tanh" and g.num_kv_heads == 1
  q2, q3 = models["qwen2"]["model"].config, models["qwen3"]["model"].config
  assert q2.qkv_bias and not q2.qk_norm and not q2.tie_embeddings and q2.layer_windows == ()
  assert q3.qk_norm and not q3.qkv_bias and q3.tie_embeddings and q3.layer_windows == ()
  assert np.abs(models["qwen2"]["model"].params["layer_0"]["attn"]["k_bias"]).min() > 0


@pytest.mark.parametrize("family", FAMILIES)
def test_logits_match_hf_past_the_window(models, family):
  torch, _ = _hf()
  with torch.no_grad():
    want = models[family]["hf"](torch.tensor(LONG_2xT)).logits.numpy()
  got = np.asarray(specjax.logits(models[family]["model"], LONG_2xT))
  assert want[:, -1].std() > 0.3  # varied logits, not a near-constant output
  np.testing.assert_allclose(got, want, atol=1e-4, rtol=1e-4)


def _hf_greedy(hf, prompts):
  torch, _ = _hf()
  ids = torch.tensor(prompts, dtype=torch.long)
  with torch.no_grad():
    out = hf.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False, max_new_tokens=N_NEW,
                      min_new_tokens=N_NEW)
  return out[:, ids.shape[1]:].numpy()


@pytest.fixture(scope="module")
def greedy(models):
  """specjax's greedy autoregressive output per family and batch (batch 1 and 2)."""
  return {(f, b): specjax.generate(models[f]["model"], p, [p.shape[1]] * b, max_new_tokens=N_NEW).tokens
          for f in FAMILIES for b, p in ((1, PROMPT_1xP), (2, PROMPTS_2xP))}


@pytest.mark.parametrize("family", FAMILIES)
def test_greedy_generate_matches_hf(models, greedy, family):
  for batch, prompts in ((1, PROMPT_1xP), (2, PROMPTS_2xP)):
    want = _hf_greedy(models[family]["hf"], prompts)
    np.testing.assert_array_equal(greedy[family, batch], want, err_msg=f"batch {batch}")
    assert len(set(want[0].tolist())) > 3, want  # varied output, not one repeated token


def _drafters(model):
  near = testing.perturbed(model, 0.05, seed=3)
  return {"ngram": (specjax.drafters.NGram(3), 3), "draft_model": (specjax.drafters.DraftModel(near), 3),
          "specinfer": (specjax.drafters.SpecInfer(near, children=(2, 1, 1)), 3)}


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("drafter", ["ngram", "draft_model", "specinfer"])
def test_greedy_speculative_equals_autoregressive(models, greedy, family, drafter):
  model = models[family]["model"]
  d, gamma = _drafters(model)[drafter]
  out = specjax.speculative_generate(model, d, PROMPTS_2xP, [PROMPTS_2xP.shape[1]] * 2, gamma=gamma,
                                     max_new_tokens=N_NEW)
  np.testing.assert_array_equal(out.tokens, greedy[family, 2])
  if drafter != "ngram":  # a near-copy drafter gets drafts accepted
    assert out.stats["mean_accepted"] > 0.3, out.stats


def test_speculative_batch1(models, greedy):
  model = models["gemma3"]["model"]
  d, gamma = _drafters(model)["draft_model"]
  out = specjax.speculative_generate(model, d, PROMPT_1xP, [PROMPT_1xP.shape[1]], gamma=gamma, max_new_tokens=N_NEW)
  np.testing.assert_array_equal(out.tokens, greedy["gemma3", 1])


def test_gamma_at_the_window_is_refused(models):
  model = models["gemma3"]["model"]
  with pytest.raises(ValueError, match=f"gamma={WINDOW}.*smallest window is {WINDOW}"):
    specjax.speculative_generate(model, specjax.drafters.NGram(3), PROMPT_1xP, [10], gamma=WINDOW, max_new_tokens=4)


# ----------------------------------------------------------------------------- configs as files hold them
def _copy(models, family, tmp_path, edit):
  folder = tmp_path / family
  shutil.copytree(models[family]["dir"], folder)
  cfg = json.loads((folder / "config.json").read_text())
  edit(cfg)
  (folder / "config.json").write_text(json.dumps(cfg))
  return folder


def test_gemma3_transformers4_config_reads_the_same(models, tmp_path):
  """transformers 4 wrote rope_theta + rope_local_base_freq + sliding_window_pattern, no layer_types."""
  def v4(cfg):
    for key in ("rope_parameters", "layer_types", "_sliding_window_pattern"):
      cfg.pop(key, None)
    cfg.update(rope_theta=3e4, rope_local_base_freq=50.0, sliding_window_pattern=6, rope_scaling=None)
  got = from_hf(_copy(models, "gemma3", tmp_path, v4))
  assert got.config == models["gemma3"]["model"].config
  np.testing.assert_array_equal(specjax.logits(got, LONG_2xT[:1]), specjax.logits(models["gemma3"]["model"],
                                                                                  LONG_2xT[:1]))


def test_gemma3_v4_pattern_places_global_layers(models, tmp_path):
  def v4(cfg):
    cfg.pop("layer_types")
    cfg.pop("_sliding_window_pattern", None)
    cfg["sliding_window_pattern"] = 3
  assert from_hf(_copy(models, "gemma3", tmp_path, v4)).config.layer_windows == (WINDOW, WINDOW, 0) * 2


@pytest.mark.parametrize("family,key,value", [
    ("gemma3", "final_logit_softcapping", 30.0),
    ("gemma3", "attn_logit_softcapping", 50.0),
    ("gemma3", "use_bidirectional_attention", True),
    ("qwen3", "attention_bias", True),
    ("qwen2", "hidden_act", "gelu"),
])
def test_unsupported_features_are_refused(models, tmp_path, family, key, value):
  folder = _copy(models, family, tmp_path, lambda cfg: cfg.update({key: value}))
  with pytest.raises(CheckpointError, match=f"unsupported .*{key}"):
    from_hf(folder)


def test_qwen_sliding_window_matches_hf(tmp_path):
  """use_sliding_window: transformers slides the layers from max_window_layers on (here: the second)."""
  torch, transformers = _hf()
  hf = _build(torch, transformers, "qwen3", use_sliding_window=True, sliding_window=WINDOW, max_window_layers=1)
  assert hf.config.layer_types == ["full_attention", "sliding_attention"]
  hf.save_pretrained(tmp_path / "v5", safe_serialization=True)
  model = from_hf(tmp_path / "v5")
  assert model.config.layer_windows == (0, WINDOW)
  with torch.no_grad():
    want = hf(torch.tensor(LONG_2xT)).logits.numpy()
  np.testing.assert_allclose(np.asarray(specjax.logits(model, LONG_2xT)), want, atol=1e-4, rtol=1e-4)
  cfg = json.loads((tmp_path / "v5" / "config.json").read_text())
  del cfg["layer_types"]  # a config without layer_types: derived the same way
  (tmp_path / "v5" / "config.json").write_text(json.dumps(cfg))
  assert from_hf(tmp_path / "v5").config.layer_windows == (0, WINDOW)
