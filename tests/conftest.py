"""Fake 8 CPU devices for tests/test_sharding.py. This must run before anything imports jax, and
pytest imports conftest.py first. Single-device code is unaffected: jit without a mesh runs on
device 0, as before.

One persistent compilation cache per test session (a fresh temporary folder, unless
JAX_COMPILATION_CACHE_DIR is already set): the per-module ``jax.clear_caches()`` below frees the
compiled programs, and a later module that compiles the same program (the same HLO, flags and
devices: the cache key) reads it back instead of compiling it again. Most of it is the hundreds of
small eager-op programs every ``testing.tiny_decoder`` / ``perturbed`` builds; a run compiled on
2 cores spends ~75% of its wall time in XLA. Subprocesses (scripts, notebooks) inherit the folder.
"""
import atexit
import os
import shutil
import tempfile

if "xla_force_host_platform_device_count" not in os.environ.get("XLA_FLAGS", ""):
  os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8").strip()

# One OpenMP thread for torch and numpy's BLAS: the suite runs two workers on two cores, and OpenMP
# threads spin while they wait; with one core busy, transformers' greedy generate (SmolLM2, 4 x 32
# tokens) took 100 s on 2 threads and 8 s on 1. Subprocesses inherit it.
for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
  os.environ.setdefault(_var, "1")

if not os.environ.get("JAX_COMPILATION_CACHE_DIR"):
  _CACHE_DIR = tempfile.mkdtemp(prefix="specjax_test_jax_cache_")
  atexit.register(shutil.rmtree, _CACHE_DIR, ignore_errors=True)
  os.environ["JAX_COMPILATION_CACHE_DIR"] = _CACHE_DIR
  os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0")  # the small eager ops too
  os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES", "0")


# A jitted function that closes over weights compiles them into the program as constants: seconds of
# XLA time for a 10M-parameter model, minutes for a real one. jax warns past this many bytes (by
# default 2 GB); pyproject.toml turns the warning into an error. Pass weights as arguments instead.
os.environ.setdefault("JAX_CAPTURED_CONSTANTS_WARN_BYTES", str(2**20))

import pytest  # noqa: E402  (after XLA_FLAGS on purpose)


def _optimize(node) -> bool:
  return os.environ.get("SPECJAX_TEST_XLA", "") == "optimized" or node.get_closest_marker("xla_optimized") is not None


def _legacy_emitters_when_unoptimized():
  """With most optimisations off, XLA:CPU's legacy elemental emitters compile these small programs
  ~30% faster than its fusion emitters (three speculative loops: 2.6 vs 3.7 s); at full optimisation they
  are 2.4x slower (SmolLM2's loop: 15 vs 6 s). XLA_FLAGS apply to the whole process, so the choice
  goes into each compilation's options instead, following ``jax_disable_most_optimizations``. Only
  the test suite does this; a jax without these internals just compiles as before. XLA dropped the
  legacy emitters and this option with jaxlib 0.11 (an unknown option fails every compile there)."""
  try:
    import jaxlib  # pylint: disable=import-outside-toplevel
    from jax._src import compiler  # pylint: disable=import-outside-toplevel
    original, unoptimized = compiler.get_compile_options, compiler._DISABLE_MOST_OPTIMIZATIONS  # pylint: disable=protected-access
  except (ImportError, AttributeError):
    return
  if tuple(int(p) for p in jaxlib.__version__.split(".")[:2]) >= (0, 11):
    return

  def get_compile_options(*args, **kwargs):
    options = original(*args, **kwargs)
    if unoptimized.value:
      options.env_option_overrides = [*options.env_option_overrides, ("xla_cpu_use_fusion_emitters", False)]
    return options

  compiler.get_compile_options = get_compile_options


_legacy_emitters_when_unoptimized()


@pytest.fixture(autouse=True, scope="module")
def _xla_optimization_level(request):
  """Most programs here are tiny decoders run for a few steps, and XLA:CPU spends longer optimising
  them (LLVM at -O2+) than running them: the suite compiles with LLVM's expensive passes off
  (``jax_disable_most_optimizations``; HLO fusion and buffer assignment still run and the dots call
  the same library kernels, so results and in-place updates are unchanged). A test or module whose
  programs run long (training, many sampled rows, real checkpoints) is marked ``xla_optimized``
  and compiles fully (it runs up to 2x faster then). ``SPECJAX_TEST_XLA=optimized``: everything
  fully optimised."""
  import jax  # pylint: disable=import-outside-toplevel
  jax.config.update("jax_disable_most_optimizations", not _optimize(request.node))
  yield


@pytest.fixture(autouse=True)
def _xla_optimization_per_test(request):
  """A test's own ``xla_optimized`` mark (module-scoped fixtures compile under the module's)."""
  import jax  # pylint: disable=import-outside-toplevel
  jax.config.update("jax_disable_most_optimizations", not _optimize(request.node))
  yield


@pytest.fixture(autouse=True, scope="module")
def _free_compiled_programs():
  """Each compiled XLA:CPU program holds ~1,000 memory maps (a Gemma 3 decode loop: ~1,100), and
  the suite compiles hundreds: past vm.max_map_count (65,530) XLA aborts mid-compile. Tests compile
  once per module, so dropping the caches between modules costs nothing (and a program another
  module compiled comes back from the session's persistent cache, see above)."""
  yield
  import jax  # pylint: disable=import-outside-toplevel
  jax.clear_caches()


