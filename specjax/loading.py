"""One entry for every checkpoint a user has: ``load_pretrained(source) -> (model, tokenizer)``.

``source`` is one of
* a registered name (``specjax.registry``: ``"smollm2-135m-instruct"``, ``"gemma3-270m"``), whose
  GGUF file ships in a pip package;
* a ``.gguf`` file (read with the ``gguf`` package);
* an HF folder (``config.json`` + ``*.safetensors`` + ``tokenizer.json`` / ``tokenizer.model``);
* a specjax bundle folder (``checkpoint.save_model``), or a name under ``specjax/assets``
  (``"demo/target"``); bundles without tokenizer files get the byte tokenizer of the demo pair;
* a Hugging Face hub id that is not an existing path (``"org/name"``, ``"org/name@rev"``,
  ``"org/name/file.gguf"``), read from huggingface_hub's cache and downloaded there if missing
  (``specjax.hub``; ``HF_HUB_OFFLINE=1``: the cache only).

GGUF files are dequantized and their tokenizer converted once, then cached as a specjax bundle
(float32 safetensors + tokenizer files) under ``$SPECJAX_CACHE`` (default
``~/.cache/specjax``), keyed by the file's path, size and mtime, or for a registered checkpoint's
file by its pinned sha256 (one conversion wherever the file is read from): later loads take a second
or two instead of the 10-25 s that parsing a 262k-token vocabulary and dequantizing cost. A
conversion is written to ``<folder>.tmp<pid>-<host>`` and renamed into place; an interrupted one's
folder is removed by a later load (:func:`remove_stale_conversions`).
"""
from __future__ import annotations

import hashlib
import json
import os
import pathlib
import re
import shutil
import socket
import time

from specjax import checkpoint, hub, registry
from specjax.checkpoint import CheckpointError
from specjax.data.tokenizer import ByteTokenizer
from specjax.models.store import ASSETS
from specjax.paths import cache_dir  # noqa: F401  (specjax.loading.cache_dir, as before)

_TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model")


def load_pretrained(source, *, param_dtype: str | None = "auto", cache: bool = True, verbose: bool = True,
                    mesh=None, **config_overrides):
  """``(model, tokenizer)`` for a registered name, a .gguf file, an HF folder or a specjax bundle.

  ``param_dtype``: the params' storage dtype (:mod:`specjax.precision`; ``"auto"``: float32 on CPU,
  bfloat16 on accelerators); ``mesh``: a ``jax.sharding.Mesh`` the params go to tensor by tensor as
  they are read (:mod:`specjax.placement`; equal to ``specjax.shard(model, mesh)`` without a whole
  host copy first); ``config_overrides`` replace model config fields (``dtype`` for compute,
  ``cache_dtype`` for the KV cache).
  """
  from specjax import precision  # pylint: disable=import-outside-toplevel
  config_overrides = dict(config_overrides, param_dtype=precision.resolve(param_dtype), mesh=mesh)
  model, tokenizer = _load(str(source), cache, verbose, config_overrides)
  if tokenizer.vocab_size > model.vocab_size:  # ids past the embedding would index garbage
    raise CheckpointError(f"{source}: tokenizer has {tokenizer.vocab_size} tokens but the model's vocab_size is "
                          f"{model.vocab_size}")
  return model, tokenizer


def _load(source: str, cache: bool, verbose: bool, config_overrides):
  if source in registry.REGISTRY:
    return load_gguf(registry.gguf_path(source), cache=cache, verbose=verbose, **config_overrides)
  path = pathlib.Path(source).expanduser()
  if not path.exists() and (ASSETS / source).exists():
    path = ASSETS / source
  if not path.exists() and hub.parse(source):  # "org/name": a Hugging Face hub id
    path = hub.resolve(source)
  if path.suffix == ".gguf":
    return load_gguf(path, cache=cache, verbose=verbose, **config_overrides)
  if not path.exists():
    raise CheckpointError(f"checkpoint not found: {source!r} is not a registered name ({sorted(registry.REGISTRY)}), "
                          f"a .gguf file, or a folder")
  if not path.is_dir():
    raise CheckpointError(f"{path}: not a checkpoint (expected a .gguf file or a folder with config.json)")
  if _is_specjax_bundle(path):
    return checkpoint.load_model(path, **config_overrides), _folder_tokenizer(path, default=ByteTokenizer())
  from specjax import hf_import  # pylint: disable=import-outside-toplevel
  return hf_import.from_hf(path, **config_overrides), _folder_tokenizer(path, default=None)


