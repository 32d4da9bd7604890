"""Prompt lookup: propose what followed the latest earlier occurrence of the row's last n tokens.

Falls back to shorter suffixes (n-1, ..., min_match) when the longest has no earlier occurrence.
``Draft.num_B`` is the number of tokens that really followed the match (at most gamma), 0 when
there is no match: with the loop's adaptive draft length such a row costs one plain decode step.
With ``periodic`` (default) a match whose continuation ends before gamma tokens is extended as a
repetition: the text since the match, of period ``seq_len - start``, is assumed to repeat, so a
row stuck in a short loop drafts the full gamma tokens of it (``num_B = gamma``).
Its q is one-hot: the draft is deterministic given the context, so the lossless rule accepts draft
x with probability p(x).
"""
from __future__ import annotations

import flax
import jax
import jax.numpy as jnp

from specjax.drafters.base import Draft, Drafter
from specjax.models import kv_cache


@flax.struct.dataclass
class NGram(Drafter):
  n: int = flax.struct.field(pytree_node=False, default=3)
  min_match: int = flax.struct.field(pytree_node=False, default=1)
  periodic: bool = flax.struct.field(pytree_node=False, default=True)
  kind = "ngram"

  def __post_init__(self):
    if int(self.n) != self.n or self.n < 1:
      raise ValueError(f"NGram n must be a positive integer, got {self.n}")
    if int(self.min_match) != self.min_match or not 1 <= self.min_match <= self.n:
      raise ValueError(f"NGram min_match must be in 1..n={self.n}, got {self.min_match}")

  def init(self, target, prompts_BxP, prompt_lengths_B, max_len, prefill=None):
    del target, prompts_BxP, prompt_lengths_B, max_len, prefill
    return ()

  def propose(self, state, tokens_BxS, seq_len_B, gamma, sampling, rng):
    del sampling, rng
    b, s = tokens_BxS.shape
    pos_S = jnp.arange(s)
    best_start_B = jnp.full((b,), -1, jnp.int32)
    for k in range(self.min_match, self.n + 1):  # longer suffixes override shorter ones
      suffix_Bxk = kv_cache.gather_rows(tokens_BxS, jnp.maximum(seq_len_B[:, None] - k + jnp.arange(k), 0))
      match_BxS = jnp.ones((b, s), bool)
      for i in range(k):
        shifted = jnp.roll(tokens_BxS, -i, axis=1)
        match_BxS &= shifted == suffix_Bxk[:, i:i + 1]
      # the window [j, j+k) must end before the suffix itself starts repeating it: j + k < seq_len
      match_BxS &= (pos_S[None] + k < seq_len_B[:, None]) & (seq_len_B[:, None] >= k + 1)
      latest_B = jnp.max(jnp.where(match_BxS, pos_S[None], -1), axis=1)
      found = latest_B >= 0
      best_start_B = jnp.where(found, latest_B + k, best_start_B)  # first token after the window
    fallback_B = seq_len_B - 1
    start_B = jnp.where(best_start_B >= 0, best_start_B, fallback_B)
    found_B = best_start_B >= 0
    j_G = jnp.arange(gamma)[None]
    if self.periodic:  # past the known continuation, repeat it: period seq_len - start >= 1
      period_B = jnp.maximum(seq_len_B - start_B, 1)
      idx_BxG = start_B[:, None] + j_G % period_B[:, None]
      num_B = jnp.where(found_B, gamma, 0).astype(jnp.int32)
    else:
      idx_BxG = jnp.minimum(start_B[:, None] + j_G, seq_len_B[:, None] - 1)
      num_B = jnp.where(found_B, jnp.minimum(seq_len_B - best_start_B, gamma), 0).astype(jnp.int32)
    idx_BxG = jnp.where(found_B[:, None], idx_BxG, fallback_B[:, None])
    tokens_BxG = kv_cache.gather_rows(tokens_BxS, idx_BxG)
    return state, Draft(tokens_BxG, None, num_B=num_B)  # None: one-hot q, built by the loop
