"""The GGUF conversion cache (specjax.loading): one conversion per registered file wherever it is
read from (keyed by its pinned sha256), interrupted conversions' temporary folders removed, and
first runs at once on an empty cache that all succeed."""
import hashlib
import os
import shutil
import subprocess
import sys
import time

import numpy as np
import pytest

from specjax import gguf_import, loading, registry
from specjax.data.hf_tokenizer import HFTokenizer

from test_loading import _hf_tensors, _vocabulary, _write_gguf  # tests/ is on sys.path under pytest

pytest.importorskip("gguf", reason="GGUF reading needs `pip install gguf`")


def _pinned_tiny(tmp_path, monkeypatch, name="tiny-pinned"):
  """A tiny GGUF registered with its size and sha256 pinned, and a specjax cache of its own."""
  path = _write_gguf(tmp_path / "tiny.gguf", _hf_tensors(), pieces=_vocabulary())
  data = path.read_bytes()
  monkeypatch.setitem(registry.REGISTRY, name, registry.Registered(
      name, "tiny", "", lambda: path, len(data), hashlib.sha256(data).hexdigest()))
  monkeypatch.setenv("SPECJAX_CACHE", str(tmp_path / "cache"))
  return path


def _conversions(tmp_path):
  return sorted(p.name for p in (tmp_path / "cache" / "gguf").iterdir())


def test_a_registered_file_converts_once_wherever_it_is_read_from(tmp_path, monkeypatch):
  path = _pinned_tiny(tmp_path, monkeypatch)
  model, _ = loading.load_pretrained("tiny-pinned", verbose=False)
  (folder,) = _conversions(tmp_path)
  assert folder.startswith("tiny-pinned-sha256-")
  calls = []
  monkeypatch.setattr(gguf_import, "from_gguf", lambda *a, **k: calls.append(a) or model)
  elsewhere = tmp_path / "copies" / "renamed.gguf"  # another folder, another name, another mtime
  elsewhere.parent.mkdir()
  shutil.copy(path, elsewhere)
  again, _ = loading.load_pretrained(str(elsewhere), verbose=False)
  assert not calls and _conversions(tmp_path) == [folder]
  np.testing.assert_array_equal(np.asarray(again.params["embed"]), np.asarray(model.params["embed"]))
  # a file of the same size but other bytes is not the registered one: its own conversion
  other = tmp_path / "copies" / "other.gguf"
  data = bytearray(path.read_bytes())
  data[-1] ^= 1
  other.write_bytes(bytes(data))
  assert registry.registered_file(other) is None and registry.registered_file(elsewhere)[0] == "tiny-pinned"
  loading.load_pretrained(str(other), verbose=False)
  assert len(calls) == 1 and len(_conversions(tmp_path)) == 2


