"""Shipped checkpoints stored packed: ``model.safetensors.xz`` beside ``config.json``.

The weights in ``specjax/assets`` are xz-compressed (lossless: the same bytes come back), so that the
repository stays under 56 MiB. :func:`weights_folder` gives the folder a reader reads
``model.safetensors`` from: the checkpoint's own when it holds a plain file, else a folder under
``$SPECJAX_CACHE/assets/<sha256 of the packed file>/`` that the packed file is unpacked into once
(written under a temporary name and renamed into place, so a reader never sees half a file).
:func:`pack_weights` makes a packed checkpoint from a plain one.
"""
from __future__ import annotations

import functools
import hashlib
import lzma
import os
import pathlib

from specjax.models.store import PACKED_WEIGHTS_FILE, WEIGHTS_FILE, CheckpointError


def weights_folder(folder) -> pathlib.Path:
  """``folder`` itself, or where only ``model.safetensors.xz`` is there, the folder it unpacks to."""
  folder = pathlib.Path(folder)
  packed = folder / PACKED_WEIGHTS_FILE
  if (folder / WEIGHTS_FILE).is_file() or not packed.is_file():
    return folder
  st = packed.stat()
  return _unpacked(packed.resolve(), st.st_size, st.st_mtime_ns).parent


def weights_path(folder) -> pathlib.Path:
  """The ``model.safetensors`` a reader of ``folder`` reads (see :func:`weights_folder`)."""
  return weights_folder(folder) / WEIGHTS_FILE


@functools.lru_cache(maxsize=64)
def _digest(packed: pathlib.Path, size: int, mtime_ns: int) -> str:  # pylint: disable=unused-argument
  """The packed file's sha256 (size and mtime key the memo: a file is hashed once per process)."""
  with open(packed, "rb") as fh:
    return hashlib.file_digest(fh, "sha256").hexdigest()


def _unpacked(packed: pathlib.Path, size: int, mtime_ns: int) -> pathlib.Path:
  root = pathlib.Path(os.environ.get("SPECJAX_CACHE", pathlib.Path.home() / ".cache" / "specjax"))
  out = root / "assets" / _digest(packed, size, mtime_ns)[:24] / WEIGHTS_FILE
  if out.is_file():
    return out
  out.parent.mkdir(parents=True, exist_ok=True)
  tmp = out.with_name(f"{WEIGHTS_FILE}.tmp{os.getpid()}")
  try:
    tmp.write_bytes(lzma.decompress(packed.read_bytes()))
    os.replace(tmp, out)
  except lzma.LZMAError as e:
    raise CheckpointError(f"{packed}: corrupt xz file ({e})") from e
  finally:
    tmp.unlink(missing_ok=True)
  return out


def pack_weights(folder) -> pathlib.Path:
  """Replaces ``folder/model.safetensors`` by ``model.safetensors.xz`` (how checkpoints ship in
  ``specjax/assets``)."""
  plain = pathlib.Path(folder) / WEIGHTS_FILE
  packed = plain.with_name(PACKED_WEIGHTS_FILE)
  packed.write_bytes(lzma.compress(plain.read_bytes(), preset=9))
  plain.unlink()
  return packed
