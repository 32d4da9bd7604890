"""scripts/benchmark.py, reproduce_walltime.py and compare_hf.py end to end on the tiny random pair.

Each script runs as a subprocess, as a user would run it, with a couple of gammas, batch 1 and a
few tokens; the checks are on what it writes (columns, plots, exactness flags), not on timings,
which are noise at this size. A shared persistent compilation cache lets the scripts reuse each
other's compiled shapes.
"""
import csv
import json
import os
import pathlib
import re
import subprocess
import sys

import numpy as np
import pytest

from specjax.checkpoint import CheckpointError

REPO = pathlib.Path(__file__).resolve().parent.parent
TINY = ["--config=configs/tiny_random.py", "--max_new_tokens=8", "--repeats=1", "--batch_sizes=1"]
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


@pytest.fixture(scope="module")
def bench(tmp_path_factory, cache_dir):
  out = tmp_path_factory.mktemp("bench")
  stdout = _run("benchmark.py", TINY + ["--gammas=1,2", "--drafters=draft_model,ngram", "--temperatures=0",
                                        f"--out_dir={out}"], cache_dir)
  return out, stdout


def test_benchmark_writes_csv_json_markdown_and_plots(bench):
  sys.path.insert(0, str(REPO / "scripts"))
  import benchmark  # pylint: disable=import-outside-toplevel
  out, stdout = bench
  with open(out / "results.csv") as fh:
    rows = list(csv.DictReader(fh))
  assert tuple(rows[0]) == benchmark.CSV_COLUMNS
  assert {(r["drafter"], int(r["gamma"])) for r in rows} == {(d, g) for d in ("draft_model", "ngram") for g in (1, 2)}
  data = json.loads((out / "results.json").read_text())
  assert data["meta"]["demo_weights"] is False and data["meta"]["max_new_tokens"] == 8
  for r in data["rows"]:
    assert r["identical_to_autoregressive"] is True  # greedy: speculative == autoregressive
    assert r["speedup"] > 0 and r["tokens_per_s"] > 0 and r["baseline_tokens_per_s"] > 0 and r["v"] > 0
    assert 0 <= r["alpha"] <= 1 and len(r["acceptance_per_position"]) == r["gamma"]
    assert r["efficiency"] == pytest.approx(r["speedup"] / r["predicted_speedup"])
    assert (r["c"] == 0) == (r["drafter"] == "ngram") and r["drafter_params"] >= 0
  for png in ("speedup_vs_gamma.png", "acceptance_per_position.png"):
    assert (out / png).read_bytes()[:4] == b"\x89PNG"
  assert "| drafter | B | T | γ |" in stdout and (out / "results.md").read_text().count("\n") == 2 + len(rows)


def test_demo_config_without_weights_falls_back_to_tiny(capsys):
  sys.path.insert(0, str(REPO / "scripts"))
  import benchmark  # pylint: disable=import-outside-toplevel
  import ml_collections  # pylint: disable=import-outside-toplevel
  config = benchmark.tiny_random_config()
  config.target = ml_collections.ConfigDict({"checkpoint": "demo/no_such_target"})
  config.drafter = ml_collections.ConfigDict({"checkpoint": "demo/no_such_drafter"})
  config, target, drafter_model, is_demo = benchmark.load_pair(config)
  assert not is_demo and "NOTE: demo weights not found" in capsys.readouterr().out
  assert target.config.d_model == 64 and drafter_model.config.d_model == 32
  # only the shipped demo names fall back; a user's missing checkpoint is an error naming it
  config.target = ml_collections.ConfigDict({"checkpoint": "no/such/target"})
  with pytest.raises(CheckpointError, match="checkpoint not found: 'no/such/target'"):
    benchmark.load_pair(config)


def test_reproduce_walltime_table_and_curves(bench, tmp_path, cache_dir):
  bench_out, _ = bench
  stdout = _run("reproduce_walltime.py", TINY + ["--gammas=2", "--drafters=draft_model,ngram,self",
                                                 "--temperatures=0", f"--benchmark_json={bench_out / 'results.json'}",
                                                 f"--out_dir={tmp_path}"], cache_dir)
  assert (tmp_path / "walltime_curves.png").read_bytes()[:4] == b"\x89PNG"
  table = (tmp_path / "table2.md").read_text()
  assert table in stdout + "\n"
  for needle in ("| Leviathan et al. | T5-XXL 11B (EnDe) | T5-small | 77M | 0 | 7 | 0.75 | 0.02 | 3.2X | 3.4X |",
                 "| T5-large | 800M | 0 | 7 | 0.82 | 0.11 | 2.5X | 1.7X |", "config drafter", "| ngram |",
                 "target itself", "arXiv 2211.17192"):
    assert needle in table, needle
  rows = json.loads((tmp_path / "reproduce.json").read_text())["rows"]
  assert {r["drafter"] for r in rows} == {"draft_model", "ngram", "self"}
  me = next(r for r in rows if r["drafter"] == "self")
  assert me["alpha"] > 0.9 and me["c"] == 1.0  # the target drafting for itself: (nearly) all accepted, c = 1


def test_compare_hf_tokens_identical_and_batch_refusal(tmp_path, cache_dir):
  pytest.importorskip("torch")
  pytest.importorskip("transformers")
  args = [a for a in TINY if not a.startswith("--batch_sizes")]
  args += ["--batch_sizes=1,2", "--gamma=3", "--torch_threads=1", f"--out_dir={tmp_path}"]
  stdout = _run("compare_hf.py", args, cache_dir)
  data = json.loads((tmp_path / "compare_hf.json").read_text())
  assert data["meta"]["all_identical"] is True
  by = {(r["batch_size"], r["method"].split(" (")[0]): r for r in data["rows"]}
  for b in (1, 2):
    for method in ("transformers generate", "specjax generate", "specjax speculative_generate"):
      assert by[(b, method)]["identical_to_hf_greedy"] is True, (b, method)
  assert by[(1, "transformers assisted")]["identical_to_hf_greedy"] is True
  refused = by[(2, "transformers assisted")]
  assert refused["tokens_per_s"] is None and "refused by transformers" in refused["note"]
  assert "refused by transformers" in stdout and (tmp_path / "hf" / "target" / "config.json").is_file()


def test_compare_drafters_one_table_over_families(tmp_path, cache_dir):
  """Every family runs through specjax.experiment.run; greedy rows equal autoregressive; c, v, params filled."""
  families = "draft_model,ngram,specinfer,medusa,mtp"
  _run("compare_drafters.py", ["--pair=configs/tiny_random.py", f"--families={families}", "--batch_sizes=1",
                               "--temperatures=0", "--max_new_tokens=8", "--repeats=1", f"--out_dir={tmp_path}",
                               "--variant=sparse:specinfer:drafter.paths=chain3+1x1:drafter.gamma=3"], cache_dir, timeout=900)
  rows = {r["family"]: r for r in json.loads((tmp_path / "families.json").read_text())["rows"]}
  assert list(rows) == families.split(",") + ["sparse"]
  for r in rows.values():
    assert r["identical_to_autoregressive"] is True and r["lossy"] is False
    assert r["v"] > 0 and r["c"] >= 0 and r["tokens_per_iteration"] >= 1
  assert rows["draft_model"]["c"] > 0 and rows["draft_model"]["drafter_params"] > 0
  assert rows["ngram"]["drafter_params"] == 0 and rows["mtp"]["drafter_params"] > 0
  assert rows["specinfer"]["drafted_nodes"] == 1 + 1 + 3 * 6 and rows["sparse"]["drafted_nodes"] == 4
  assert "| sparse |" in (tmp_path / "families.md").read_text()


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
