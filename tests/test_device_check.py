"""scripts/device_check.sh in its dry mode: the offline install of the carried wheels, the version
check against pyproject.toml's ranges, every step run under its time limit, the budget and the JSON."""
import json
import os
import pathlib
import subprocess
import sys

import jax
import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "scripts" / "device_check.sh"
STEPS = ["wheels", "env", "exactness", "demo", "families", "profile", "batch_sweep"]


def _run(tmp_path, **env):
  full = dict(os.environ, OUT=str(tmp_path / "out"), SITE=str(tmp_path / "site"), PYTHON=sys.executable,
              PIP_NO_INDEX="1", **env)  # nothing may come from a registry
  proc = subprocess.run(["bash", str(SCRIPT), "--dry"], cwd=tmp_path, env=full, capture_output=True, text=True,
                        timeout=600)
  rec = json.loads((tmp_path / "out" / "device_check.json").read_text())
  return proc, rec


def test_the_carried_wheels_are_the_ones_the_image_lacks():
  wheels = sorted(p.name for p in (ROOT / "scripts" / "wheels").glob("*.whl"))
  names = [w.split("-")[0].replace("_", "-").lower() for w in wheels]
  assert names == ["gguf", "ml-collections"], wheels
  assert all(w.endswith("-py3-none-any.whl") for w in wheels), "carry pure-Python wheels only"


@pytest.mark.slow  # each step's modules import in a process of their own: a minute on 2 loaded cores
def test_dry_run_passes_every_step_and_writes_json(tmp_path):
  proc, rec = _run(tmp_path)
  assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
  assert rec["mode"] == "dry" and rec["ok"], rec
  assert [s["step"] for s in rec["steps"]] == STEPS
  assert all(s["status"] == "pass" and s["seconds"] <= s["limit_s"] for s in rec["steps"]), rec["steps"]
  assert rec["budget_s"] <= 540 and rec["total_s"] <= rec["budget_s"]  # inside a 10-minute command
  env = rec["env"]
  assert env["versions"]["jax"] == jax.__version__ and env["outside_range"] == []
  assert env["platform"] == "cpu" and env["specjax_from"] == str(ROOT / "specjax")
  # the carried wheels went into the step's own folder, not the environment
  assert (tmp_path / "site" / "ml_collections").is_dir() and (tmp_path / "site" / "gguf").is_dir()


def test_budget_spent_skips_the_remaining_steps(tmp_path):
  proc, rec = _run(tmp_path, TOTAL_LIMIT="5")
  assert proc.returncode == 0, proc.stderr[-2000:]
  assert [s["status"] for s in rec["steps"]] == ["skipped"] * len(STEPS)
  assert rec["ok"] is False and rec["env"] is None
