"""The Python standard library's source as a code corpus (every machine has it).

Files under test folders are excluded. The train / held-out split is by file, decided by a hash
of the relative path, so it is the same on every machine with the same Python version.
"""
from __future__ import annotations

import hashlib
import pathlib
import sysconfig

import numpy as np

from specjax.data.tokenizer import ByteTokenizer

_EXCLUDE_PARTS = {"test", "tests", "idle_test", "site-packages", "__pycache__", "lib2to3"}


def stdlib_root(root: str | None = None) -> pathlib.Path:
  return pathlib.Path(root or sysconfig.get_paths()["stdlib"])


def stdlib_files(root: str | None = None) -> list[pathlib.Path]:
  root_path = stdlib_root(root)
  if not root_path.is_dir():
    raise FileNotFoundError(f"stdlib source folder not found: {root_path}")
  files = [p for p in sorted(root_path.rglob("*.py"))
           if not _EXCLUDE_PARTS.intersection(p.relative_to(root_path).parts[:-1])]
  if not files:
    raise FileNotFoundError(f"no .py files under {root_path}")
  return files


def is_held_out(rel_path: str, held_out_percent: int = 5) -> bool:
  digest = hashlib.sha256(rel_path.encode()).digest()
  return digest[0] * 100 // 256 < held_out_percent


def load_split(split: str, tokenizer=ByteTokenizer(), root: str | None = None,
               held_out_percent: int = 5) -> np.ndarray:
  """All files of one split ('train' or 'held_out'), tokenized and joined with EOS."""
  if split not in ("train", "held_out"):
    raise ValueError(f"split must be 'train' or 'held_out', got {split!r}")
  base = stdlib_root(root)
  ids: list[int] = []
  for path in stdlib_files(root):
    rel = str(path.relative_to(base))
    if is_held_out(rel, held_out_percent) == (split == "held_out"):
      ids.extend(tokenizer.encode(path.read_text(encoding="utf-8", errors="replace")))
      ids.append(tokenizer.eos_id)
  return np.asarray(ids, np.int32)


def batch_at(data: np.ndarray, step: int, batch_size: int, seq_len: int, seed: int) -> np.ndarray:
  """Random crops ``[batch, seq_len + 1]``; a pure function of (seed, step) so resume is exact."""
  rng = np.random.default_rng([seed, step])
  starts = rng.integers(0, len(data) - seq_len - 1, size=batch_size)
  return np.stack([data[s:s + seq_len + 1] for s in starts])


def held_out_prompts(n: int, prompt_len: int, tokenizer=ByteTokenizer(), seed: int = 0,
                     root: str | None = None) -> list[np.ndarray]:
  """Prompts cut from held-out files at line starts (deterministic)."""
  data = load_split("held_out", tokenizer, root)
  newline = tokenizer.encode("\n")[0]
  starts = np.flatnonzero(data[:-prompt_len - 1] == newline) + 1
  rng = np.random.default_rng(seed)
  chosen = rng.choice(starts, size=n, replace=False)
  return [data[s:s + prompt_len] for s in sorted(chosen)]
