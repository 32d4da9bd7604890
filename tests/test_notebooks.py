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
  import jax  # pylint: disable=import-outside-toplevel
  notebooks = sorted((REPO / "colab").glob("*.ipynb"))
  assert {p.name for p in notebooks} >= {"quickstart.ipynb", "walltime_formula.ipynb", "sharding.ipynb"}
  env = dict(os.environ)
  env["XLA_FLAGS"] = re.sub(r"--xla_force_host_platform_device_count=\d+", "", env.get("XLA_FLAGS", "")).strip()
  env["JAX_PLATFORMS"] = "cpu"
  # small programs run a few times: compiled with most optimisations off and XLA:CPU's legacy emitters
  # (as the rest of the suite, tests/conftest.py) the three take 41 s instead of 56 s
  env["JAX_DISABLE_MOST_OPTIMIZATIONS"] = "1"
  if tuple(int(p) for p in jax.__version__.split(".")[:2]) < (0, 11):  # the option is gone from jaxlib 0.11 on
    env["XLA_FLAGS"] = f"{env['XLA_FLAGS']} --xla_cpu_use_fusion_emitters=false".strip()
  proc = subprocess.run([sys.executable, "-m", "pytest", "--nbmake", "--nbmake-timeout=600", "-p", "no:cacheprovider",
                         "-q", *map(str, notebooks)], cwd=REPO, env=env, capture_output=True, text=True,
                        timeout=1500, check=False)
  assert proc.returncode == 0, proc.stdout[-8000:] + proc.stderr[-2000:]


# ----------------------------------------------------------------------------- the Colab setup cell
def _setup_cells():
  import json  # pylint: disable=import-outside-toplevel
  out = {}
  for path in sorted((REPO / "colab").glob("*.ipynb")):
    src = "".join(json.loads(path.read_text())["cells"][1]["source"])
    end = '"matplotlib"])\n'
    out[path.name] = src[src.index("# Setup."):src.index(end) + len(end)]
  return out


def _setup_namespace():
  """The setup cell's definitions, run as on a machine that is not Colab (nothing installs)."""
  cells = _setup_cells()
  ns = {}
  exec(compile(cells["quickstart.ipynb"], "setup", "exec"), ns)  # pylint: disable=exec-used
  return ns


def test_notebooks_share_one_setup_with_no_placeholder_and_no_jax_pin():
  cells = _setup_cells()
  assert len(set(cells.values())) == 1, "the notebooks' setup cells differ"
  for path in (REPO / "colab").glob("*.ipynb"):
    text = path.read_text()
    assert "YOUR_ORG" not in text and "placeholder" not in text.lower(), path.name
    assert not re.search(r"jax\[\w+\]==", text), f"{path.name} pins a JAX over the runtime's"


def test_setup_finds_an_uploaded_wheel_or_says_what_to_do(tmp_path):
  ns = _setup_namespace()
  assert ns["IN_COLAB"] is False
  with pytest.raises(SystemExit, match="specjax not found: upload specjax-.*whl.*SPECJAX_URL"):
    ns["specjax_source"](str(tmp_path))
  wheel = tmp_path / "specjax-0.1.0-py3-none-any.whl"
  wheel.write_bytes(b"")
  assert ns["specjax_source"](str(tmp_path)) == str(wheel)


def test_setup_checks_the_url_before_using_it(tmp_path):
  ns = _setup_namespace()
  ns["SPECJAX_URL"] = f"git+file://{tmp_path}/no-such-repo.git"
  with pytest.raises(SystemExit, match="does not resolve.*upload a wheel or a checkout"):
    ns["specjax_source"](str(tmp_path))


def test_setup_keeps_the_runtimes_jax_or_says_what_to_do():
  import jax  # pylint: disable=import-outside-toplevel
  ns = _setup_namespace()
  pins = ns["runtime_jax_pins"]()
  assert f"jax=={jax.__version__}" in pins and any(p.startswith("jaxlib==") for p in pins)
  ns["JAX_RANGE"] = ">=99"
  with pytest.raises(SystemExit, match=rf"This runtime's JAX is {re.escape(jax.__version__)}; specjax needs jax>=99"):
    ns["runtime_jax_pins"]()


def test_setup_range_is_pyprojects():
  import tomllib  # pylint: disable=import-outside-toplevel
  deps = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]
  jax_dep = next(d for d in deps if re.match(r"jax\b(?![-\w])", d))
  assert jax_dep == "jax" + _setup_namespace()["JAX_RANGE"]
