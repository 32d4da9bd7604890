"""Drafters from the model's own text: ``suffix`` (SuffixDecoding's longest-suffix match over the
row, the batch and a pool of earlier outputs) and ``hybrid`` (the suffix draft where its match is
long, else another chain drafter's, per row and round, as SAM-Decoding does).

Both drafts are deterministic where they come from the index (``q`` one-hot on the token), so the
lossless rule accepts a suffix draft ``x`` with probability ``p(x)``: exact at every temperature.
Which rows use the suffix draft, and how many drafts each submits, are functions of the committed
text and the pool only (never of the target's distribution at the verified positions, nor of
anything the fallback drew).

**Scope** (``Suffix.scope``): ``"row"`` searches the row's own prompt and output; ``"batch"`` adds
the live text of other rows in the same call (the next ``suffix_index.PEERS``); ``"run"`` adds, to the
row's own text, the pool (:class:`suffix_index.Pool`), the
drafter's ``memory`` (:mod:`specjax.drafters.base`): an explicit input of every call (never a hidden
global), extended after the call with each prompt and its output (``learn_outputs``) and returned
as ``GenerateOutput.drafter``, to pass into the next call. A drafter value is its own snapshot:
repeating a call with the same drafter starts from the same pool. :func:`save_pool` /
:func:`load_pool` keep a pool on disk (:mod:`specjax.drafters.memory`'s format) with the
tokenizer's and checkpoint's hashes; loading it for another model is refused.
"""
from __future__ import annotations

import pathlib

import flax
import jax
import jax.numpy as jnp
import numpy as np

from specjax.drafters import memory as memory_lib
from specjax.drafters import suffix_index as index
from specjax.drafters.base import Draft, Drafter
from specjax.drafters.draft_model import DraftModel
from specjax.drafters.ngram import NGram

SCOPES = ("row", "batch", "run")


@flax.struct.dataclass
class Suffix(Drafter):
  pool: index.Pool | None = None  # scope "run": earlier text shared by every row and call
  scope: str = flax.struct.field(pytree_node=False, default="run")
  max_n: int = flax.struct.field(pytree_node=False, default=16)       # longest suffix matched
  min_match: int = flax.struct.field(pytree_node=False, default=1)    # shorter matches draft nothing
  top: int = flax.struct.field(pytree_node=False, default=32)         # latest occurrences counted
  factor: float = flax.struct.field(pytree_node=False, default=1.0)   # drafts <= ceil(factor * match)
  min_prob: float = flax.struct.field(pytree_node=False, default=0.1)  # stop below this share
  kind = "suffix"

  def __post_init__(self):
    if self.scope not in SCOPES:
      raise ValueError(f"suffix scope must be one of {SCOPES}, got {self.scope!r}")
    if self.scope == "run" and self.pool is None:
      raise ValueError("suffix scope 'run' needs a pool (Suffix.create(capacity=...) or load_pool)")
    for name, lo in (("max_n", 1), ("top", 1)):
      v = getattr(self, name)
      if isinstance(v, bool) or int(v) != v or v < lo:
        raise ValueError(f"suffix {name} must be an integer >= {lo}, got {v!r}")
    if int(self.min_match) != self.min_match or not 1 <= self.min_match <= self.max_n:
      raise ValueError(f"suffix min_match must be in 1..max_n={self.max_n}, got {self.min_match!r}")
    if not self.factor > 0:
      raise ValueError(f"suffix factor must be > 0, got {self.factor!r}")
    if not 0.0 <= self.min_prob <= 1.0:
      raise ValueError(f"suffix min_prob must be in [0, 1], got {self.min_prob!r}")

  @classmethod
  def create(cls, capacity: int = 32768, scope: str = "run", **settings) -> "Suffix":
    """A drafter with an empty pool of ``capacity`` tokens (scope "run"; none for "row"/"batch")."""
    return cls(index.Pool.create(capacity) if scope == "run" else None, scope=scope, **settings)

  def check_compatible(self, target) -> None:
    if self.pool is not None:
      top = int(jnp.max(self.pool.tokens_N))
      if top >= target.vocab_size:
        raise ValueError(f"suffix pool holds token id {top}, outside the target's vocabulary "
                         f"(vocab_size={target.vocab_size}): it was built with another tokenizer")

  def init(self, target, prompts_BxP, prompt_lengths_B, max_len, prefill=None):
    del target, prompts_BxP, prompt_lengths_B, max_len, prefill
    return ()

  def match(self, tokens_BxS, seq_len_B, gamma) -> index.Match:
    text_BxT, own_start = index.searched_text(self.pool if self.scope == "run" else None, tokens_BxS, seq_len_B,
                                              others=self.scope == "batch")
    return index.longest_match(text_BxT, own_start, seq_len_B, gamma, max_n=self.max_n, min_match=self.min_match,
                               top=self.top, factor=self.factor, min_prob=self.min_prob)

  def propose(self, state, tokens_BxS, seq_len_B, gamma, sampling, rng):
    del sampling, rng
    m = self.match(tokens_BxS, seq_len_B, gamma)
    return state, Draft(m.tokens_BxG, None, num_B=m.num_B, confidence_BxG=m.confidence_BxG)

  # ------------------------------------------------------------------ memory across calls
  @property
  def memory(self):
    return self.pool if self.scope == "run" else None

  def with_memory(self, memory) -> "Suffix":
    if self.scope != "run":
      return super().with_memory(memory)
    return self.replace(pool=memory)

  def learn_outputs(self, memory, prompts_BxP, prompt_lengths_B, outputs_BxN, output_lengths_B):
    """The pool with each row's prompt followed by its output appended, in row order."""
    prompts_BxP, outputs_BxN = np.asarray(prompts_BxP, np.int32), np.asarray(outputs_BxN, np.int32)
    pl, ol = np.asarray(prompt_lengths_B), np.asarray(output_lengths_B)
    docs = np.zeros((len(pl), prompts_BxP.shape[1] + outputs_BxN.shape[1]), np.int32)
    for b in range(len(pl)):
      doc = np.concatenate([prompts_BxP[b, :pl[b]], outputs_BxN[b, :ol[b]]])
      docs[b, :len(doc)] = doc
    return index.add(memory, jnp.asarray(docs), jnp.asarray(pl + ol, jnp.int32))

  def reset(self) -> "Suffix":
    """This drafter with an empty pool of the same capacity."""
    return self if self.pool is None else self.replace(pool=index.Pool.create(self.pool.capacity))


