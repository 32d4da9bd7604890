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


@dataclasses.dataclass(frozen=True)
class SentencePieceTokenizer:
  """Wraps a SentencePiece model file (needs the optional `sentencepiece` package)."""
  model_path: str

  def __post_init__(self):
    try:
      import sentencepiece as spm  # pylint: disable=import-outside-toplevel
    except ImportError as e:
      raise ImportError("SentencePieceTokenizer needs `pip install sentencepiece`") from e
    object.__setattr__(self, "_sp", spm.SentencePieceProcessor(model_file=self.model_path))

  vocab_size = property(lambda self: self._sp.get_piece_size())
  pad_id = property(lambda self: max(self._sp.pad_id(), 0))
  bos_id = property(lambda self: self._sp.bos_id())
  eos_id = property(lambda self: self._sp.eos_id())

  def encode(self, text: str) -> list[int]:
    return self._sp.encode(text)

  def decode(self, ids) -> str:
    return self._sp.decode([int(i) for i in ids])
