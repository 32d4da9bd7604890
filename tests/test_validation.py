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


# Command lines that fail on the config alone, each its own process, forked after the imports
# (tests/forked_cli.py): "name" -> (argv, extra environment).
CLI_RUNS = {
    "bad key": (["--config=configs/tiny_random.py", "--config.gama=3"], {}),
    "unknown drafter": (["--config=configs/tiny_random.py", "--config.drafter.kind=hydra"], {}),
    "memory": (["--config=configs/tiny_random.py", "--config.acceptance_memory=1.5"], {}),
    "prompt and file": (["--config=configs/tiny_random.py", "--config.prompt=x", "--config.prompts_file={tmp}/p.txt"],
                        {"XLA_FLAGS": "{cli_xla_flags}"}),
}


@pytest.fixture(scope="module")
def cli_runs(tmp_path_factory):
  """CLI_RUNS' results by name: returncode, stdout, stderr."""
  import os  # pylint: disable=import-outside-toplevel
  import forked_cli  # pylint: disable=import-outside-toplevel  # tests/ is on sys.path under pytest
  tmp = tmp_path_factory.mktemp("cli")
  (tmp / "p.txt").write_text("a\n")
  fill = {"tmp": tmp, "cli_xla_flags": _cli_env()["XLA_FLAGS"]}
  cases = [{"argv": [a.format(**fill) for a in argv], "env": {k: v.format(**fill) for k, v in env.items()}}
           for argv, env in CLI_RUNS.values()]
  results = forked_cli.run_cases("specjax.run", ["absl.app", "ml_collections.config_flags", "specjax.experiment"],
                                 cases, cwd=os.getcwd(), env=dict(os.environ))
  return dict(zip(CLI_RUNS, results))


def test_cli_bad_config_key_and_unknown_drafter(cli_runs):
  proc = cli_runs["bad key"]
  assert proc["returncode"] != 0 and "gama" in proc["stderr"]
  proc = cli_runs["unknown drafter"]
  assert proc["returncode"] != 0 and "unknown drafter kind 'hydra'" in proc["stderr"]
  proc = cli_runs["memory"]
  assert proc["returncode"] != 0 and "Adaptive.memory must be in [0, 1], got 1.5" in proc["stderr"]
  assert "loading the target" not in proc["stdout"] + proc["stderr"]  # named before anything loads


# ----------------------------------------------------------------------------- context, max_len, memory
def test_cache_length_names_the_numbers_and_the_fix():
  from specjax import preflight  # pylint: disable=import-outside-toplevel
  assert preflight.cache_length(prompt_len=10, max_new_tokens=20, slots=5, context=64, context_source="x") == 35
  assert preflight.cache_length(prompt_len=10, max_new_tokens=20, slots=5, requested=40) == 40
  with pytest.raises(ValueError, match=r"the prompt \(10 tokens\) \+ max_new_tokens \(60\) \+ 5 verify slots = 75 "
                                       r"exceeds the model's context length 64 \(src\); lower --config.max_new_tokens "
                                       r"to 49 or less"):
    preflight.cache_length(prompt_len=10, max_new_tokens=60, slots=5, context=64, context_source="src")
  with pytest.raises(ValueError, match=r"shorten the prompt to 43 tokens or less"):
    preflight.cache_length(prompt_len=70, max_new_tokens=16, slots=5, context=64, context_source="src")
  with pytest.raises(ValueError, match=r"cache too small: .* = 35 slots, but --config.max_len=30; raise max_len to 35"):
    preflight.cache_length(prompt_len=10, max_new_tokens=20, slots=5, requested=30)
  with pytest.raises(ValueError, match=r"max_len=100 exceeds the model's context length 64 \(src\)"):
    preflight.cache_length(prompt_len=10, max_new_tokens=20, slots=5, requested=100, context=64, context_source="src")


def _bundle_with_context(tmp_path, context: int):
  """A tiny byte-vocabulary model saved as a specjax bundle whose config.json states a context length."""
  import json  # pylint: disable=import-outside-toplevel
  folder = checkpoint.save_model(testing.tiny_decoder(264, seed=0), tmp_path / "m")
  meta = json.loads((folder / "config.json").read_text())
  (folder / "config.json").write_text(json.dumps({**meta, "context_length": context}))
  return folder


def _run_config(target_folder, **keys):
  import ml_collections  # pylint: disable=import-outside-toplevel
  return ml_collections.ConfigDict(dict(target={"checkpoint": str(target_folder)},
                                        drafter={"kind": "ngram", "gamma": 2}, repeats=1, **keys))


def test_prompt_past_the_context_fails_before_anything_compiles(tmp_path):
  import time  # pylint: disable=import-outside-toplevel
  from specjax import experiment  # pylint: disable=import-outside-toplevel
  folder = _bundle_with_context(tmp_path, 32)
  t0 = time.perf_counter()
  with pytest.raises(ValueError, match=r"the prompt \(30 tokens\) \+ max_new_tokens \(8\) \+ 3 verify slots = 41 exceeds "
                                       r"the model's context length 32 \(the target's: .*context_length\); shorten the "
                                       r"prompt to 21 tokens or less"):
    experiment.run(_run_config(folder, prompt="x" * 30, max_new_tokens=8), verbose=False)
  with pytest.raises(ValueError, match=r"max_len=64 exceeds the model's context length 32"):
    experiment.run(_run_config(folder, prompt="hello", max_new_tokens=8, max_len=64), verbose=False)
  with pytest.raises(ValueError, match=r"cache too small: the prompt \(5 tokens\) .* = 16 slots, but "
                                       r"--config.max_len=12"):
    experiment.run(_run_config(folder, prompt="hello", max_new_tokens=8, max_len=12), verbose=False)
  assert time.perf_counter() - t0 < 60  # no decoder compiled (that takes minutes here)