@flax.struct.dataclass
class Hybrid(Drafter):
  """Per row and round: the suffix draft where its match is at least ``min_suffix_match`` tokens long
  and it drafts something, else ``fallback``'s chain (a draft model, or prompt lookup)."""
  suffix: Suffix
  fallback: Drafter
  min_suffix_match: int = flax.struct.field(pytree_node=False, default=3)
  kind = "hybrid"

  def __post_init__(self):
    if not isinstance(self.fallback, (DraftModel, NGram)):
      raise ValueError(f"hybrid fallback must be a chain drafter whose state follows the committed text "
                       f"(draft_model or ngram), got {type(self.fallback).__name__}")
    if int(self.min_suffix_match) != self.min_suffix_match or self.min_suffix_match < 1:
      raise ValueError(f"hybrid min_suffix_match must be an integer >= 1, got {self.min_suffix_match!r}")

  @property
  def feature_layers(self):
    return self.fallback.feature_layers

  @property
  def num_params(self) -> int:
    return self.fallback.num_params

  def lossy_reason(self, sampling):
    return self.fallback.lossy_reason(sampling)

  def draft_models(self):
    return self.fallback.draft_models()

  def check_compatible(self, target) -> None:
    self.suffix.check_compatible(target)
    self.fallback.check_compatible(target)

  def stopping_below(self, confidence):
    return self.replace(fallback=self.fallback.stopping_below(confidence))

  def drafting_at_most(self, limit):
    return self.replace(fallback=self.fallback.drafting_at_most(limit))

  def init(self, target, prompts_BxP, prompt_lengths_B, max_len, prefill=None):
    used_B = jnp.zeros((prompts_BxP.shape[0],), bool)
    return self.fallback.init(target, prompts_BxP, prompt_lengths_B, max_len, prefill), used_B

  def propose(self, state, tokens_BxS, seq_len_B, gamma, sampling, rng):
    fb_state, _ = state
    m = self.suffix.match(tokens_BxS, seq_len_B, gamma)
    fb_state, fd = self.fallback.propose(fb_state, tokens_BxS, seq_len_B, gamma, sampling, rng)
    use_B = (m.match_B >= self.min_suffix_match) & (m.num_B > 0)
    tokens_BxG = jnp.where(use_B[:, None], m.tokens_BxG, fd.tokens_BxG)
    q = None
    if fd.q_BxGxV is not None:  # the suffix rows' q: one-hot on their tokens
      one_hot = jax.nn.one_hot(m.tokens_BxG, fd.q_BxGxV.shape[-1], dtype=fd.q_BxGxV.dtype)
      q = jnp.where(use_B[:, None, None], one_hot, fd.q_BxGxV)
    fb_num_B = jnp.full(use_B.shape, gamma, jnp.int32) if fd.num_B is None else fd.num_B
    fb_conf = jnp.ones(tokens_BxG.shape, jnp.float32) if fd.confidence_BxG is None else fd.confidence_BxG
    draft = Draft(tokens_BxG, q, num_B=jnp.where(use_B, m.num_B, fb_num_B).astype(jnp.int32),
                  confidence_BxG=jnp.where(use_B[:, None], m.confidence_BxG, fb_conf))
    return (fb_state, use_B), draft

  def idle(self, state, tokens_BxS, seq_len_B):
    fb_state, used_B = state
    if self.fallback.idle is not None:
      fb_state = self.fallback.idle(fb_state, tokens_BxS, seq_len_B)
    return fb_state, jnp.zeros_like(used_B)

  def commit(self, state, tokens_BxS, seq_len_B, n_accepted_B, target_hidden_BxTxE):
    fb_state, used_B = state
    fb_state = self.fallback.commit(fb_state, tokens_BxS, seq_len_B, n_accepted_B, target_hidden_BxTxE)
    if isinstance(self.fallback, DraftModel):  # its cache past the committed text holds its own discarded
      # drafts where the suffix's were verified: it feeds those slots again from the committed tokens
      fb_state = fb_state.with_length(jnp.where(used_B, jnp.minimum(fb_state.length_B, seq_len_B),
                                                fb_state.length_B))
    return fb_state, used_B

  @property
  def memory(self):  # the suffix pool (the fallbacks allowed keep nothing across calls)
    return self.suffix.memory

  def with_memory(self, memory) -> "Hybrid":
    return self.replace(suffix=self.suffix.with_memory(memory))

  def learn_outputs(self, memory, *texts):
    return self.suffix.learn_outputs(memory, *texts)

  def reset(self) -> "Hybrid":
    return self.replace(suffix=self.suffix.reset())


