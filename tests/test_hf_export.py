"""specjax.hf_export.to_hf_llama: the inverse of from_hf's Llama import, and parity with transformers."""
import json

import jax
import numpy as np
import pytest

import specjax
from specjax.hf_export import to_hf_llama
from specjax.hf_import import from_hf


@pytest.mark.parametrize("tied, kv_heads", [(True, 4), (False, 2)])
def test_round_trip_is_exact(tmp_path, tied, kv_heads):
  model = specjax.testing.tiny_decoder(vocab_size=72, num_kv_heads=kv_heads, tie_embeddings=tied, rope_theta=5e3,
                                       norm_eps=1e-5)
  rs = np.random.RandomState(0)  # norms away from 1 and no two tensors alike: a swap or bad transpose shows
  model = model.replace(params=jax.tree_util.tree_map(lambda x: x + 0.1 * rs.randn(*x.shape).astype(np.float32),
                                                      model.params))
  back = from_hf(to_hf_llama(model, tmp_path / "hf"))
  assert back.config == model.config
  jax.tree_util.tree_map(np.testing.assert_array_equal, back.params, model.params)
  cfg = json.loads((tmp_path / "hf" / "config.json").read_text())
  assert cfg["architectures"] == ["LlamaForCausalLM"] and cfg["tie_word_embeddings"] == tied


def test_non_decoder_is_refused(tmp_path):
  with pytest.raises(ValueError, match="decoder-only.*T5"):
    to_hf_llama(specjax.testing.tiny_t5(), tmp_path)


def test_transformers_loads_the_export_with_equal_logits(tmp_path):
  torch = pytest.importorskip("torch")
  transformers = pytest.importorskip("transformers")
  model = specjax.testing.tiny_decoder(vocab_size=72, num_kv_heads=2, tie_embeddings=False)
  hf = transformers.LlamaForCausalLM.from_pretrained(to_hf_llama(model, tmp_path / "hf")).eval()
  ids = np.random.RandomState(0).randint(0, 72, (2, 9))
  with torch.no_grad():
    want = hf(torch.tensor(ids)).logits.numpy()
  np.testing.assert_allclose(np.asarray(specjax.logits(model, ids)), want, atol=2e-4, rtol=2e-4)
