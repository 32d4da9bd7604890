"""Tokenizers. Byte-level by default; anything with encode/decode/vocab_size/specials plugs in."""
from __future__ import annotations

import dataclasses
import importlib
from typing import Protocol


def require_package(module: str, pip_name: str, what: str):
  """An optional third-party package, or an ImportError that says how to install it."""
  try:
    return importlib.import_module(module)
  except ImportError as e:
    raise ImportError(f"{what} needs the `{pip_name}` package: pip install {pip_name}") from e


class Tokenizer(Protocol):
  vocab_size: int
  pad_id: int
  bos_id: int
  eos_id: int

  def encode(self, text: str) -> list[int]: ...
  def decode(self, ids) -> str: ...


@dataclasses.dataclass(frozen=True)
class ByteTokenizer:
  """UTF-8 bytes are ids 0..255; specials follow; vocab padded to a multiple of 8 for sharding."""
  vocab_size: int = 264
  pad_id: int = 256
  bos_id: int = 257
  eos_id: int = 258

  def encode(self, text: str) -> list[int]:
    return list(text.encode("utf-8"))

  def decode(self, ids) -> str:
    return bytes(int(i) for i in ids if 0 <= int(i) < 256).decode("utf-8", errors="replace")
