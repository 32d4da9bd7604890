"""Dependency ranges and the two constraints files: pyproject.toml's ranges admit every version
pinned in constraints/lower.txt (the full suite, Python 3.11) and constraints/newest.txt (the smoke
subset, Python 3.12), the README's test command installs with the lower set, and the tracked tree
stays small enough to travel (64 MiB limits on device tools, release archives)."""
import pathlib
import re
import subprocess
import tomllib

import pytest
from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = pathlib.Path(__file__).resolve().parent.parent
CONSTRAINTS = {"lower": ROOT / "constraints" / "lower.txt", "newest": ROOT / "constraints" / "newest.txt"}
# the packages whose API specjax leans on: each range has a tested lower and upper end
CORE = ("jax", "flax", "optax", "orbax-checkpoint", "ml-collections", "gguf")
TREE_LIMIT_MIB = 56


def runtime_requirements() -> dict:
  deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
  reqs = [Requirement(d) for d in deps]
  return {canonicalize_name(r.name): r for r in reqs}


def pins(path: pathlib.Path) -> dict:
  """``{name: Version}`` of a constraints file; every line must be an exact ``name==version`` pin."""
  out = {}
  for line in path.read_text().splitlines():
    line = line.split("#", 1)[0].strip()
    if not line:
      continue
    req = Requirement(line)
    spec = list(req.specifier)
    assert len(spec) == 1 and spec[0].operator == "==", f"{path.name}: {line!r} is not an exact pin"
    name = canonicalize_name(req.name)
    assert name not in out, f"{path.name}: {name} pinned twice"
    out[name] = Version(spec[0].version)
  return out


def test_runtime_dependencies_are_ranges_not_pins():
  for name, req in runtime_requirements().items():
    assert not any(s.operator in ("==", "===") for s in req.specifier), (
        f"pyproject.toml pins {req}: an exact pin replaces the JAX an accelerator image already has")
    assert any(s.operator == ">=" for s in req.specifier), f"{req}: no lower bound"
  for name in CORE:
    req = runtime_requirements()[name]
    assert any(s.operator == "<" for s in req.specifier), f"{req}: no upper bound past the tested releases"


@pytest.mark.parametrize("which", sorted(CONSTRAINTS))
def test_ranges_admit_the_constraints(which):
  reqs, pinned = runtime_requirements(), pins(CONSTRAINTS[which])
  missing = sorted(set(reqs) - set(pinned))
  assert not missing, f"constraints/{which}.txt pins no version of {missing}"
  outside = [f"{name}=={pinned[name]} (pyproject: {reqs[name]})" for name in reqs
             if not reqs[name].specifier.contains(pinned[name], prereleases=True)]
  assert not outside, f"constraints/{which}.txt lies outside pyproject.toml's ranges: {outside}"
  assert pinned["jax"] == pinned["jaxlib"], f"{which}: jax {pinned['jax']} with jaxlib {pinned['jaxlib']}"


def test_the_constraints_span_the_range():
  lower, newest, reqs = pins(CONSTRAINTS["lower"]), pins(CONSTRAINTS["newest"]), runtime_requirements()
  for name in CORE:
    assert lower[name] <= newest[name], f"{name}: lower {lower[name]} above newest {newest[name]}"
    floor = min(Version(s.version) for s in reqs[name].specifier if s.operator == ">=")
    assert lower[name] == floor, f"{name}: the lower set tests {lower[name]}, pyproject's floor is {floor}"
  assert lower["jax"] < newest["jax"], "the two sets test the same JAX"


def test_readme_and_ci_install_with_the_lower_constraints():
  ci = [l for l in (ROOT / ".ci" / "run").read_text().splitlines() if l.startswith("python3 -m venv")]
  assert len(ci) == 1 and "-c constraints/lower.txt" in ci[0], ci
  readme = (ROOT / "README.md").read_text()
  assert ci[0] in readme
  for which in CONSTRAINTS:
    assert f"constraints/{which}.txt" in readme, f"README's install notes do not name constraints/{which}.txt"
  stated = {}
  for text in re.findall(r"`([A-Za-z][\w.-]*\s*[<>~!]=?[^`]*)`", readme):
    try:
      req = Requirement(text)
    except InvalidRequirement:
      continue  # code in backticks that is no requirement
    stated[canonicalize_name(req.name)] = req.specifier
  for name in CORE:
    assert stated.get(name) == runtime_requirements()[name].specifier, (
        f"README's install notes do not state {name}'s range {runtime_requirements()[name].specifier}")


def test_tracked_tree_is_under_the_limit():
  files = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout.split(b"\0")
  paths = [ROOT / f.decode() for f in files if f]
  total = sum(p.stat().st_size for p in paths if p.is_file())
  biggest = sorted(((p.stat().st_size, p.relative_to(ROOT).as_posix()) for p in paths if p.is_file()), reverse=True)
  assert total < TREE_LIMIT_MIB * 2**20, (
      f"tracked files add up to {total / 2**20:.1f} MiB (limit {TREE_LIMIT_MIB} MiB); largest: {biggest[:5]}")


def test_shipped_weights_are_packed():
  plain = sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / "specjax" / "assets").rglob("model.safetensors"))
  assert not plain, f"ship weights packed (specjax.models.packed.pack_weights): {plain}"


def test_smoke_subset_runs_every_drafter_kind_greedy_and_sampled():
  import conftest  # tests/ is on sys.path under pytest
  import test_exactness_matrix as matrix
  import specjax
  patterns = conftest.smoke_patterns()
  # the kinds specjax ships (a test module may have registered one of its own in this process)
  shipped = [s.kind for s in specjax.drafters.specs() if s.build.__module__.startswith("specjax.")]
  assert len(shipped) >= 10, shipped
  base = "tests/test_exactness_matrix.py::"
  greedy = {(matrix.CONFIGS[name].kind, f"{base}test_greedy_cell_equals_autoregressive[{name}-{shape}]")
            for name, shape in matrix.GREEDY}
  sampled = {(matrix.CONFIGS[name].kind, f"{base}test_sampled_cell_is_exact[{name}-{s}-{shape}]")
             for name, s, shape in matrix.rotated_cells()}
  for what, cells in (("greedy", greedy), ("sampled", sampled)):
    covered = {kind for kind, nodeid in cells if any(conftest.is_smoke(nodeid, p) for p in patterns)}
    missing = sorted(set(shipped) - covered)
    assert not missing, f"tests/smoke.txt runs no {what} cell of {missing}"
  assert any(p.startswith("tests/test_real_models.py::test_logits_match_transformers") for p in patterns)
