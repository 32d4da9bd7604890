"""Reading the target-generated data that ``python -m specjax.train data`` writes.

A data folder holds ``shards/NNNNN.npz`` (train) and ``held_out/NNNNN.npz``, each one batch:
``prompts`` [B, P] (right-padded), ``prompt_lengths``, ``tokens`` [B, T] (the target's greedy
continuation, pad past ``lengths``), ``lengths``, ``kinds`` (code / ende / text), ``sources``.
"""
from __future__ import annotations

import pathlib

import numpy as np

from specjax.paths import cache_dir


def default_out(target: str) -> pathlib.Path:
  """``~/.cache/specjax/data/<target name>`` (``$SPECJAX_CACHE`` moves it)."""
  return cache_dir() / "data" / pathlib.Path(target).name.replace(".gguf", "")


def load_shards(folder, split: str = "shards") -> dict:
  """All shards of a data folder concatenated (prompts, prompt_lengths, tokens, lengths, kinds);
  ``split`` "shards" (train) or "held_out"."""
  files = sorted((pathlib.Path(folder) / split).glob("[0-9]*[0-9].npz"))
  if not files:
    raise FileNotFoundError(f"no shards under {folder}/{split}; run python -m specjax.train data")
  parts = [dict(np.load(f)) for f in files]
  for k in ("prompts", "tokens"):  # shards of whole prompts (--questions) have their own widths: right-pad
    width = max(p[k].shape[1] for p in parts)
    for p in parts:
      p[k] = np.pad(p[k], ((0, 0), (0, width - p[k].shape[1])))
  return {k: np.concatenate([p[k] for p in parts]) for k in ("prompts", "prompt_lengths", "tokens", "lengths", "kinds")}


def corpus_docs(folder) -> list[np.ndarray]:
  """Each train row's prompt followed by the target's continuation, in shard order (a suffix pool's
  documents)."""
  d = load_shards(pathlib.Path(folder).expanduser())
  return [np.concatenate([p[:pl], t[:tl]]) for p, pl, t, tl in
          zip(d["prompts"], d["prompt_lengths"], d["tokens"], d["lengths"])]


def corpus_prompts(folder) -> list[np.ndarray]:
  """Each train row's prompt ids (to check that an evaluated prompt is not among them)."""
  d = load_shards(pathlib.Path(folder).expanduser())
  return [p[:pl] for p, pl in zip(d["prompts"], d["prompt_lengths"])]


def token_counts(folder, vocab_size: int) -> np.ndarray:
  d = load_shards(folder)
  valid = np.arange(d["tokens"].shape[1])[None] < d["lengths"][:, None]
  return np.bincount(d["tokens"][valid].ravel(), minlength=vocab_size).astype(np.int64)


def joined(d) -> tuple[np.ndarray, np.ndarray]:
  """``[N, P + T]`` prompt + continuation ids (right-padded) and a mask of continuation tokens."""
  n, p = d["prompts"].shape
  t = d["tokens"].shape[1]
  seq = np.zeros((n, p + t), np.int32)
  gen = np.zeros((n, p + t), bool)
  for i in range(n):
    pl, gl = d["prompt_lengths"][i], d["lengths"][i]
    seq[i, :pl] = d["prompts"][i, :pl]
    seq[i, pl:pl + gl] = d["tokens"][i, :gl]
    gen[i, pl:pl + gl] = True
  return seq, gen


def crops(folder, split: str, crop: int) -> tuple[np.ndarray, dict]:
  """``[N, crop]`` rows, one per sequence: the last ``crop // 4`` prompt tokens and the continuation
  after them (the heads' training text), and the split's data."""
  d = load_shards(folder, split)
  seq, _ = joined(d)
  if seq.shape[1] < crop:
    raise ValueError(f"crop={crop} is longer than the generated sequences ({seq.shape[1]} tokens)")
  start = np.clip(d["prompt_lengths"] - crop // 4, 0, seq.shape[1] - crop)
  return np.stack([seq[i, s:s + crop] for i, s in enumerate(start)]), d


def eval_prompts(d: dict, n: int = 4, length: int = 32) -> np.ndarray:
  """``[n, length]`` held-out prompts cut to one length (no padding), for acceptance measurements."""
  idx = np.flatnonzero(d["prompt_lengths"] >= length)[:n]
  return d["prompts"][idx, :length].astype(np.int32)
