"""colab/*.ipynb run top to bottom on CPU (nbmake), as a user without an accelerator would run them.

Same as ``pytest --nbmake --nbmake-timeout=600 colab/`` from the repository root (CI can call that
directly). Runs in a subprocess without tests/conftest.py's 8 fake devices, so each notebook's own
first cell decides the device count, as it does on Colab. Needs ``pip install .[notebooks]``.
"""
import os
import pathlib
import re
import subprocess
import sys

import pytest

REPO = pathlib.Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.slow


def test_notebooks_run_top_to_bottom():
  pytest.importorskip("nbmake", reason="needs nbmake + ipykernel (pip install .[notebooks])")
  notebooks = sorted((REPO / "colab").glob("*.ipynb"))
  assert {p.name for p in notebooks} >= {"quickstart.ipynb", "walltime_formula.ipynb", "sharding.ipynb"}
  env = dict(os.environ)
  env["XLA_FLAGS"] = re.sub(r"--xla_force_host_platform_device_count=\d+", "", env.get("XLA_FLAGS", "")).strip()
  env["JAX_PLATFORMS"] = "cpu"
  # small programs run a few times: compiled with most optimisations off and XLA:CPU's legacy emitters
  # (as the rest of the suite, tests/conftest.py) the three take 41 s instead of 56 s
  env["JAX_DISABLE_MOST_OPTIMIZATIONS"] = "1"
  env["XLA_FLAGS"] = f"{env['XLA_FLAGS']} --xla_cpu_use_fusion_emitters=false".strip()
  proc = subprocess.run([sys.executable, "-m", "pytest", "--nbmake", "--nbmake-timeout=600", "-p", "no:cacheprovider",
                         "-q", *map(str, notebooks)], cwd=REPO, env=env, capture_output=True, text=True,
                        timeout=1500, check=False)
  assert proc.returncode == 0, proc.stdout[-8000:] + proc.stderr[-2000:]
