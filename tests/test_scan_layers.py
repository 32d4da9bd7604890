"""Scanned layers (``DecoderConfig.scan_layers``): one ``lax.scan`` over params stacked ``[L, ...]``.

The scanned decoder is the same model as the unrolled one (logits, caches, feature taps, Gemma's
per-layer windows and RoPE thetas), its checkpoints keep per-layer names, greedy speculative output
equals greedy autoregressive output for every drafter family on it (in bfloat16 params, compute and
cache: one compile per family covers both), and its program does not grow
with depth (the HLO text of a 2- and an 8-layer ``generate`` has the same size; unrolled, it grows).
"""
import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import stats_util

import specjax
from specjax import checkpoint, precision, sharding, testing
from specjax.drafters.eagle import Eagle
from specjax.models import api, bundle, heads, kv_cache, store

GEMMA_LIKE = dict(num_layers=4, layer_windows=(3, 0, 3, 0), local_rope_theta=100.0, qk_norm=True, sandwich_norms=True,
                  norm_offset=1.0, scale_embeddings=True, mlp_activation="gelu_tanh")


@jax.jit  # one compile per model (its module is static), not hundreds of eager ops
def _outputs(model, toks):
  """Full-sequence logits; a prefill's logits and per-layer hidden states; a step's logits and cache;
  the same step over a PendingKV and the cache write_pending leaves."""
  cache = kv_cache.init_cache(model.config.num_layers, 2, 16, 2, 8)
  logits, _, cache, hidden_L = model.module.apply({"params": model.params}, toks[:, :5], None, cache,
                                                  return_layer_hidden=True)
  cache = cache.with_length(jnp.array([5, 4]))
  step = model.module.apply({"params": model.params}, toks[:, 5:], None, cache)
  pending = model.module.apply({"params": model.params}, toks[:, 5:], None, kv_cache.PendingKV.start(cache, 4))
  written = kv_cache.write_pending(cache, pending[2].k_new_LxBxTxAxD, pending[2].v_new_LxBxTxAxD)
  return (api.logits(model, toks), logits, [hidden_L[i] for i in range(model.config.num_layers)], step[0],
          step[2].k_LxBxAxSxD, pending[0], written.v_LxBxAxSxD)


@pytest.mark.parametrize("family", [{}, GEMMA_LIKE, dict(qkv_bias=True, num_layers=3)], ids=["llama", "gemma3", "qwen2"])
def test_scanned_is_the_same_model(family):
  unrolled = testing.tiny_decoder(scan_layers=False, **family)
  scanned = bundle.with_scan_layers(unrolled)
  assert "layers" in scanned.params and "layer_0" not in scanned.params
  assert scanned.params["layers"]["attn"]["q"].shape[0] == unrolled.config.num_layers
  toks = jnp.asarray(np.random.RandomState(0).randint(0, 64, (2, 9)), jnp.int32)
  outs = [_outputs(model, toks) for model in (unrolled, scanned)]
  assert len(jax.tree.leaves(outs[0])) == len(jax.tree.leaves(outs[1])) == 6 + unrolled.config.num_layers
  for a, b in zip(jax.tree.leaves(outs[0]), jax.tree.leaves(outs[1])):
    np.testing.assert_allclose(a, b, atol=1e-4)
  np.testing.assert_allclose(outs[1][3], outs[1][5], atol=1e-4)  # pending == writing, scanned


def test_checkpoints_keep_per_layer_names(tmp_path):
  scanned = testing.tiny_decoder(scan_layers=True)
  checkpoint.save_model(scanned, tmp_path / "m")
  from safetensors import safe_open  # pylint: disable=import-outside-toplevel
  with safe_open(str(tmp_path / "m" / store.WEIGHTS_FILE), "np") as f:
    names = set(f.keys())
  assert "layer_1/attn/q" in names and not any(n.startswith("layers/") for n in names)
  for scan in (True, False):
    loaded = checkpoint.load_model(tmp_path / "m", scan_layers=scan)
    assert loaded.config.scanned == scan
    back = bundle.with_scan_layers(loaded, True)
    for a, b in zip(jax.tree.leaves(back.params), jax.tree.leaves(scanned.params)):
      np.testing.assert_array_equal(a, b)


def _bf16(model):
  """bfloat16 params, compute and KV cache."""
  module = type(model.module)(dataclasses.replace(model.config, dtype="bfloat16", cache_dtype="bfloat16"))
  return model.replace(module=module, params=precision.cast_params(model.params, "bfloat16"))


@pytest.fixture(scope="module")
def demo_scanned():
  """The demo target, scanned and in bfloat16 throughout: one compile per family covers both."""
  return _bf16(bundle.with_scan_layers(stats_util.demo_target()))


@pytest.fixture(scope="module")
def demo_baseline(demo_scanned):
  """Prompts and their greedy autoregressive output, decoded once for every drafter below (a bfloat16
  run of the demo target takes about a second on CPU)."""
  prompts, lengths = stats_util.demo_prompts(3)
  return prompts, lengths, specjax.generate(demo_scanned, prompts, lengths, max_new_tokens=24)