def test_a_truncated_pinned_conversion_is_rebuilt(tmp_path, monkeypatch):
  _pinned_tiny(tmp_path, monkeypatch)
  model, _ = loading.load_pretrained("tiny-pinned", verbose=False)
  (folder,) = (tmp_path / "cache" / "gguf").iterdir()
  data = (folder / "model.safetensors").read_bytes()
  (folder / "model.safetensors").write_bytes(data[:len(data) // 2])
  again, _ = loading.load_pretrained("tiny-pinned", verbose=False)
  np.testing.assert_array_equal(np.asarray(again.params["embed"]), np.asarray(model.params["embed"]))
  assert _conversions(tmp_path) == [folder.name]


def _dead_pid() -> int:
  proc = subprocess.Popen([sys.executable, "-c", "pass"])
  proc.wait()
  return proc.pid  # reaped: no process has it (until the system reuses it)


def test_interrupted_conversions_are_removed_and_running_ones_kept(tmp_path, monkeypatch):
  _pinned_tiny(tmp_path, monkeypatch)
  gguf_dir = tmp_path / "cache" / "gguf"
  host = loading._host()  # pylint: disable=protected-access
  sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
  try:
    dead = gguf_dir / f"tiny-abc.tmp{_dead_pid()}-{host}"
    dead_unnamed_host = gguf_dir / f"tiny-abd.tmp{_dead_pid()}"  # the name before hosts were added
    running = gguf_dir / f"tiny-abe.tmp{sleeper.pid}-{host}"
    elsewhere_fresh = gguf_dir / "tiny-abf.tmp12-other-host"
    elsewhere_old = gguf_dir / "tiny-abg.tmp13-other-host"
    for d in (dead, dead_unnamed_host, running, elsewhere_fresh, elsewhere_old):
      d.mkdir(parents=True)
      (d / "model.safetensors").write_bytes(b"\0" * 16)
    old = time.time() - loading.STALE_SECONDS - 60
    os.utime(elsewhere_old, (old, old))
    loading.load_pretrained("tiny-pinned", verbose=False)
    left = set(_conversions(tmp_path))
    assert running.name in left and elsewhere_fresh.name in left
    assert not left & {dead.name, dead_unnamed_host.name, elsewhere_old.name}
    assert not [n for n in left if ".tmp" in n and n not in (running.name, elsewhere_fresh.name)]
  finally:
    sleeper.kill()
    sleeper.wait()
  assert loading.remove_stale_conversions(gguf_dir) == [running]  # its process is gone now


def test_a_failed_conversion_leaves_no_temporary_folder(tmp_path, monkeypatch):
  _pinned_tiny(tmp_path, monkeypatch)

  written = []

  def interrupted(*args, **kwargs):  # the weights are written by now; Ctrl-C while the tokenizer converts
    written.extend((tmp_path / "cache" / "gguf").glob("*.tmp*/model.safetensors"))
    raise KeyboardInterrupt

  monkeypatch.setattr(HFTokenizer, "from_gguf", interrupted)
  with pytest.raises(KeyboardInterrupt):
    loading.load_pretrained("tiny-pinned", verbose=False)
  assert written and _conversions(tmp_path) == []


def test_two_first_runs_at_once_on_an_empty_cache_both_succeed(tmp_path):
  path = _write_gguf(tmp_path / "tiny.gguf", _hf_tensors(), pieces=_vocabulary())
  env = dict(os.environ, SPECJAX_CACHE=str(tmp_path / "cache"), JAX_PLATFORMS="cpu")
  code = ("import sys, specjax; m, t = specjax.load_pretrained(sys.argv[1], verbose=False); "
          "print('OK', m.vocab_size, float(abs(m.params['embed']).sum()))")
  procs = [subprocess.Popen([sys.executable, "-c", code, str(path)], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True) for _ in range(2)]
  outs = [p.communicate(timeout=300) for p in procs]
  for p, (out, err) in zip(procs, outs):
    assert p.returncode == 0 and out.startswith("OK"), err[-2000:]
  assert outs[0][0] == outs[1][0]
  (folder,) = _conversions(tmp_path)  # one conversion, no temporary folder left
  assert ".tmp" not in folder


def _bundle(folder, weights=b"w"):
  folder.mkdir(parents=True)
  (folder / "model.safetensors").write_bytes(weights)
  return folder


def test_installing_a_conversion_keeps_the_one_a_run_beside_it_installed_first(tmp_path):
  folder = _bundle(tmp_path / "model", b"first")
  ours = _bundle(tmp_path / "model.tmp1-host", b"second")
  loading.install_conversion(ours, folder)  # both runs saw no cache; the other one finished first
  assert (folder / "model.safetensors").read_bytes() == b"first"
  empty = tmp_path / "empty"
  empty.mkdir()
  loading.install_conversion(_bundle(tmp_path / "empty.tmp1-host"), empty)  # weightless: replaced
  assert (empty / "model.safetensors").is_file()


def test_installing_a_conversion_replaces_the_folder_that_failed_to_load_and_only_that_one(tmp_path):
  folder = _bundle(tmp_path / "model", b"corrupt")
  broken = folder.stat().st_ino
  loading.install_conversion(_bundle(tmp_path / "model.tmp1-host", b"fixed"), folder, broken)
  assert (folder / "model.safetensors").read_bytes() == b"fixed"
  assert sorted(p.name for p in tmp_path.iterdir()) == ["model"]  # the broken one moved aside, removed
  loading.install_conversion(_bundle(tmp_path / "model.tmp2-host", b"late"), folder, broken)
  assert (folder / "model.safetensors").read_bytes() == b"fixed"  # a newer folder than the broken one stays
