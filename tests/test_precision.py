"""Storage precision (specjax.precision): bfloat16 weights, float32 norms, a bfloat16 KV cache, exactness kept.

Loads are compared exactly with the bfloat16-rounded float32 values; greedy speculative output
with bfloat16 params, compute and cache must equal greedy autoregressive output of the same model.
"""
import collections

import jax
import jax.numpy as jnp
import ml_dtypes
import ml_collections
import numpy as np
import pytest

import specjax
from specjax import checkpoint, experiment, precision, preflight, testing
from specjax.hf_import import from_hf
from specjax.models import api

BF16 = np.dtype(ml_dtypes.bfloat16)


def _kinds(params):
  return collections.Counter((np.ndim(x) >= 2, str(x.dtype)) for x in jax.tree_util.tree_leaves(params))


def test_resolve_names_and_refuses_unknown_dtypes():
  assert precision.resolve("bfloat16") == "bfloat16" and precision.resolve("float32") == "float32"
  assert precision.resolve("auto") == precision.resolve(None) == ("float32" if jax.default_backend() == "cpu"
                                                                 else "bfloat16")
  with pytest.raises(ValueError, match="param_dtype='fp8'"):
    precision.resolve("fp8")


def test_bundle_loads_in_the_chosen_storage_dtype(tmp_path):
  model = testing.tiny_decoder(vocab_size=32)
  checkpoint.save_model(model, tmp_path / "m")
  f32 = checkpoint.load_model(tmp_path / "m", param_dtype="float32")
  bf16 = checkpoint.load_model(tmp_path / "m", param_dtype="bfloat16")
  assert set(_kinds(f32.params)) == {(True, "float32"), (False, "float32")}
  assert set(_kinds(bf16.params)) == {(True, "bfloat16"), (False, "float32")}  # norms stay float32
  for a, b in zip(jax.tree_util.tree_leaves(f32.params), jax.tree_util.tree_leaves(bf16.params)):
    want = np.asarray(a).astype(BF16) if np.ndim(a) >= 2 else np.asarray(a)
    np.testing.assert_array_equal(np.asarray(b), want)


def test_hf_folder_loads_each_tensor_in_the_storage_dtype(tmp_path):
  import test_hf_import as hf  # pylint: disable=import-outside-toplevel  (its numpy-only writer)
  t = hf._llama_tensors()
  folder = hf._write(tmp_path / "llama", hf._llama_cfg(), t)
  model = from_hf(folder, param_dtype="bfloat16")
  assert set(_kinds(model.params)) == {(True, "bfloat16"), (False, "float32")}
  np.testing.assert_array_equal(np.asarray(model.params["lm_head"]), t["lm_head.weight"].T.astype(BF16))
  np.testing.assert_array_equal(np.asarray(model.params["final_norm"]["scale"]), t["model.norm.weight"])


def test_cache_dtype_sets_the_kv_cache():
  model = testing.tiny_decoder(vocab_size=32, cache_dtype="bfloat16")
  cache, _, _ = api.start(model, jnp.ones((1, 4), jnp.int32), jnp.array([4]), 16)
  assert cache.k_LxBxAxSxD.dtype == jnp.bfloat16
  assert api.start(testing.tiny_decoder(vocab_size=32), jnp.ones((1, 4), jnp.int32), jnp.array([4]),
                   16)[0].k_LxBxAxSxD.dtype == jnp.float32


def test_bf16_speculative_equals_bf16_autoregressive():
  import dataclasses  # pylint: disable=import-outside-toplevel
  target = testing.tiny_decoder(vocab_size=64, seed=0)
  draft = testing.perturbed(target, 0.02, seed=1)

  def bf16(m):
    module = type(m.module)(dataclasses.replace(m.config, dtype="bfloat16", cache_dtype="bfloat16"))
    return m.replace(module=module, params=precision.cast_params(m.params, "bfloat16"))

  target, draft = bf16(target), bf16(draft)
  prompts = np.array([[5, 9, 2, 7, 1, 3], [4, 4, 8, 0, 0, 0]], np.int32)
  lengths = np.array([6, 3])
  base = specjax.generate(target, prompts, lengths, max_new_tokens=24)
  spec = specjax.speculative_generate(target, specjax.drafters.DraftModel(draft), prompts, lengths, gamma=3,
                                      max_new_tokens=24)
  np.testing.assert_array_equal(spec.tokens, base.tokens)
  assert min(spec.stats["accepted_per_position"]) > 0  # every draft depth was accepted somewhere


def test_memory_estimate_counts_the_storage_and_cache_dtypes():
  fields = dict(family="decoder", vocab_size=1000, d_model=64, num_layers=2, num_heads=4, num_kv_heads=2,
                head_dim=16, mlp_dim=128)
  f32 = preflight.describe(dict(fields, param_dtype="float32"))
  bf16 = preflight.describe(dict(fields, param_dtype="bfloat16", cache_dtype="bfloat16"))
  assert bf16.param_bytes() * 2 == f32.param_bytes() == f32.params * 4
  assert bf16.kv_bytes(2, 64, 8) * 2 == f32.kv_bytes(2, 64, 8)
  with pytest.raises(preflight.NotEnoughMemory, match="bfloat16 params"):
    preflight.check_memory([("target", bf16)], 1, 64, 8, available=(1000, "this test"))


def test_a_bad_param_dtype_in_a_run_config_is_an_error_before_loading():
  config = ml_collections.ConfigDict({"target": {"checkpoint": "nowhere", "param_dtype": "half"},
                                      "drafter": {"kind": "ngram"}})
  with pytest.raises(ValueError, match="param_dtype='half'"):
    experiment.normalize(config)


def test_random_init_target_is_cast_to_its_param_dtype():
  model, _ = experiment.load_model(dict(family="decoder", vocab_size=32, d_model=32, num_layers=1, num_heads=2,
                                        num_kv_heads=2, head_dim=16, mlp_dim=64, param_dtype="bfloat16"), 0)
  assert set(_kinds(model.params)) == {(True, "bfloat16"), (False, "float32")}
