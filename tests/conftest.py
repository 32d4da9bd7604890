"""Fake 8 CPU devices for tests/test_sharding.py. This must run before anything imports jax, and
pytest imports conftest.py first. Single-device code is unaffected: jit without a mesh runs on
device 0, as before."""
import os

if "xla_force_host_platform_device_count" not in os.environ.get("XLA_FLAGS", ""):
  os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8").strip()


import pytest  # noqa: E402  (after XLA_FLAGS on purpose)


@pytest.fixture(autouse=True, scope="module")
def _free_compiled_programs():
  """Each compiled XLA:CPU program holds ~1,000 memory maps (a Gemma 3 decode loop: ~1,100), and
  the suite compiles hundreds: past vm.max_map_count (65,530) XLA aborts mid-compile. Tests compile
  once per module, so dropping the caches between modules costs nothing."""
  yield
  import jax  # pylint: disable=import-outside-toplevel
  jax.clear_caches()