def test_max_len_sizes_the_cache(tmp_path):
  from specjax import experiment  # pylint: disable=import-outside-toplevel
  folder = _bundle_with_context(tmp_path, 64)
  s = experiment.run(_run_config(folder, prompt="hello", max_new_tokens=4, max_len=24, adaptive=False), verbose=False)
  assert s["max_len"] == 24 and s["num_prompts"] == 1 and s["identical_to_autoregressive"]
  s = experiment.run(_run_config(folder, prompt="hello", max_new_tokens=4, adaptive=False), verbose=False)
  assert s["max_len"] == 5 + 4 + 3  # the default: prompt + max_new_tokens + verify slots


def test_memory_check_names_what_is_needed():
  from specjax import preflight  # pylint: disable=import-outside-toplevel
  big = preflight.ModelInfo(params=2_500_000_000, layers=10, kv_heads=8, head_dim=128)
  need = preflight.check_memory([("target", big)], rows=1, max_len=1000, prompt_len=10, available=(20e9, "here"))
  assert need == 2_500_000_000 * 4 + 2 * 10 * 8 * 128 * 4 * 1000
  with pytest.raises(ValueError, match=r"not enough memory: this run needs ~10.1 GB \(target 2.5B float32 params = "
                                       r"10.0 GB \+ float32 KV cache 0.08 GB; .*\) but here has 5.0 GB available\. .*--dry_run"):
    preflight.check_memory([("target", big)], rows=1, max_len=1000, prompt_len=10, available=(5e9, "here"))


@pytest.mark.parametrize("family,fields", [
    ("decoder", dict(num_layers=5, layer_windows=(4, 4, 0, 4, 0), d_model=32, num_heads=4, num_kv_heads=2,
                     head_dim=8, mlp_dim=48, vocab_size=40)),
    ("t5", dict(num_encoder_layers=3, num_decoder_layers=4, d_model=32, num_heads=4, head_dim=8, mlp_dim=48,
                vocab_size=40)),
])
def test_abstract_param_count_equals_the_real_one(family, fields):
  from specjax import preflight  # pylint: disable=import-outside-toplevel
  from specjax.models import families  # pylint: disable=import-outside-toplevel
  real = families.from_fields({"family": family, **fields}).num_params
  assert preflight.describe({"family": family, **fields}).params == real


def test_gguf_header_gives_context_length_and_sizes(tmp_path):
  gguf = pytest.importorskip("gguf")
  from specjax import preflight  # pylint: disable=import-outside-toplevel
  path = tmp_path / "m.gguf"
  w = gguf.GGUFWriter(str(path), "llama")
  w.add_context_length(2048)
  w.add_block_count(3)
  w.add_embedding_length(64)
  w.add_head_count(4)
  w.add_head_count_kv(2)
  w.add_token_list(["a", "bb", "ccc"])  # an array of strings, skipped on the way to the tensors
  w.add_tensor("token_embd.weight", np.zeros((3, 64), np.float32))
  w.add_tensor("blk.0.attn_q.weight", np.zeros((64, 64), np.float32))
  w.write_header_to_file()
  w.write_kv_data_to_file()
  w.write_tensors_to_file()
  w.close()
  meta, tensors = preflight.read_gguf_header(path)
  assert meta["llama.context_length"] == 2048 and meta["general.architecture"] == "llama"
  assert sorted(tensors) == ["blk.0.attn_q.weight", "token_embd.weight"]
  info = preflight.gguf_info(path, "m.gguf")
  assert (info.params, info.layers, info.kv_heads, info.head_dim, info.context) == (3 * 64 + 64 * 64, 3, 2, 16, 2048)
  assert info.context_source == "GGUF llama.context_length of m.gguf"


def _cli_env():
  import os  # pylint: disable=import-outside-toplevel
  import re  # pylint: disable=import-outside-toplevel
  env = dict(os.environ)
  env["XLA_FLAGS"] = re.sub(r"--xla_force_host_platform_device_count=\d+", "", env.get("XLA_FLAGS", "")).strip()
  return env


def test_cli_paper_size_config_says_what_it_needs_in_seconds():
  import time  # pylint: disable=import-outside-toplevel
  from specjax import preflight  # pylint: disable=import-outside-toplevel
  have, _ = preflight.available_memory()
  if have is not None and have > 400e9:
    pytest.skip("this machine holds Chinchilla 70B + 4B in float32")
  t0 = time.perf_counter()
  proc = subprocess.run([sys.executable, "-m", "specjax.run", "--config=configs/chinchilla70b_4b.py"],
                        capture_output=True, text=True, timeout=120, env=_cli_env())
  seconds = time.perf_counter() - t0
  assert proc.returncode == 2, proc.stderr[-2000:]
  lines = proc.stderr.strip().splitlines()
  assert len(lines) == 1 and lines[0].startswith("error: not enough memory: this run needs ~27"), proc.stderr
  assert "target 65.0B float32 params" in lines[0] and "--dry_run" in lines[0]
  assert seconds < 60, seconds  # ~3-6 s on 2 loaded cores; the old random init was killed after minutes


def test_cli_prompt_and_prompts_file_together_is_an_error(cli_runs):
  proc = cli_runs["prompt and file"]
  assert proc["returncode"] == 2
  assert proc["stderr"].strip() == ("error: give --config.prompt or --config.prompts_file, not both (a prompts file "
                                    "can hold the prompt as one more line)")
