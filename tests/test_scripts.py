"""The training scripts under scripts/ end to end, each as a subprocess, as a user would run it.

A few steps on a small make_real_data-style folder; the checks are on what a script writes and
that the loaders read it back. (The measurement commands are ``python -m specjax.bench``'s:
tests/test_bench.py.)
"""
import json
import os
import pathlib
import re
import subprocess
import sys

import numpy as np
import pytest

REPO = pathlib.Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.slow


def _run(script, args, tmp_cache, timeout=300):
  env = dict(os.environ)
  # one device as a user has it (tests/conftest.py fakes 8 for the sharding tests)
  env["XLA_FLAGS"] = re.sub(r"--xla_force_host_platform_device_count=\d+", "", env.get("XLA_FLAGS", "")).strip()
  env.update(JAX_PLATFORMS="cpu", JAX_COMPILATION_CACHE_DIR=str(tmp_cache),
             JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS="0", JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES="0")
  proc = subprocess.run([sys.executable, str(REPO / "scripts" / script), *args], cwd=REPO, env=env,
                        capture_output=True, text=True, timeout=timeout, check=False)
  assert proc.returncode == 0, f"{script} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-5000:]}"
  return proc.stdout


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory):
  """The session's persistent compilation cache (tests/conftest.py), shared with the notebooks'
  subprocesses (also one device); a folder of this module's own when the session has none."""
  return os.environ.get("JAX_COMPILATION_CACHE_DIR") or tmp_path_factory.mktemp("jax_cache")


@pytest.mark.parametrize("family", ["mtp", "medusa", "dflash"])
def test_train_real_heads_end_to_end(family, tmp_path, cache_dir):
  """scripts/train_real_heads.py on the demo target and a small make_real_data-style folder: it trains,
  writes weights + subset.npy + training.json, caches the features, and run.py's loaders read it back."""
  rng = np.random.default_rng(0)
  for split, n in (("shards", 24), ("held_out", 8)):
    (tmp_path / "data" / split).mkdir(parents=True)
    np.savez(tmp_path / "data" / split / "00000.npz", prompts=rng.integers(32, 127, (n, 40)).astype(np.int32),
             prompt_lengths=np.full((n,), 40, np.int32), tokens=rng.integers(32, 127, (n, 48)).astype(np.int32),
             lengths=np.full((n,), 48, np.int32), kinds=np.array(["code"] * n), sources=np.array(["x"] * n))
  out = tmp_path / family
  stdout = _run("train_real_heads.py", [f"--family={family}", "--target=specjax/assets/demo/target",
                                        f"--data={tmp_path / 'data'}", f"--out={out}", f"--workdir={tmp_path / 'wd'}",
                                        "--k=64", "--crop=64", "--steps=4", "--batch=4", "--eval_gammas=2",
                                        "--mlp_dim=64", "--num_heads=2"], cache_dir)
  report = json.loads((out / "training.json").read_text())
  assert report["family"] == family and report["k"] == 64 and report["steps"] == 4 and report["train_rows"] == 24
  assert 0 < report["subset_coverage"] <= 1 and report["acceptance_greedy"] and '"held_out_after"' in stdout
  assert np.load(out / "subset.npy").shape == (64,)
  assert len(list((tmp_path / "data").glob("features_crop64*.npz"))) == 1  # cached for the next run
  import specjax  # pylint: disable=import-outside-toplevel
  target = specjax.checkpoint.load_model(REPO / "specjax/assets/demo/target")
  if family in ("mtp", "dflash"):
    drafter = specjax.drafters.build(family, {"checkpoint": str(out), "gamma": 3}, target)
  else:
    drafter = specjax.drafters.build("medusa", {"checkpoint": str(out), "tree": "chain2", "gamma": 2}, target)
  assert drafter.subset_K.shape == (64,)
