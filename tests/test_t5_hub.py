"""The paper-size T5 config's hub checkpoints, offline: a fake huggingface_hub cache holding tiny
transformers-written T5 checkpoints under the config's hub ids runs the command end to end, and an
empty cache with HF_HUB_OFFLINE=1 ends it in one ``error:`` line before anything loads."""
import importlib.util
import json
import os
import pathlib
import subprocess
import sys
import time

import jax
import numpy as np
import pytest

import specjax
from specjax import experiment, hub, loading, preflight
from specjax.checkpoint import CheckpointError
from test_hub import _add_snapshot  # tests/ is on sys.path under pytest

pytest.importorskip("huggingface_hub", reason="hub ids need `pip install huggingface_hub`")
tokenizers = pytest.importorskip("tokenizers", reason="HFTokenizer needs `pip install tokenizers`")
torch = pytest.importorskip("torch", reason="the checkpoints are written by transformers (pip install .[hf])")
transformers = pytest.importorskip("transformers", reason="the checkpoints are written by transformers")

REPO = pathlib.Path(__file__).resolve().parent.parent
CONFIG = REPO / "configs" / "t5xxl_small.py"
V = 96
COMMIT_T, COMMIT_D, COMMIT_V = "c" * 40, "d" * 40, "e" * 40
WORDS = ["<pad>", "</s>", "<unk>"] + "translate English to German : The house is wonderful .".split()


def _config(arg=""):
  spec = importlib.util.spec_from_file_location("t5xxl_small", CONFIG)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module, module.get_config(arg)


def _tiny_t5_folder(folder, ff, tied, seed, noise=0.0):
  """A transformers-written T5 (``save_pretrained``) with a word-level tokenizer of T5's special ids;
  ``noise``: relative Gaussian noise on every weight (a drafter that mostly agrees with seed's model)."""
  cfg = transformers.T5Config(vocab_size=V, d_model=32, d_kv=8, d_ff=48, num_layers=2, num_decoder_layers=2,
                              num_heads=4, relative_attention_num_buckets=16, relative_attention_max_distance=12,
                              feed_forward_proj=ff, tie_word_embeddings=tied, dropout_rate=0.0,
                              decoder_start_token_id=0, pad_token_id=0, eos_token_id=1)
  torch.manual_seed(seed)
  m = transformers.T5ForConditionalGeneration(cfg).eval()
  with torch.no_grad():
    if not tied:
      m.lm_head.weight = torch.nn.Parameter(torch.randn(V, 32))
    gen = torch.Generator().manual_seed(seed + 100)
    for name, p in m.named_parameters():  # sharper than init: varied greedy tokens
      if p.ndim == 2 and "relative_attention_bias" not in name:
        p.mul_(8.0)
      p.mul_(1 + noise * torch.randn(p.shape, generator=gen))
  m.save_pretrained(folder, safe_serialization=True)
  vocab = {w: i for i, w in enumerate(WORDS + [f"w{i}" for i in range(V - len(WORDS))])}
  tok = tokenizers.Tokenizer(tokenizers.models.WordLevel(vocab, unk_token="<unk>"))
  tok.pre_tokenizer = tokenizers.pre_tokenizers.Whitespace()
  tok.save(str(folder / "tokenizer.json"))
  (folder / "tokenizer_config.json").write_text(json.dumps({"eos_token": "</s>", "pad_token": "<pad>"}))
  return folder


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
  """The original T5 (ReLU, tied head, as t5-small ... t5-11b) as target and, perturbed, as drafter;
  v1.1 (FLAN-T5's architecture) as a third id. Parity of both with transformers: test_hf_import."""
  root = tmp_path_factory.mktemp("t5_hub")
  return {"target": _tiny_t5_folder(root / "target", "relu", True, seed=0),
          "drafter": _tiny_t5_folder(root / "drafter", "relu", True, seed=0, noise=0.002),
          "v1_1": _tiny_t5_folder(root / "v1_1", "gated-gelu", False, seed=1)}


@pytest.fixture
def cache(folders, tmp_path, monkeypatch):
  """huggingface_hub's cache layout under HF_HOME (no HF_HUB_CACHE), holding the config's two ids."""
  module, _ = _config()
  home = tmp_path / "hf_home"
  _add_snapshot(home / "hub", module.TARGET_ID, COMMIT_T, folders["target"], ref="main")
  _add_snapshot(home / "hub", module.DRAFTER_ID, COMMIT_D, folders["drafter"], ref="main")
  _add_snapshot(home / "hub", "google/flan-t5-base", COMMIT_V, folders["v1_1"], ref="main")
  for var in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE"):
    monkeypatch.delenv(var, raising=False)
  monkeypatch.setenv("HF_HOME", str(home))
  monkeypatch.setenv("HF_HUB_OFFLINE", "1")
  monkeypatch.chdir(tmp_path)
  return home / "hub"