def _drafter(kind, target):
  if kind == "draft_model":
    return specjax.drafters.DraftModel(_bf16(bundle.with_scan_layers(stats_util.demo_drafter_model())))
  if kind == "specinfer":
    small = _bf16(bundle.with_scan_layers(stats_util.demo_drafter_model()))
    return specjax.drafters.SpecInfer(small, children=(1, 2, 1))
  if kind == "table":
    return specjax.drafters.build("table", {}, target)
  if kind == "ngram":
    return specjax.drafters.NGram(3)
  if kind == "mtp":
    return stats_util.demo_mtp()
  if kind == "dflash":
    return stats_util.demo_dflash()
  if kind == "eagle_tree":
    from specjax import tree as tree_lib  # pylint: disable=import-outside-toplevel
    from specjax.drafters.eagle import default_static_paths  # pylint: disable=import-outside-toplevel
    return Eagle(heads.load_head(stats_util.DEMO / "eagle"), paths=tree_lib.parse_chain_paths(default_static_paths(4)))
  assert kind == "medusa"
  from specjax.drafters import medusa  # pylint: disable=import-outside-toplevel
  return medusa.Medusa.create(target, medusa.load_heads(stats_util.DEMO / "medusa"))


@pytest.mark.parametrize("kind", ["draft_model", "specinfer", "ngram", "table", "mtp", "dflash", "eagle_tree", "medusa"])
def test_speculative_equals_autoregressive_on_a_scanned_bf16_target(demo_scanned, demo_baseline, kind):
  target = demo_scanned
  assert target.params["layers"]["attn"]["q"].dtype == jnp.bfloat16
  prompts, lengths, base = demo_baseline
  drafter = _drafter(kind, target)
  gamma = drafter.tree.max_depth if drafter.tree is not None else 4
  out = specjax.speculative_generate(target, drafter, prompts, lengths, gamma=gamma, max_new_tokens=24)
  np.testing.assert_array_equal(out.tokens, base.tokens)
  assert out.stats["tokens_per_iteration"] > 1.3, out.stats  # drafts are accepted: equality means something


def _hlo_chars(num_layers, scan):
  model = testing.tiny_decoder(num_layers=num_layers, scan_layers=scan)
  prompts = jnp.ones((1, 4), jnp.int32)
  fn = jax.jit(lambda m, p: api.start(m, p, jnp.array([4]), 12))  # the cache: every layer writes it
  return len(fn.lower(model, prompts).as_text())


def test_program_does_not_grow_with_depth():
  scanned = _hlo_chars(8, True) / _hlo_chars(2, True)
  unrolled = _hlo_chars(8, False) / _hlo_chars(2, False)
  assert scanned < 1.05, scanned
  assert unrolled > 2.0, unrolled  # the measure sees depth when the layers are unrolled


def test_scanned_on_a_mesh():
  model = testing.tiny_decoder(scan_layers=True, num_layers=3)
  mesh = sharding.make_mesh("2x4")
  prompts, lengths = stats_util.prompts(4)
  base = specjax.generate(model, prompts, lengths, max_new_tokens=8)
  out = specjax.generate(model, prompts, lengths, max_new_tokens=8, mesh=mesh)
  np.testing.assert_array_equal(out.tokens, base.tokens)
  placed = sharding.shard(model, mesh)
  spec = placed.params["layers"]["attn"]["q"].sharding.spec
  assert spec[0] is None and spec[2] is not None, spec  # [L, E, H, D]: layers replicated, query heads split


def test_run_config_scan_layers():
  import ml_collections  # pylint: disable=import-outside-toplevel
  from specjax import experiment  # pylint: disable=import-outside-toplevel
  config = ml_collections.ConfigDict({"target": {"checkpoint": "nowhere", "scan_layers": "yes"},
                                      "drafter": {"kind": "ngram"}})
  with pytest.raises(ValueError, match="scan_layers='yes'"):
    experiment.normalize(config)
  for value, scanned in (("on", True), ("off", False)):
    model, _ = experiment.load_model({"checkpoint": "demo/drafter", "scan_layers": value}, seed=0)
    assert model.config.scanned == scanned and (("layers" in model.params) == scanned)


def test_scan_layers_none_follows_the_environment(monkeypatch):
  monkeypatch.setenv("SPECJAX_SCAN_LAYERS", "on")
  assert "layers" in testing.tiny_decoder().params
  monkeypatch.setenv("SPECJAX_SCAN_LAYERS", "off")
  assert "layer_0" in testing.tiny_decoder().params
  assert testing.tiny_decoder(scan_layers=True).config.scanned  # an explicit value wins
  monkeypatch.setenv("SPECJAX_SCAN_LAYERS", "sometimes")
  with pytest.raises(ValueError, match="SPECJAX_SCAN_LAYERS='sometimes'"):
    testing.tiny_decoder()
