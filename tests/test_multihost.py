"""Two processes x 4 CPU devices = one 8-device mesh, via jax.distributed (gloo CPU collectives).

Run as a script, this file is one worker: ``python tests/test_multihost.py <process_id> <port>``.
"""
import json
import os
import socket
import subprocess
import sys

import numpy as np

GAMMA, MAX_NEW = 3, 8


def _models():
  from specjax import testing  # pylint: disable=import-outside-toplevel
  target = testing.tiny_decoder(vocab_size=64, num_heads=8, num_kv_heads=8, head_dim=4, mlp_dim=64)
  drafter = testing.tiny_decoder(vocab_size=64, seed=1, num_layers=1, num_heads=8, num_kv_heads=8, head_dim=4,
                                 mlp_dim=64)
  prompts = np.random.default_rng(0).integers(0, 64, (4, 5))
  return target, drafter, prompts, np.array([5, 2, 4, 3])


def _generate(mesh=None):
  import specjax  # pylint: disable=import-outside-toplevel
  target, drafter, prompts, lengths = _models()
  return specjax.speculative_generate(target, specjax.drafters.DraftModel(drafter), prompts, lengths, gamma=GAMMA,
                                      max_new_tokens=MAX_NEW, mesh=mesh)


def _worker(process_id: int, port: int) -> None:
  from specjax import sharding  # pylint: disable=import-outside-toplevel
  sharding.initialize_distributed(f"127.0.0.1:{port}", num_processes=2, process_id=process_id,
                                  local_device_count=4)
  import jax  # pylint: disable=import-outside-toplevel
  assert jax.device_count() == 8 and jax.local_device_count() == 4, (jax.device_count(), jax.local_device_count())
  out = _generate(sharding.make_mesh("2x4"))  # data axis spans the two processes
  print("TOKENS " + json.dumps(out.tokens.tolist()), flush=True)
  jax.distributed.shutdown()


def _free_port() -> int:
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    return s.getsockname()[1]


def test_two_processes_match_single_process():
  from specjax import sharding  # pylint: disable=import-outside-toplevel
  port = _free_port()
  env = sharding.force_cpu_devices_env(4)
  env["JAX_PLATFORMS"] = "cpu"
  procs = [subprocess.Popen([sys.executable, __file__, str(i), str(port)], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, cwd=os.path.dirname(os.path.dirname(__file__)))
           for i in range(2)]
  outs = []
  try:
    for p in procs:
      stdout, stderr = p.communicate(timeout=150)
      assert p.returncode == 0, stderr[-3000:]
      outs.append(json.loads(next(l for l in stdout.splitlines() if l.startswith("TOKENS "))[len("TOKENS "):]))
  finally:
    for p in procs:
      if p.poll() is None:
        p.kill()
  import jax  # pylint: disable=import-outside-toplevel
  with jax.default_device(jax.devices("cpu")[0]):  # the workers run on CPU: compare like with like
    ref = _generate().tokens.tolist()
  assert outs[0] == ref and outs[1] == ref


if __name__ == "__main__":
  _worker(int(sys.argv[1]), int(sys.argv[2]))
