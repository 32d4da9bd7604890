"""A unigram / bigram table drafter: c ~ 0 (Leviathan §4.2 got 1.25X from a bigram drafter).

``log_probs`` is ``[V]`` (order 1: q(x)) or ``[V, V]`` (order 2: q(x | previous token)), counted from
a token corpus with add-``smoothing``. A chain follows the table: greedy takes the argmax, sampling
draws from the row after the same temperature / top-k / top-p as the target (the table's
log-probs are the logits), and the drafter returns that q, so the lossless rule is exact.
A bigram table is ``V * V`` floats: fine for byte-level vocabularies, not for 100k-token ones. For
those, ``subset_K`` truncates it (:mod:`specjax.drafters.vocab`): the table covers ``K`` ids, ``[K]``
or ``[K + 1, K]`` (rows: the previous token's place in the subset; row ``K``: a previous token
outside it), q is zero outside the subset, and the lossless rule stays exact.
"""
from __future__ import annotations

import flax
import jax
import jax.numpy as jnp
import numpy as np

from specjax.drafters import vocab
from specjax.drafters.base import Draft, Drafter


@flax.struct.dataclass
class TableDrafter(Drafter):
  log_probs: jax.Array  # [W] (order 1) or [R, W] (order 2: row = previous token); W = V, or K with a subset
  subset_K: jax.Array | None = None  # int32 token ids the table's columns stand for (None: all V)
  row_of_V: jax.Array | None = None  # with a subset: previous token id -> its row (K: outside the subset)
  kind = "table"

  @property
  def num_params(self) -> int:  # counted table entries, not trained weights
    return int(self.log_probs.size)

  @property
  def order(self) -> int:
    return self.log_probs.ndim

  @property
  def vocab_size(self) -> int:
    return self.log_probs.shape[-1] if self.subset_K is None else int(self.row_of_V.shape[0])

  @classmethod
  def from_corpus(cls, tokens, vocab_size: int, order: int = 2, smoothing: float = 0.1,
                  subset_K=None) -> "TableDrafter":
    """Counts unigrams (order 1) or bigrams (order 2) in a 1-D int array (or rows of one); with
    ``subset_K`` only next tokens inside the subset are counted (a ``[K + 1, K]`` bigram table)."""
    if order not in (1, 2):
      raise ValueError(f"TableDrafter order must be 1 (unigram) or 2 (bigram), got {order}")
    if not smoothing > 0:
      raise ValueError(f"smoothing must be > 0 (every token needs q > 0), got {smoothing}")
    rows = [np.asarray(r).ravel() for r in (tokens if isinstance(tokens, (list, tuple)) else [tokens])]
    if any(r.size and (r.min() < 0 or r.max() >= vocab_size) for r in rows):
      bad = next(int(x) for r in rows for x in r if not 0 <= x < vocab_size)
      raise ValueError(f"corpus token {bad} is outside the vocabulary [0, {vocab_size})")
    row_of_V = np.arange(vocab_size)
    if subset_K is not None:
      vocab.check_subset(subset_K, vocab_size, "TableDrafter")
      k = len(subset_K)
      row_of_V = np.full(vocab_size, k, np.int64)
      row_of_V[np.asarray(subset_K)] = np.arange(k)
    n = int(row_of_V.max()) + 1  # K + 1 places with a subset (the last: outside it), V without
    counts = np.full((n,) * order, smoothing, np.float64)
    for r in rows:
      r = row_of_V[r.astype(np.int64)]
      if order == 1:
        counts += np.bincount(r, minlength=n)
      elif r.size > 1:
        counts += np.bincount(r[:-1] * n + r[1:], minlength=n ** 2).reshape(n, n)
    if subset_K is not None:  # next tokens outside the subset get q = 0: drop their column
      counts = counts[..., :-1]
    log_probs = np.log(counts) - np.log(counts.sum(-1, keepdims=True))
    if subset_K is None:
      return cls(jnp.asarray(log_probs, jnp.float32))
    return cls(jnp.asarray(log_probs, jnp.float32), jnp.asarray(subset_K, jnp.int32),
               jnp.asarray(row_of_V, jnp.int32))

  def check_compatible(self, target) -> None:
    if self.vocab_size != target.vocab_size:
      raise ValueError(f"table drafter vocab_size={self.vocab_size} differs from target "
                       f"vocab_size={target.vocab_size}; build the table with the target's tokenizer")

  def init(self, target, prompts_BxP, prompt_lengths_B, max_len, prefill=None):
    del target, prompts_BxP, prompt_lengths_B, max_len, prefill
    return ()

  def _row(self, prev_B):
    if self.order == 1:
      return jnp.broadcast_to(self.log_probs, prev_B.shape + self.log_probs.shape)
    return self.log_probs[prev_B if self.row_of_V is None else self.row_of_V[prev_B]]

  def propose(self, state, tokens_BxS, seq_len_B, gamma, sampling, rng):
    last_B = jnp.take_along_axis(tokens_BxS, (seq_len_B - 1)[:, None], 1)[:, 0]

    def step(prev_B, step_rng):
      logits_BxV = self._row(prev_B)
      token_B, q_BxV = vocab.draw(sampling, step_rng, logits_BxV, self.subset_K, self.vocab_size)  # q None: greedy
      return token_B, (token_B, q_BxV)

    _, (tokens_GxB, q_GxBxV) = jax.lax.scan(step, last_B, jax.random.split(rng, gamma))
    return state, Draft(tokens_GxB.T, None if q_GxBxV is None else jnp.transpose(q_GxBxV, (1, 0, 2)))
