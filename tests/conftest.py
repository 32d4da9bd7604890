"""Fake 8 CPU devices for tests/test_sharding.py. This must run before anything imports jax, and
pytest imports conftest.py first. Single-device code is unaffected: jit without a mesh runs on
device 0, as before."""
import os

if "xla_force_host_platform_device_count" not in os.environ.get("XLA_FLAGS", ""):
  os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8").strip()
