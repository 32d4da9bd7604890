"""The ``suffix`` and ``hybrid`` kinds: their options (defaults in one place) and builds.

``pool_file``: a pool saved with :func:`specjax.drafters.suffix.save_pool` for this target, with
``suffix.hashes(target)`` (loading one saved for another tokenizer or checkpoint is refused; the
``capacity`` must be the saved one). ``corpus``: a folder written by
``python -m specjax.train data`` (its train shards: prompts and the target's own continuations)
appended to the pool, oldest first; what does not fit the ``capacity`` is evicted.
"""
from __future__ import annotations

import dataclasses
import pathlib

import numpy as np

from specjax.drafters.registry import Options, register


@dataclasses.dataclass(frozen=True)
class SuffixOptions(Options):
  scope: str = "run"      # row | batch (plus other rows' live text) | run (plus a pool kept across calls)
  capacity: int = 32768   # pool tokens (scope run); the oldest are evicted first
  max_n: int = 16         # longest suffix matched
  min_match: int = 1      # shortest match that drafts
  top: int = 32           # latest occurrences of the match whose continuations are counted
  factor: float = 1.0     # drafts per round <= ceil(factor * match length), and <= gamma
  min_prob: float = 0.1   # the chain stops where its token's share of the occurrences falls below
  pool_file: str = ""     # a saved pool to start from (scope run)
  corpus: str = ""        # a `python -m specjax.train data` folder to start the pool from (scope run)


@dataclasses.dataclass(frozen=True)
class HybridOptions(SuffixOptions):
  fallback: str = "draft_model"  # draft_model (drafter.checkpoint) | ngram
  min_suffix_match: int = 3      # shorter suffix matches use the fallback's draft


def corpus_docs(folder) -> list:
  """Each train shard's prompts followed by the target's continuations, in shard order."""
  shards = sorted((pathlib.Path(folder).expanduser() / "shards").glob("*.npz"))
  if not shards:
    raise FileNotFoundError(f"suffix corpus {folder}: no shards/*.npz (write one with `python -m specjax.train data`)")
  docs = []
  for shard in shards:
    with np.load(shard) as z:
      for p, pl, t, tl in zip(z["prompts"], z["prompt_lengths"], z["tokens"], z["lengths"]):
        docs.append(np.concatenate([p[:pl], t[:tl]]))
  return docs


def build_suffix(options, target):
  from specjax.drafters import suffix  # pylint: disable=import-outside-toplevel
  from specjax.drafters import suffix_index  # pylint: disable=import-outside-toplevel
  settings = dict(max_n=options.max_n, min_match=options.min_match, top=options.top, factor=float(options.factor),
                  min_prob=float(options.min_prob))
  if options.scope != "run":
    if options.pool_file or options.corpus:
      raise ValueError(f"suffix pool_file/corpus need scope='run', got scope={options.scope!r}")
    return suffix.Suffix(None, scope=options.scope, **settings)
  if options.pool_file and options.corpus:
    raise ValueError("suffix: give pool_file or corpus, not both")
  pool = suffix_index.Pool.create(options.capacity)
  if options.corpus:
    pool = suffix.pool_from_corpus(options.capacity, corpus_docs(options.corpus))
  drafter = suffix.Suffix(pool, scope="run", **settings)
  if options.pool_file:
    drafter = suffix.load_pool(options.pool_file, drafter, suffix.hashes(target))
  return drafter


def build_hybrid(options, target):
  from specjax.drafters import builtin  # pylint: disable=import-outside-toplevel
  from specjax.drafters import suffix  # pylint: disable=import-outside-toplevel
  from specjax.drafters.draft_model import DraftModel  # pylint: disable=import-outside-toplevel
  from specjax.drafters.ngram import NGram  # pylint: disable=import-outside-toplevel
  if options.fallback == "draft_model":
    fallback = DraftModel(*builtin._small_model(options, target))  # pylint: disable=protected-access
  elif options.fallback == "ngram":
    fallback = NGram()
  else:
    raise ValueError(f"hybrid fallback must be 'draft_model' or 'ngram', got {options.fallback!r}")
  drafter = suffix.Hybrid(build_suffix(dataclasses.replace(options, pool_file=""), target), fallback,
                          min_suffix_match=options.min_suffix_match)
  if options.pool_file:  # a hybrid's pool file (its kind is checked)
    drafter = suffix.load_pool(options.pool_file, drafter, suffix.hashes(target))
  return drafter


def register_kinds() -> None:
  register("suffix", build_suffix, SuffixOptions)
  register("hybrid", build_hybrid, HybridOptions)
