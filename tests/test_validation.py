"""Bad input gets a clear error naming the value, raised before anything compiles."""
import subprocess
import sys

import numpy as np
import pytest

import specjax
from specjax import checkpoint, testing

V = 32


@pytest.fixture(scope="module")
def target():
  return testing.tiny_decoder(V, seed=0)


PROMPTS, LENGTHS = np.ones((2, 4), np.int32), np.array([4, 2])


@pytest.mark.parametrize("gamma", [0, -1, 1.5, True])
def test_gamma_below_one(target, gamma):
  with pytest.raises(ValueError, match=f"gamma must be an integer >= 1, got {gamma!r}"):
    specjax.speculative_generate(target, specjax.drafters.NGram(2), PROMPTS, LENGTHS, gamma=gamma,
                                 max_new_tokens=4)


def test_prompt_longer_than_cache(target):
  with pytest.raises(ValueError, match=r"cache too small: max_len=8.*need 13"):
    specjax.speculative_generate(target, specjax.drafters.NGram(2), PROMPTS, LENGTHS, gamma=4,
                                 max_new_tokens=4, max_len=8)
  with pytest.raises(ValueError, match=r"cache too small: max_len=6"):
    specjax.generate(target, PROMPTS, LENGTHS, max_new_tokens=4, max_len=6)


def test_vocab_mismatch(target):
  other = testing.tiny_decoder(V + 8, seed=1)
  with pytest.raises(ValueError, match=rf"drafter vocab_size={V + 8} differs from target vocab_size={V}"):
    specjax.speculative_generate(target, specjax.drafters.DraftModel(other), PROMPTS, LENGTHS, gamma=2,
                                 max_new_tokens=4)


def test_unknown_drafter(target):
  with pytest.raises(TypeError, match="unknown drafter 'medusa-ish'"):
    specjax.speculative_generate(target, "medusa-ish", PROMPTS, LENGTHS, gamma=2, max_new_tokens=4)


def test_empty_prompt(target):
  with pytest.raises(ValueError, match=r"empty prompt: prompt_lengths\[1\] = 0"):
    specjax.generate(target, PROMPTS, np.array([4, 0]), max_new_tokens=4)
  with pytest.raises(ValueError, match="empty prompt batch"):
    specjax.generate(target, np.zeros((1, 0), np.int32), np.array([0]), max_new_tokens=4)


def test_token_outside_vocab(target):
  bad = PROMPTS.copy()
  bad[1, 1] = V + 3
  with pytest.raises(ValueError, match=rf"prompt token {V + 3} at \[1, 1\] is outside the vocabulary"):
    specjax.generate(target, bad, LENGTHS, max_new_tokens=4)


def test_bad_sampling_and_ngram():
  with pytest.raises(ValueError, match="temperature must be >= 0, got -1"):
    specjax.Sampling(temperature=-1)
  with pytest.raises(ValueError, match="top_p must be in"):
    specjax.Sampling(temperature=1, top_p=0.0)
  with pytest.raises(ValueError, match="NGram n must be a positive integer, got 0"):
    specjax.drafters.NGram(0)


def test_missing_and_corrupt_checkpoint(tmp_path, target):
  with pytest.raises(checkpoint.CheckpointError, match="checkpoint file missing: .*config.json"):
    checkpoint.load_model(tmp_path / "nowhere")
  folder = checkpoint.save_model(target, tmp_path / "m")
  weights = folder / "model.safetensors"
  weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
  with pytest.raises(checkpoint.CheckpointError, match="corrupt or truncated"):
    checkpoint.load_model(folder)


def test_checkpoint_shape_mismatch(tmp_path, target):
  folder = checkpoint.save_model(target, tmp_path / "m")
  with pytest.raises(checkpoint.CheckpointError, match=r"param 'embed' has shape \(32, 32\), config expects \(32, 48\)"):
    checkpoint.load_model(folder, d_model=48)


def _run_cli(*args):
  return subprocess.run([sys.executable, "-m", "specjax.run", *args], capture_output=True, text=True, timeout=300)


def test_cli_bad_config_key_and_unknown_drafter():
  proc = _run_cli("--config=configs/tiny_random.py", "--config.gama=3")
  assert proc.returncode != 0 and "gama" in proc.stderr
  proc = _run_cli("--config=configs/tiny_random.py", "--config.drafter.kind=hydra")
  assert proc.returncode != 0 and "unknown drafter kind 'hydra'" in proc.stderr