def load_gguf(path, *, cache: bool = True, verbose: bool = True, mesh=None, **config_overrides):
  """A GGUF file -> ``(model, tokenizer)``; converted once and cached unless ``cache=False``; on
  ``mesh`` when given (each tensor placed as it is read, :mod:`specjax.placement`)."""
  from specjax import gguf_import  # pylint: disable=import-outside-toplevel
  from specjax.data.hf_tokenizer import HFTokenizer  # pylint: disable=import-outside-toplevel
  path = pathlib.Path(path)
  if not path.is_file():
    raise CheckpointError(f"GGUF file not found: {path}")
  if not cache:
    reader = gguf_import.open_reader(path)  # parsed once for the model and the tokenizer
    return (gguf_import.from_gguf(path, mesh=mesh, reader=reader, **config_overrides),
            HFTokenizer.from_gguf(path, reader))
  folder = _cache_folder(path)
  remove_stale_conversions(folder.parent)
  broken = None  # the inode of a cache folder that failed to load
  if (folder / "model.safetensors").is_file():
    try:
      return checkpoint.load_model(folder, mesh=mesh, **config_overrides), HFTokenizer.from_folder(folder)
    except (CheckpointError, ValueError, OSError) as e:  # a broken cache is rebuilt, not fatal
      _say(verbose, f"cache {folder} unreadable ({e}); converting {path.name} again")
      broken = _inode(folder)
  start = time.time()
  _say(verbose, f"converting {path.name} (dequantize + tokenizer), once; cached in {folder}")
  tmp = folder.with_name(f"{folder.name}{_TMP}{os.getpid()}-{_host()}")
  shutil.rmtree(tmp, ignore_errors=True)
  try:
    reader = gguf_import.open_reader(path)  # parsed once for the model and the tokenizer
    checkpoint.save_model(gguf_import.from_gguf(path, reader=reader), tmp)
    HFTokenizer.from_gguf(path, reader).save(tmp)
    del reader
    (tmp / "source.json").write_text(json.dumps({"gguf": str(path.resolve())}) + "\n")
    install_conversion(tmp, folder, broken)
  finally:
    shutil.rmtree(tmp, ignore_errors=True)  # interrupted, or not needed
  _say(verbose, f"converted in {time.time() - start:.1f} s")
  return checkpoint.load_model(folder, mesh=mesh, **config_overrides), HFTokenizer.from_folder(folder)


def install_conversion(tmp: pathlib.Path, folder: pathlib.Path, broken: int | None = None) -> None:
  """Renames a finished conversion ``tmp`` into ``folder`` (atomic: a half-written cache is never
  read). A complete folder that a run beside this one installed first is kept and ``tmp`` is left
  for the caller to remove; a folder without weights, or the one this run failed to read (inode
  ``broken``), is moved aside and removed first. Nothing is ever deleted in place, since another
  process may be reading a complete folder."""
  complete = (folder / "model.safetensors").is_file()
  if folder.exists() and (not complete or _inode(folder) == broken):
    aside = folder.with_name(f"{folder.name}.old{_TMP}{os.getpid()}-{_host()}")
    try:
      folder.rename(aside)
    except FileNotFoundError:  # moved aside by a run beside this one
      pass
    shutil.rmtree(aside, ignore_errors=True)
  try:
    tmp.rename(folder)
  except OSError:  # ENOTEMPTY / EEXIST: a run beside this one installed its conversion first
    if not (folder / "model.safetensors").is_file():
      raise