# ----------------------------------------------------------------------------- on disk
def hashes(target, tokenizer=None) -> dict:
  """The hashes a saved pool is checked against: the checkpoint's (every parameter byte,
  :func:`memory.params_hash`) and the tokenizer's (:func:`memory.tokenizer_hash` when one is
  given; else the vocabulary size, where only the target is known, as in a kind's build)."""
  tok = (memory_lib.tokenizer_hash(tokenizer, target.vocab_size) if tokenizer is not None
         else f"vocab_size={int(target.vocab_size)}")
  return {"tokenizer_hash": tok, "checkpoint_hash": memory_lib.params_hash(target)}


def save_pool(path, drafter, hashes_: dict) -> pathlib.Path:
  """Writes the pool of a ``suffix`` or ``hybrid`` drafter (scope "run") with ``hashes(target)``."""
  return memory_lib.save(path, drafter, **hashes_)


def load_pool(path, drafter, hashes_: dict):
  """``drafter`` carrying the pool saved at ``path``; refused (ValueError) when the file was saved for
  another tokenizer or checkpoint, or its capacity differs from ``drafter``'s."""
  if not pathlib.Path(path).is_file():
    raise FileNotFoundError(f"suffix pool file {path} does not exist")
  return memory_lib.load(path, drafter, **hashes_)


def pool_from_corpus(capacity: int, docs) -> index.Pool:
  """A pool holding ``docs`` (sequences of token ids) in order, e.g. text the target generated."""
  docs = [np.asarray(d, np.int32).reshape(-1) for d in docs]
  pool = index.Pool.create(capacity)
  if not docs:
    return pool
  width = max(len(d) for d in docs)
  arr = np.zeros((len(docs), max(width, 1)), np.int32)
  for i, d in enumerate(docs):
    arr[i, :len(d)] = d
  return index.add(pool, jnp.asarray(arr), jnp.asarray([len(d) for d in docs], jnp.int32))
