"""A new decoder-only architecture is one declaration (:mod:`specjax.models.families`).

Declared here only, an alias of Llama with q/k norms (its own architecture name, ``model_type``,
context key and GGUF name, whose files store norms as ``1 + w``) imports from an HF folder and a
GGUF file, and preflight reads its cache shape and context, with no other edit. Undeclared, each
reader refuses it by name, listing what it supports.
"""
import dataclasses
import json

import jax
import numpy as np
import pytest
from flax import traverse_util

import specjax
from specjax import gguf_import, hf_export, hf_import, preflight
from specjax.checkpoint import CheckpointError
from specjax.hf_import import decoders
from specjax.models import families, store

ALIAS = families.Architecture(
    ("TinyAliasForCausalLM",), "tiny_alias", decoders.llama, dict(qk_norm=True),
    hf_shape=families.HFShape(context="n_positions"),
    gguf=families.GGUF("tinyalias", norm_offset=1.0))
FIELDS = dict(family="decoder", vocab_size=96, d_model=32, num_layers=2, num_heads=4, num_kv_heads=2, head_dim=8,
              mlp_dim=64, qk_norm=True, tie_embeddings=False, norm_eps=2.0 ** -16, scan_layers=False)
CONTEXT = 96


@pytest.fixture
def declared():
  """The alias declared with the decoder family for one test, the shipped declaration restored after."""
  decoder = families.family("decoder")
  families.declare(dataclasses.replace(decoder, architectures=decoder.architectures + (ALIAS,)))
  try:
    yield
  finally:
    families.declare(decoder)


def _flat(model) -> dict:
  return traverse_util.flatten_dict(store.per_layer_params(jax.device_get(model.params)), sep="/")


@pytest.fixture(scope="module")
def model():
  """A random decoder with q/k norms, its norm scales away from 1 so a missed offset shows."""
  m = families.from_fields(FIELDS, seed=0)
  rng = np.random.RandomState(0)
  flat = {n: (1.0 + 0.3 * rng.randn(*p.shape)).astype(np.float32) if n.endswith("/scale") else p
          for n, p in _flat(m).items()}
  return m.replace(params=traverse_util.unflatten_dict(flat, sep="/"))


@pytest.fixture(scope="module")
def hf_folder(model, tmp_path_factory):
  """The model as an HF folder of the alias: the Llama export plus the q/k norms, its context under its own key."""
  from safetensors.numpy import load_file, save_file  # pylint: disable=import-outside-toplevel
  folder = hf_export.to_hf_llama(model, tmp_path_factory.mktemp("alias"), max_position_embeddings=4096)
  tensors = load_file(str(folder / "model.safetensors"))
  p = jax.device_get(model.params)
  for i in range(model.config.num_layers):
    for n in ("q_norm", "k_norm"):
      tensors[f"model.layers.{i}.self_attn.{n}.weight"] = np.asarray(p[f"layer_{i}"]["attn"][n]["scale"], np.float32)
  save_file(tensors, str(folder / "model.safetensors"))
  cfg = json.loads((folder / "config.json").read_text())
  cfg.update(architectures=["TinyAliasForCausalLM"], model_type="tiny_alias", n_positions=CONTEXT)
  (folder / "config.json").write_text(json.dumps(cfg))
  return folder


_GGUF_PART = {"self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v",
              "self_attn.o_proj": "attn_output", "self_attn.q_norm": "attn_q_norm",
              "self_attn.k_norm": "attn_k_norm", "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up",
              "mlp.down_proj": "ffn_down", "input_layernorm": "attn_norm", "post_attention_layernorm": "ffn_norm"}
_GGUF_GLOBAL = {"model.embed_tokens.weight": "token_embd.weight", "model.norm.weight": "output_norm.weight",
                "lm_head.weight": "output.weight"}