def _inode(folder: pathlib.Path) -> int | None:
  try:
    return folder.stat().st_ino
  except FileNotFoundError:
    return None


def _cache_folder(path: pathlib.Path) -> pathlib.Path:
  """A registered checkpoint's file (a pinned size and sha256) is cached under its name and hash,
  so every copy of it shares one conversion; any other file under its path, size and mtime."""
  known = registry.registered_file(path)
  if known is not None:
    name, sha256 = known
    return cache_dir() / "gguf" / f"{name}-sha256-{sha256[:16]}"
  st = path.stat()
  key = hashlib.sha256(f"{path.resolve()}|{st.st_size}|{st.st_mtime_ns}".encode()).hexdigest()[:12]
  return cache_dir() / "gguf" / f"{path.stem}-{key}"


_TMP = ".tmp"  # <folder>.tmp<pid>-<host>: a conversion being written
STALE_SECONDS = 6 * 3600  # a conversion folder untouched this long is abandoned, whoever wrote it


def _host() -> str:
  return re.sub(r"[^A-Za-z0-9_.]", "_", socket.gethostname()) or "host"


def remove_stale_conversions(gguf_dir: pathlib.Path, now: float | None = None) -> list[pathlib.Path]:
  """Removes the temporary folders of interrupted conversions under ``gguf_dir``: those whose
  process (on this host) is gone, and any untouched for :data:`STALE_SECONDS` (another host's, or a
  reused process id). A conversion running beside this one keeps its folder. Returns the removed."""
  if not gguf_dir.is_dir():
    return []
  now = time.time() if now is None else now
  removed = []
  for tmp in gguf_dir.glob(f"*{_TMP}*"):
    m = re.search(re.escape(_TMP) + r"(\d+)(?:-(.+))?$", tmp.name)
    if m is None or not tmp.is_dir():
      continue
    pid, host = int(m.group(1)), m.group(2) or _host()  # no host: written before hosts were named
    try:
      age = now - tmp.stat().st_mtime
    except FileNotFoundError:  # finished (renamed) meanwhile
      continue
    if pid == os.getpid() and host == _host():
      continue  # this process's own, removed where it is written
    if (host == _host() and not _alive(pid)) or age > STALE_SECONDS:
      shutil.rmtree(tmp, ignore_errors=True)
      removed.append(tmp)
  return removed


def _alive(pid: int) -> bool:
  try:
    os.kill(pid, 0)
  except ProcessLookupError:
    return False
  except PermissionError:  # another user's process
    return True
  return True


def _is_specjax_bundle(folder: pathlib.Path) -> bool:
  cfg = folder / "config.json"
  if not cfg.is_file():
    return False
  try:
    return "family" in json.loads(cfg.read_text())
  except (json.JSONDecodeError, UnicodeDecodeError):
    return False


def _folder_tokenizer(folder: pathlib.Path, default):
  if any((folder / f).is_file() for f in _TOKENIZER_FILES):
    from specjax.data.hf_tokenizer import HFTokenizer  # pylint: disable=import-outside-toplevel
    return HFTokenizer.from_folder(folder)
  if default is None:
    raise CheckpointError(f"{folder}: no tokenizer.json or tokenizer.model beside the weights")
  return default


def hub_id(source) -> bool:
  """Whether ``load_pretrained(source)`` reads ``source`` as a Hugging Face hub id: not a registered
  name, an existing path or a name under specjax/assets, and spelt ``org/name[@rev][/file.gguf]``."""
  source = str(source)
  local = pathlib.Path(source).expanduser().exists() or (ASSETS / source).exists()
  return bool(source) and source not in registry.REGISTRY and not local and hub.parse(source) is not None


def _say(verbose, msg):
  if verbose:
    print(f"[specjax] {msg}", flush=True)
