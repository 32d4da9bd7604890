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


@pytest.mark.parametrize("frozen_head", [True, False])
def test_draft_lm_export_gives_transformers_our_truncated_logits(tmp_path, frozen_head):
  torch = pytest.importorskip("torch")
  pytest.importorskip("transformers")
  from specjax.hf_export import draft_lm_to_hf, load_draft_lm_torch
  from specjax.models import draft_lm
  target = specjax.testing.tiny_decoder(vocab_size=72, num_kv_heads=2, tie_embeddings=False)
  subset = np.array([3, 9, 0, 40, 71, 15, 22, 8])
  cfg = draft_lm.DraftLMConfig(vocab_size=72, embed_dim=target.config.d_model, out_vocab=len(subset), d_model=16,
                               num_layers=2, num_heads=2, num_kv_heads=1, head_dim=8, mlp_dim=24,
                               frozen_head=frozen_head, norm_eps=1e-5)
  small = draft_lm.init(cfg, target, seed=2, subset_K=subset)
  rs = np.random.RandomState(1)  # norms away from 1: a dropped norm scale shows
  small = small.replace(params=jax.tree_util.tree_map(lambda x: x + 0.1 * rs.randn(*x.shape).astype(np.float32),
                                                      small.params))
  hf = load_draft_lm_torch(draft_lm_to_hf(small, subset, tmp_path / "hf"))
  ids = rs.randint(0, 72, (2, 7))
  with torch.no_grad():
    got_BxTxV = hf(torch.tensor(ids)).logits.numpy()
  want_BxTxK = np.asarray(small.module.apply({"params": small.params}, ids)[0])
  np.testing.assert_allclose(got_BxTxV[..., subset], want_BxTxK, atol=2e-4, rtol=2e-4)
  outside = np.setdiff1d(np.arange(72), subset)
  assert got_BxTxV[..., outside].max() < -1e8  # probability 0 outside the subset, as in specjax
  with pytest.raises(ValueError, match="out_vocab=8"):
    draft_lm_to_hf(small, subset[:5], tmp_path / "bad")
