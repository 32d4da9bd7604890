"""The ``suffix`` and ``hybrid`` kinds (:mod:`specjax.drafters.suffix`): options, builds, exactness cases.

``pool_file``: a pool saved with :func:`specjax.drafters.suffix.save_pool` for this target, with
``suffix.hashes(target)`` (loading one saved for another tokenizer or checkpoint is refused; the
``capacity`` must be the saved one). ``corpus``: a folder written by
``python -m specjax.train data`` (its train shards: prompts and the target's own continuations,
e.g. ``--questions=FILE`` for chat answers), held whole in a fixed pool of its own
(``Suffix.corpus``, any scope) searched after the row's text and the pool.
"""
from __future__ import annotations

import dataclasses

import numpy as np

from specjax import drafters



@dataclasses.dataclass(frozen=True)
class SuffixOptions(drafters.Options):
  scope: str = "run"      # row | batch (plus other rows' live text) | run (plus a pool kept across calls)
  capacity: int = 32768   # pool tokens (scope run); the oldest are evicted first
  max_n: int = 16         # longest suffix matched
  min_match: int = 1      # shortest match that drafts
  top: int = 32           # latest occurrences of the match whose continuations are counted
  factor: float = 1.0     # drafts per round <= ceil(factor * match length), and <= gamma
  min_prob: float = 0.1   # the chain stops where its token's share of the occurrences falls below
  pool_file: str = ""     # a saved pool to start from (scope run)
  corpus: str = ""        # a `python -m specjax.train data` folder: fixed text searched after the pool


@dataclasses.dataclass(frozen=True)
class HybridOptions(SuffixOptions):
  fallback: str = "draft_model"  # draft_model (drafter.checkpoint) | ngram
  min_suffix_match: int = 3      # shorter suffix matches use the fallback's draft


def build_suffix(options, target):
  from specjax.data import generated  # pylint: disable=import-outside-toplevel
  from specjax.drafters import suffix  # pylint: disable=import-outside-toplevel
  from specjax.drafters import suffix_index  # pylint: disable=import-outside-toplevel
  settings = dict(max_n=options.max_n, min_match=options.min_match, top=options.top, factor=float(options.factor),
                  min_prob=float(options.min_prob))
  corpus = suffix.corpus_pool(generated.corpus_docs(options.corpus)) if options.corpus else None
  if options.scope != "run":
    if options.pool_file:
      raise ValueError(f"suffix pool_file needs scope='run', got scope={options.scope!r}")
    return suffix.Suffix(None, corpus, scope=options.scope, **settings)
  drafter = suffix.Suffix(suffix_index.Pool.create(options.capacity), corpus, scope="run", **settings)
  if options.pool_file:
    drafter = suffix.load_pool(options.pool_file, drafter, suffix.hashes(target))
  return drafter


def build_hybrid(options, target):
  from specjax.drafters import weights  # pylint: disable=import-outside-toplevel
  from specjax.drafters import suffix  # pylint: disable=import-outside-toplevel
  from specjax.drafters.draft_model import DraftModel  # pylint: disable=import-outside-toplevel
  from specjax.drafters.ngram import NGram  # pylint: disable=import-outside-toplevel
  if options.fallback == "draft_model":
    fallback = DraftModel(*weights.small_model(options.checkpoint, target))
  elif options.fallback == "ngram":
    fallback = NGram()
  else:
    raise ValueError(f"hybrid fallback must be 'draft_model' or 'ngram', got {options.fallback!r}")
  drafter = suffix.Hybrid(build_suffix(dataclasses.replace(options, pool_file=""), target), fallback,
                          min_suffix_match=options.min_suffix_match)
  if options.pool_file:  # a hybrid's pool file (its kind is checked)
    drafter = suffix.load_pool(options.pool_file, drafter, suffix.hashes(target))
  return drafter


# ----------------------------------------------------------------------------- exactness cases
def sampled_text(target, draws: int = 6, width: int = 6):
  """The sampled cells' target's own text: ``draws`` continuations of every matrix prompt at T = 1,
  so that suffix drafts are accepted at every depth (drafts from random text rarely are)."""
  import jax  # pylint: disable=import-outside-toplevel
  import specjax  # pylint: disable=import-outside-toplevel
  from specjax.conformance.cases import PROMPTS  # pylint: disable=import-outside-toplevel
  rows = [PROMPTS[n] for n in sorted(PROMPTS)] * draws
  prompts = np.zeros((len(rows), max(map(len, rows))), np.int32)
  for i, r in enumerate(rows):
    prompts[i, :len(r)] = r
  out = specjax.generate(target, prompts, np.array([len(r) for r in rows], np.int32), max_new_tokens=width,
                         sampling=specjax.Sampling(1.0), rng=jax.random.PRNGKey(7))
  return [tuple(r) + tuple(int(x) for x in c) for r, c in zip(rows, np.asarray(out.tokens))]