# ----------------------------------------------------------------------------- skips in CI
# With CI set (to anything but "" or "0"), a skipped test fails the run unless its skip reason contains one
# of these: a test that can only ever skip in CI (e.g. one that needs a multi-GB file CI never holds).
# Each entry says why; keep the list short. Everything else CI installs (.ci/run: every extra), so an
# importorskip or skipif that fires there is a broken environment or a hidden failure, not a skip.
CI_ALLOWED_SKIPS = (  # (substring of the skip reason, why it may skip in CI)
    ("no Qwen2.5 GGUF here", "the Qwen2.5-Coder GGUFs (1.6 GB of PyPI byte parts) are fetched on request, never in CI"),
    ("fetch them (1.6 GB)", "the same files, for the Qwen2 parity tests"),
)


def _ci() -> bool:
  return os.environ.get("CI", "") not in ("", "0")


def _skip_reason(report) -> str:
  longrepr = report.longrepr
  if isinstance(longrepr, tuple) and len(longrepr) == 3:  # (path, line, "Skipped: reason")
    return str(longrepr[2])
  return str(longrepr)


def _allowed(reason: str) -> bool:
  return any(sub in reason for sub, _why in CI_ALLOWED_SKIPS)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
  """Under CI a skip (skipif, importorskip or pytest.skip in setup or the test) becomes a failure."""
  del call
  outcome = yield
  report = outcome.get_result()
  if _ci() and report.skipped and not hasattr(report, "wasxfail") and not _allowed(_skip_reason(report)):
    report.outcome = "failed"
    report.longrepr = (f"{item.nodeid} skipped under CI: {_skip_reason(report)}\n"
                       "CI installs every extra, so a skip hides a test that never ran; fix the environment "
                       "or add the reason to CI_ALLOWED_SKIPS in tests/conftest.py with why it may skip.")


_CI_SKIPPED_MODULES = []


def pytest_collectreport(report):
  """A whole module skipped at import (a module-level importorskip) never reaches runtest: note it."""
  if _ci() and report.skipped and not _allowed(_skip_reason(report)):
    _CI_SKIPPED_MODULES.append(f"{report.nodeid}: {_skip_reason(report)}")


def pytest_sessionfinish(session, exitstatus):
  del exitstatus
  if _CI_SKIPPED_MODULES:
    print("\nCI: modules skipped at collection (not allowed):\n  " + "\n  ".join(_CI_SKIPPED_MODULES))
    session.exitstatus = pytest.ExitCode.TESTS_FAILED


# ----------------------------------------------------------------------------- scheduling
# Under `-n 2 --dist loadfile` each worker takes whole modules, and xdist hands them out largest
# test count first. A long module handed out last leaves the other worker idle at the end, so the
# modules that take longest (summed test time on the 2-core CI machine, 40-220 s each; test_qwen2.py
# only where the Qwen GGUFs are cached) go first, in this order; the rest follow in collection order
# and fill in.
LONGEST_MODULES = ("test_qwen2.py", "test_real_models.py", "test_exactness_matrix.py", "test_bench.py",
                   "test_eagle.py", "test_notebooks.py", "test_greedy_equality.py", "test_adaptive.py",
                   "test_sharding.py", "test_t5_ende.py", "test_vocab_truncation.py", "test_tree_exactness.py",
                   "test_refill.py", "test_scan_layers.py")


def pytest_configure(config):
  if hasattr(config.option, "loadscopereorder"):  # xdist: keep the order set below
    config.option.loadscopereorder = False


def pytest_collection_modifyitems(items):
  rank = {name: i for i, name in enumerate(LONGEST_MODULES)}
  items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # stable: the rest keep their order


# ----------------------------------------------------------------------------- the smoke subset
# tests/smoke.txt names the tests `python -m pytest -m smoke` runs (on the newest tested set,
# constraints/newest.txt). A listed id that matches nothing in a collected module is an error, so the
# list cannot rot silently when a test is renamed.
SMOKE_FILE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "smoke.txt")


def smoke_patterns(path=SMOKE_FILE) -> list:
  with open(path, encoding="utf-8") as fh:
    return [l.split("#", 1)[0].strip() for l in fh if l.split("#", 1)[0].strip()]


def is_smoke(nodeid: str, pattern: str) -> bool:
  return nodeid.startswith(pattern[:-1]) if pattern.endswith("*") else nodeid == pattern


_SMOKE = smoke_patterns()
_SMOKE_SEEN, _COLLECTED_FILES = set(), set()


def pytest_itemcollected(item):
  _COLLECTED_FILES.add(item.nodeid.split("::", 1)[0])
  for pattern in _SMOKE:
    if is_smoke(item.nodeid, pattern):
      item.add_marker(pytest.mark.smoke)
      _SMOKE_SEEN.add(pattern)


def pytest_collection_finish(session):
  if "smoke" not in (session.config.option.markexpr or ""):
    return
  stale = [p for p in _SMOKE if p not in _SMOKE_SEEN and p.split("::", 1)[0] in _COLLECTED_FILES]
  if stale:
    raise pytest.UsageError(f"tests/smoke.txt lists ids that match no test: {stale}")