def test_config_names_checkpoints_that_translate():
  module, c = _config()
  assert (c.target.checkpoint, c.drafter.checkpoint) == (module.TARGET_ID, module.DRAFTER_ID)
  assert {module.TARGET_ID, module.DRAFTER_ID} == {"google/flan-t5-xxl", "google/flan-t5-small"}
  assert loading.hub_id(c.target.checkpoint) and loading.hub_id(c.drafter.checkpoint)
  assert c.prompt.startswith("translate English to German: ")
  assert _config("cpu")[1].target.checkpoint == "t5_ende/target"  # a shipped bundle, not a hub id
  assert not loading.hub_id("t5_ende/target")


def test_hub_ids_load_from_the_cache(cache, folders):
  module, _ = _config()
  assert hub.cached(module.TARGET_ID) == cache / "models--google--flan-t5-xxl" / "snapshots" / COMMIT_T
  target, tok = loading.load_pretrained(module.TARGET_ID)
  direct, _ = loading.load_pretrained(folders["target"])
  assert target.config.tie_embeddings and not target.config.gated_mlp  # the original T5, as imported
  dec, enc = np.array([[0, 5, 9]]), np.array([[4, 5, 6, 7, 1]])
  np.testing.assert_array_equal(np.asarray(specjax.logits(target, dec, encoder_tokens=enc)),
                                np.asarray(specjax.logits(direct, dec, encoder_tokens=enc)))
  assert tok.encode("The house")[:2] == [WORDS.index("The"), WORDS.index("house")]
  info = preflight.describe_checkpoint(module.DRAFTER_ID)  # sizes read from the cached snapshot
  assert info is not None and info.encoder and info.layers == 2 and info.params > 0
  v1_1, _ = loading.load_pretrained("google/flan-t5-base")
  assert v1_1.config.gated_mlp and not v1_1.config.tie_embeddings and "lm_head" in v1_1.params


def test_command_runs_the_cached_checkpoints(cache):
  """The config as a TPU VM runs it (its hub ids), on the cached tiny pair: speculative greedy output
  equals the target's own greedy decoding, token for token."""
  _, c = _config()
  c.target.dtype, c.drafter.model.dtype = "float32", "float32"
  c.max_new_tokens, c.repeats, c.adaptive, c.mesh = 8, 1, False, ""
  got = {}
  summary = experiment.run(c, verbose=False, outputs=lambda prompts, lengths, spec, *_: got.update(
      prompts=prompts, lengths=lengths, spec=spec))
  assert summary["target"] == "google/flan-t5-xxl" and summary["num_prompts"] == 1
  target, _ = loading.load_pretrained("google/flan-t5-xxl", dtype="float32")
  want = specjax.generate(target, got["prompts"], got["lengths"], max_new_tokens=8, eos_id=1)
  n = int(want.lengths[0])
  assert len(set(np.asarray(want.tokens)[0, :n].tolist())) > 2  # varied: equality is not one repeated token
  np.testing.assert_array_equal(np.asarray(got["spec"].tokens)[0, :n], np.asarray(want.tokens)[0, :n])
  assert 0 < summary["alpha"] < 1  # drafts were accepted and rejected


def test_only_the_missing_id_is_named(cache, folders):
  _, c = _config()
  c.drafter.checkpoint = "google/not-cached"
  with pytest.raises(CheckpointError) as e:
    experiment.fetch_hub_checkpoints(c, verbose=False)
  msg = str(e.value)
  assert "google/not-cached (drafter)" in msg and "flan-t5-xxl" not in msg and "\n" not in msg
  assert "--config.drafter.checkpoint=FOLDER" in msg and "--config.target.checkpoint" not in msg
  assert "HF_HUB_OFFLINE is set" in msg and str(cache) in msg
  c.drafter.checkpoint = str(folders["drafter"])  # a local folder is never fetched
  experiment.fetch_hub_checkpoints(c, verbose=False)


def test_offline_empty_cache_is_one_error_line_before_loading(tmp_path):
  env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "HUGGINGFACE_"))}
  env.update(HF_HOME=str(tmp_path / "empty"), HF_HUB_OFFLINE="1", PYTHONPATH=str(REPO), JAX_PLATFORMS="cpu",
             SPECJAX_CACHE=str(tmp_path / "specjax"))
  start = time.time()
  out = subprocess.run([sys.executable, "-m", "specjax.run", f"--config={CONFIG}"], cwd=tmp_path, env=env,
                       capture_output=True, text=True, timeout=300, check=False)
  seconds = time.time() - start
  assert out.returncode == 2, out.stderr
  lines = out.stderr.strip().splitlines()
  assert len(lines) == 1 and lines[0].startswith("error: "), out.stderr
  for text in ("google/flan-t5-xxl", "google/flan-t5-small", "--config.target.checkpoint=FOLDER",
               "--config.drafter.checkpoint=FOLDER", "--dry_run", "HF_HUB_OFFLINE", "hf download google/flan-t5-xxl",
               str(tmp_path / "empty" / "hub")):
    assert text in lines[0], text
  assert "loading" not in out.stdout and "compil" not in out.stdout  # stopped before any load or compile
  assert seconds < 60, seconds  # import time and two cache look-ups; no compile
