"""Two processes x 4 CPU devices = one 8-device mesh, via jax.distributed (gloo CPU collectives).

Run as a script, this file is one worker: ``python tests/test_multihost.py <process_id> <port>``
(decoding), or ``... <process_id> <port> <folder>`` (loading that folder onto a ``1x8`` mesh).
"""
import hashlib
import json
import os
import socket
import subprocess
import sys

import numpy as np
import pytest

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


def _load(folder, mesh=None):
  """A specjax checkpoint or an HF folder, params in float32 (as stored: bytes read = bytes held)."""
  from specjax import checkpoint, hf_import  # pylint: disable=import-outside-toplevel
  from specjax.models import store  # pylint: disable=import-outside-toplevel
  if store.read_family(folder):
    return checkpoint.load_model(folder, "float32", mesh=mesh)
  return hf_import.from_hf(folder, param_dtype="float32", mesh=mesh)


def _load_worker(process_id: int, port: int, folder: str) -> None:
  """Loads ``folder`` (an HF folder or a specjax checkpoint) onto a 1x8 mesh whose ``model`` axis
  spans both processes; prints the bytes this process read from the file, the bytes of the distinct
  slices its devices hold, and a digest of each slice."""
  from specjax import sharding  # pylint: disable=import-outside-toplevel
  sharding.initialize_distributed(f"127.0.0.1:{port}", num_processes=2, process_id=process_id,
                                  local_device_count=4)
  import jax  # pylint: disable=import-outside-toplevel
  from flax import traverse_util  # pylint: disable=import-outside-toplevel
  from specjax.models import lazy, store  # pylint: disable=import-outside-toplevel
  read = [0]
  real_slice, real_whole = store.read_slice, store.read_tensor

  def counted_slice(path, entry, start, index):  # a whole tensor goes on to read_tensor, counted there
    x = real_slice(path, entry, start, index)
    read[0] += 0 if x.shape == tuple(entry["shape"]) else x.nbytes
    return x

  def counted_whole(*args):
    x = real_whole(*args)
    read[0] += x.nbytes
    return x

  store.read_slice, store.read_tensor = counted_slice, counted_whole
  model = _load(folder, sharding.make_mesh("1x8"))
  held, digests = 0, {}
  for name, x in traverse_util.flatten_dict(model.params, sep="/").items():
    assert not x.is_fully_addressable or x.is_fully_replicated, name  # split across the processes
    seen = set()
    for shard in x.addressable_shards:
      key = json.dumps(lazy.normalize(shard.index, x.shape))
      if key not in seen:
        seen.add(key)
        data = np.asarray(shard.data)
        held += data.nbytes
        digests[f"{name} {key}"] = hashlib.sha1(data.tobytes()).hexdigest()
  print("LOAD " + json.dumps({"read": read[0], "held": held, "digests": digests}), flush=True)
  jax.distributed.shutdown()


def _free_port() -> int:
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    return s.getsockname()[1]


def _run_workers(tag: str, *args) -> list:
  """Runs the two worker processes; the JSON each printed after ``tag``."""
  from specjax import sharding  # pylint: disable=import-outside-toplevel
  port = _free_port()
  env = sharding.force_cpu_devices_env(4)
  env["JAX_PLATFORMS"] = "cpu"
  env["JAX_DISABLE_MOST_OPTIMIZATIONS"] = "1"  # small programs: compile fast, as the suite does
  procs = [subprocess.Popen([sys.executable, __file__, str(i), str(port), *map(str, args)], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            cwd=os.path.dirname(os.path.dirname(__file__)))
           for i in range(2)]
  outs = []
  try:
    for p in procs:
      stdout, stderr = p.communicate(timeout=150)
      assert p.returncode == 0, stderr[-3000:]
      outs.append(json.loads(next(l for l in stdout.splitlines() if l.startswith(tag))[len(tag):]))
  finally:
    for p in procs:
      if p.poll() is None:
        p.kill()
  return outs


def test_two_processes_match_single_process():
  outs = _run_workers("TOKENS ")
  import jax  # pylint: disable=import-outside-toplevel
  with jax.default_device(jax.devices("cpu")[0]):  # the workers run on CPU: compare like with like
    ref = _generate().tokens.tolist()
  assert outs[0] == ref and outs[1] == ref


@pytest.mark.parametrize("layout", ["hf", "specjax", "specjax-scanned"])
def test_each_process_reads_only_its_own_slices(tmp_path, layout):
  """A checkpoint loaded onto a mesh that spans two processes: each process reads from the file only
  the bytes of the slices its devices hold (no whole tensor, nothing twice), and every slice equals
  that part of a single-process load."""
  from flax import traverse_util  # pylint: disable=import-outside-toplevel
  from specjax import checkpoint, hf_export, testing  # pylint: disable=import-outside-toplevel
  # 8 query heads and mlp/vocab divisible by 8 split over the 8 devices; 4 KV heads repeat on 2 each
  model = testing.tiny_decoder(vocab_size=128, d_model=32, num_heads=8, num_kv_heads=4, head_dim=4, mlp_dim=64,
                               num_layers=2, tie_embeddings=False, scan_layers=layout.endswith("scanned"))
  folder = tmp_path / layout
  if layout == "hf":
    hf_export.to_hf_llama(model, folder)
  else:
    checkpoint.save_model(model, folder)
  outs = _run_workers("LOAD ", folder)
  total = (folder / "model.safetensors").stat().st_size
  for out in outs:
    assert out["read"] == out["held"], out["read"]  # exactly its own slices, each once
    assert out["read"] < 0.75 * total, (out["read"], total)  # about half, plus the norms and repeated KV
  full = traverse_util.flatten_dict(_load(folder).params, sep="/")
  checked = 0
  for out in outs:
    for key, digest in out["digests"].items():
      name, index = key.split(" ", 1)
      part = np.asarray(full[name])[tuple(slice(a, b) for a, b in json.loads(index))]
      assert hashlib.sha1(part.tobytes()).hexdigest() == digest, key
      checked += 1
  assert checked >= len(full)


if __name__ == "__main__":
  if len(sys.argv) > 3:
    _load_worker(int(sys.argv[1]), int(sys.argv[2]), sys.argv[3])
  else:
    _worker(int(sys.argv[1]), int(sys.argv[2]))