@pytest.fixture(scope="module")
def gguf_file(model, hf_folder, tmp_path_factory):
  """The model as a GGUF of the alias: HF's Q/K row order, norms stored as ``1 + w``."""
  gguf = pytest.importorskip("gguf", reason="GGUF reading needs `pip install gguf`")
  from safetensors.numpy import load_file  # pylint: disable=import-outside-toplevel
  cfg = model.config
  path = tmp_path_factory.mktemp("alias_gguf") / "alias.gguf"
  w = gguf.GGUFWriter(str(path), "tinyalias")
  w.add_block_count(cfg.num_layers)
  w.add_embedding_length(cfg.d_model)
  w.add_feed_forward_length(cfg.mlp_dim)
  w.add_head_count(cfg.num_heads)
  w.add_head_count_kv(cfg.num_kv_heads)
  w.add_layer_norm_rms_eps(cfg.norm_eps)
  w.add_rope_freq_base(cfg.rope_theta)
  for name, arr in load_file(str(hf_folder / "model.safetensors")).items():
    if name in _GGUF_GLOBAL:
      gname = _GGUF_GLOBAL[name]
    else:
      layer, part = name.split(".")[2], ".".join(name.split(".")[3:-1])
      gname = f"blk.{layer}.{_GGUF_PART[part]}.weight"
    w.add_tensor(gname, arr + 1.0 if name.endswith("norm.weight") else arr)
  w.write_header_to_file()
  w.write_kv_data_to_file()
  w.write_tensors_to_file()
  w.close()
  return path


def _assert_same_model(imported, model):
  assert imported.config.qk_norm
  want, got = _flat(model), _flat(imported)
  assert sorted(got) == sorted(want)
  for name in want:
    np.testing.assert_allclose(got[name], want[name], atol=1e-6, err_msg=name)
  toks = np.random.RandomState(1).randint(0, FIELDS["vocab_size"], (2, 9))
  np.testing.assert_allclose(specjax.logits(imported, toks), specjax.logits(model, toks), atol=1e-5)


def test_undeclared_architecture_is_refused_by_name(hf_folder, gguf_file):
  assert "TinyAliasForCausalLM" not in hf_import.IMPORTERS
  with pytest.raises(CheckpointError, match=r"unsupported architecture 'TinyAliasForCausalLM'; "
                                            r"supported: \[.*'LlamaForCausalLM'"):
    hf_import.from_hf(hf_folder)
  with pytest.raises(CheckpointError, match=r"unsupported GGUF architecture 'tinyalias'; supported: \[.*'llama'"):
    gguf_import.from_gguf(gguf_file)
  # preflight reads an undeclared config.json as a decoder's: the context from max_position_embeddings
  assert preflight.describe_checkpoint(str(hf_folder)).context == 4096


def test_declared_alias_imports_from_hf(declared, hf_folder, model):
  assert "TinyAliasForCausalLM" in hf_import.IMPORTERS
  assert "tiny_alias" in families.family("decoder").hf_model_types
  _assert_same_model(hf_import.from_hf(hf_folder), model)


def test_declared_alias_imports_from_gguf(declared, gguf_file, model):
  assert gguf_import.ARCHITECTURES["tinyalias"] == ("TinyAliasForCausalLM", "tiny_alias")
  _assert_same_model(gguf_import.from_gguf(gguf_file), model)


def test_preflight_reads_the_declared_shape_fields(declared, hf_folder, model):
  info = preflight.describe_checkpoint(str(hf_folder))
  cfg = model.config
  assert (info.layers, info.kv_heads, info.head_dim) == (cfg.num_layers, cfg.num_kv_heads, cfg.head_dim)
  assert (info.context, info.context_source) == (CONTEXT, f"{hf_folder}/config.json n_positions")
  assert not info.encoder and info.params == model.num_params


def test_an_architecture_name_belongs_to_one_family():
  t5 = families.family("t5")
  llama = families.hf_architectures()["LlamaForCausalLM"]
  with pytest.raises(ValueError, match="family 't5' declares HF architecture 'LlamaForCausalLM', which family "
                                       "'decoder' imports"):
    families.declare(dataclasses.replace(t5, architectures=t5.architectures + (llama,)))
  assert families.family("t5") is t5