_SAMPLED = {}


def _pool(m, capacity=256):
  """A suffix pool of the target's own text (greedy cells: its greedy text; sampled: T = 1 draws)."""
  from specjax.drafters import suffix  # pylint: disable=import-outside-toplevel
  if m.greedy:
    return suffix.pool_from_corpus(capacity, list(m.corpus))
  if "text" not in _SAMPLED:
    _SAMPLED["text"] = sampled_text(m.target)
  return suffix.pool_from_corpus(capacity, _SAMPLED["text"])


def _suffix(m, scope="run", corpus=False, **settings):
  """Scope run: the target's text in the pool, or (``corpus``) in the fixed corpus beside an empty pool."""
  from specjax.drafters import suffix  # pylint: disable=import-outside-toplevel
  from specjax.drafters import suffix_index  # pylint: disable=import-outside-toplevel
  settings = dict(dict(max_n=4, factor=2.0, min_prob=0.0), **settings)  # factor 2: a 1-token match drafts 2
  if corpus:
    return suffix.Suffix(suffix_index.Pool.create(64), _pool(m), scope=scope, **settings)
  return suffix.Suffix(_pool(m) if scope == "run" else None, scope=scope, **settings)


def _from_file(m, kind="suffix", **options):
  """Through the registry: the pool saved with the target's hashes, then loaded by ``pool_file``."""
  import tempfile  # pylint: disable=import-outside-toplevel
  from specjax.drafters import suffix  # pylint: disable=import-outside-toplevel
  with tempfile.TemporaryDirectory() as tmp:
    path = suffix.save_pool(f"{tmp}/pool.npz", drafters.build(kind, dict(options, capacity=256), m.target).with_memory(
        _pool(m)), suffix.hashes(m.target))
    return drafters.build(kind, dict(options, pool_file=str(path), capacity=256, max_n=3, factor=2.0, min_prob=0.0),
                          m.target)


def _hybrid(m, fallback, scope="run"):
  from specjax.drafters import suffix  # pylint: disable=import-outside-toplevel
  fb = drafters.DraftModel(m.small) if fallback == "draft_model" else drafters.NGram(2)
  return suffix.Hybrid(_suffix(m, scope), fb, min_suffix_match=2)


SETTINGS = ("max_n", "factor", "min_prob")


def suffix_cases():
  return (
      drafters.Case("suffix/scope=row", ("scope=row", "min_match") + SETTINGS,
                    lambda m: _suffix(m, "row", max_n=3, min_match=1)),
      drafters.Case("suffix/scope=batch/adaptive", ("scope=batch", "adaptive") + SETTINGS,
                    lambda m: _suffix(m, "batch", max_n=3), adaptive=True),
      drafters.Case("suffix/scope=run,corpus", ("scope=run", "capacity", "corpus", "top") + SETTINGS,
                    lambda m: _suffix(m, top=8, corpus=True)),
      drafters.Case("suffix/pool_file", ("scope=run", "pool_file", "top") + SETTINGS, lambda m: _from_file(m, top=4)),
  )


def hybrid_cases():
  return (
      drafters.Case("hybrid/fallback=draft_model",
                    ("fallback=draft_model", "min_suffix_match", "scope=run", "capacity", "corpus") + SETTINGS,
                    lambda m: _hybrid(m, "draft_model")),
      drafters.Case("hybrid/fallback=draft_model/adaptive", ("fallback=draft_model", "adaptive", "min_suffix_match"),
                    lambda m: _hybrid(m, "draft_model"), adaptive=True),
      drafters.Case("hybrid/fallback=ngram,pool_file",
                    ("fallback=ngram", "scope=run", "min_match", "top", "pool_file", "min_suffix_match") + SETTINGS,
                    lambda m: _from_file(m, "hybrid", fallback="ngram", min_match=1, top=4, min_suffix_match=2)),
  )


SUFFIX = drafters.register_kind(drafters.KindSpec(
    kind="suffix", build=build_suffix, options=SuffixOptions, label="suffix index", cases=suffix_cases))
HYBRID = drafters.register_kind(drafters.KindSpec(
    kind="hybrid", build=build_hybrid, options=HybridOptions, label="suffix + fallback", cases=hybrid_cases))
