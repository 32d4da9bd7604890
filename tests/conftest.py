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

if not os.environ.get("JAX_COMPILATION_CACHE_DIR"):
  _CACHE_DIR = tempfile.mkdtemp(prefix="specjax_test_jax_cache_")
  atexit.register(shutil.rmtree, _CACHE_DIR, ignore_errors=True)
  os.environ["JAX_COMPILATION_CACHE_DIR"] = _CACHE_DIR
  os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0")  # the small eager ops too
  os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES", "0")


import pytest  # noqa: E402  (after XLA_FLAGS on purpose)


@pytest.fixture(autouse=True, scope="module")
def _free_compiled_programs():
  """Each compiled XLA:CPU program holds ~1,000 memory maps (a Gemma 3 decode loop: ~1,100), and
  the suite compiles hundreds: past vm.max_map_count (65,530) XLA aborts mid-compile. Tests compile
  once per module, so dropping the caches between modules costs nothing (and a program another
  module compiled comes back from the session's persistent cache, see above)."""
  yield
  import jax  # pylint: disable=import-outside-toplevel
  jax.clear_caches()
