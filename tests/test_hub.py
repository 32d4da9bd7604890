"""Hugging Face hub ids in load_pretrained, read from a cache laid out as huggingface_hub writes it
(``models--org--name/{blobs,snapshots,refs}``), offline: nothing here touches the network."""
import hashlib
import json
import os
import sys

import numpy as np
import pytest

import specjax
from specjax import hub, loading
from specjax.checkpoint import CheckpointError
from test_loading import V, _hf_folder, _hf_tensors  # tests/ is on sys.path under pytest

pytest.importorskip("huggingface_hub", reason="hub ids need `pip install huggingface_hub`")
tokenizers = pytest.importorskip("tokenizers", reason="HFTokenizer needs `pip install tokenizers`")
COMMIT, TAGGED = "a" * 40, "b" * 40


def _tiny_hf_llama(folder, seed):
  """A 2-layer, 96-token Llama folder with a word-level tokenizer of the same vocabulary."""
  _hf_folder(folder, _hf_tensors(seed))
  words = ["<unk>", "<s>", "</s>"] + [f"w{i}" for i in range(V - 3)]
  tok = tokenizers.Tokenizer(tokenizers.models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="<unk>"))
  tok.pre_tokenizer = tokenizers.pre_tokenizers.Whitespace()
  tok.save(str(folder / "tokenizer.json"))
  (folder / "tokenizer_config.json").write_text(json.dumps({"bos_token": "<s>", "eos_token": "</s>"}))
  (folder / "pytorch_model.bin").write_bytes(b"not read")  # in the repo, not in allow_patterns
  return folder


def _add_snapshot(cache, repo, commit, folder, ref=None):
  """``folder``'s files as huggingface_hub stores them: content-addressed blobs, a snapshot of
  relative symlinks per commit, and refs/<branch or tag> holding the commit hash."""
  storage = cache / ("models--" + repo.replace("/", "--"))
  (storage / "blobs").mkdir(parents=True, exist_ok=True)
  snap = storage / "snapshots" / commit
  snap.mkdir(parents=True)
  for f in sorted(folder.iterdir()):
    data = f.read_bytes()
    sha = hashlib.sha256(data).hexdigest()
    (storage / "blobs" / sha).write_bytes(data)
    os.symlink(os.path.join("..", "..", "blobs", sha), snap / f.name)
  if ref:
    (storage / "refs").mkdir(exist_ok=True)
    (storage / "refs" / ref).write_text(commit)  # no trailing newline, as huggingface_hub writes it
  return snap


@pytest.fixture
def cache(tmp_path, monkeypatch):
  cache = tmp_path / "hub"
  _add_snapshot(cache, "org/name", COMMIT, _tiny_hf_llama(tmp_path / "main", seed=0), ref="main")
  _add_snapshot(cache, "org/name", TAGGED, _tiny_hf_llama(tmp_path / "v1", seed=1), ref="v1")
  monkeypatch.setenv("HF_HUB_CACHE", str(cache))
  monkeypatch.setenv("HF_HUB_OFFLINE", "1")
  monkeypatch.chdir(tmp_path)  # relative paths below are looked up here first
  return cache


def _logits(model):
  toks = np.random.RandomState(1).randint(0, V, (2, 12))
  return np.asarray(specjax.logits(model, toks))


def test_hub_id_loads_the_cached_snapshot(cache, tmp_path):
  model, tok = loading.load_pretrained("org/name")
  direct, direct_tok = loading.load_pretrained(tmp_path / "main")
  np.testing.assert_array_equal(_logits(model), _logits(direct))
  assert tok.encode("w1 w2 w90") == direct_tok.encode("w1 w2 w90") and tok.eos_id == 2
  assert hub.resolve("org/name") == cache / "models--org--name" / "snapshots" / COMMIT


def test_revision_after_at(cache, tmp_path):
  v1 = _logits(loading.load_pretrained(tmp_path / "v1")[0])
  assert np.abs(v1 - _logits(loading.load_pretrained("org/name")[0])).max() > 1e-2  # the two commits differ
  np.testing.assert_array_equal(_logits(loading.load_pretrained("org/name@v1")[0]), v1)
  np.testing.assert_array_equal(_logits(loading.load_pretrained(f"org/name@{TAGGED}")[0]), v1)


def test_id_not_in_the_cache_names_id_cache_and_remedy(cache):
  with pytest.raises(CheckpointError) as e:
    loading.load_pretrained("org/missing")
  msg = str(e.value)
  assert "'org/missing'" in msg and str(cache) in msg and "hf download org/missing" in msg and "\n" not in msg
  with pytest.raises(CheckpointError, match=r"hf download org/name --revision v2"):
    loading.load_pretrained("org/name@v2")


def test_existing_folder_named_like_an_id_is_a_path(cache, tmp_path):
  local = _tiny_hf_llama(tmp_path / "org" / "name", seed=2)  # shadows the cached hub id
  np.testing.assert_array_equal(_logits(loading.load_pretrained("org/name")[0]),
                                _logits(loading.load_pretrained(local)[0]))
  _tiny_hf_llama(tmp_path / "a" / "b", seed=3)  # not in the cache: as a hub id, offline, it would fail
  assert loading.load_pretrained("a/b")[0].vocab_size == V


def test_parse():
  assert hub.parse("org/name") == ("org/name", None, None)
  assert hub.parse("org/name@v1.0") == ("org/name", "v1.0", None)
  assert hub.parse("org/name@refs/pr/3") == ("org/name", "refs/pr/3", None)
  assert hub.parse("org/name/q8/m.gguf") == ("org/name", None, "q8/m.gguf")
  assert hub.parse("org/name@main/m.gguf") == ("org/name", "main", "m.gguf")
  for not_an_id in ("name", "/abs/path", "./rel/path", "~/x/y", "a/b/c", "dir/model.gguf", "a--b/c", "a/b..c"):
    assert hub.parse(not_an_id) is None, not_an_id


def test_env_is_read_at_each_call(monkeypatch, tmp_path):
  monkeypatch.delenv("HF_HUB_CACHE", raising=False)
  monkeypatch.delenv("HUGGINGFACE_HUB_CACHE", raising=False)
  monkeypatch.setenv("HF_HOME", str(tmp_path / "home"))
  assert hub.cache_folder() == tmp_path / "home" / "hub"
  monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "c"))
  assert hub.cache_folder() == tmp_path / "c"


def test_missing_huggingface_hub_names_the_package(monkeypatch):
  monkeypatch.setitem(sys.modules, "huggingface_hub", None)
  with pytest.raises(ImportError, match="pip install huggingface_hub"):
    loading.load_pretrained("org/name")
