"""A separate, smaller autoregressive model with its own KV cache (Leviathan; Chen's SpS).

``subset_K`` (optional): draft-vocabulary truncation (:mod:`specjax.drafters.vocab`): the model's
logits cover those ``K`` ids (a ``K``-wide head, e.g. :mod:`specjax.models.draft_lm`) or are cut
to them (a full-vocabulary model); q is zero outside the subset, exactly as lossless.
"""
from __future__ import annotations

import flax
import jax
import jax.numpy as jnp

from specjax.drafters import vocab
from specjax.drafters.base import Draft, Drafter, top_probability
from specjax.models import api, kv_cache
from specjax.models.bundle import Model


@flax.struct.dataclass
class DraftModel(Drafter):
  model: Model
  subset_K: jax.Array | None = None  # int32 token ids the drafter's logits cover (None: all)
  kind = "draft_model"

  @property
  def num_params(self) -> int:
    stored = getattr(self.model.module, "stored_params", None)  # draft_lm: frozen target parts excluded
    return stored(self.model.params) if stored else self.model.num_params

  def _draw(self, sampling, rng, logits_BxW):
    return vocab.draw(sampling, rng, logits_BxW, self.subset_K, self.model.vocab_size)

  def check_compatible(self, target) -> None:
    if self.model.vocab_size != target.vocab_size:
      raise ValueError(f"drafter vocab_size={self.model.vocab_size} differs from target "
                       f"vocab_size={target.vocab_size}; both must share one tokenizer")
    if self.model.is_encoder_decoder != target.is_encoder_decoder:
      raise ValueError("drafter and target must both be decoder-only or both encoder-decoder")
    out = getattr(self.model.config, "out_vocab", 0) or self.model.vocab_size  # width of its logits
    if self.subset_K is None:
      if out != target.vocab_size:
        raise ValueError(f"drafter predicts {out} tokens but the target's vocab_size is {target.vocab_size}: "
                         "a truncated drafter needs its subset_K (DraftModel(model, subset_K=ids))")
      return
    vocab.check_subset(self.subset_K, target.vocab_size, "DraftModel")
    k = int(self.subset_K.shape[0])
    if out not in (k, target.vocab_size):
      raise ValueError(f"drafter predicts {out} tokens but its vocab subset has K={k} ids "
                       f"(expected {k}, or the full vocab_size={target.vocab_size})")

  def draft_models(self) -> tuple:
    return (self.model,)

  def init(self, target, prompts_BxP, prompt_lengths_B, max_len, prefill=None):
    del target, prefill
    return api.start(self.model, prompts_BxP, prompt_lengths_B, max_len)[0]

  def propose(self, cache, tokens_BxS, seq_len_B, gamma, sampling, rng):
    # The cache may lack the last one or two committed tokens (a bonus round leaves the last
    # draft unseen), so every round rolls back to seq_len - 2 and feeds two tokens; rewriting a
    # slot with the same token at the same position is a no-op.
    start_B = jnp.maximum(seq_len_B - 2, 0)
    cache = cache.with_length(start_B)
    two_Bx2 = kv_cache.gather_rows(tokens_BxS, start_B[:, None] + jnp.arange(2)[None])
    logits_Bx2xV, _, cache = api.forward(self.model, two_Bx2, cache)
    logits_BxV = jnp.take_along_axis(logits_Bx2xV, (seq_len_B - 1 - start_B)[:, None, None], 1)[:, 0]
    cache = cache.with_length(seq_len_B)

    def step(carry, step_rng):
      cache, logits_BxV = carry
      token_B, q_BxV = self._draw(sampling, step_rng, logits_BxV)  # q None when greedy
      top_B = top_probability(logits_BxV)  # the distribution's, not the drawn token's
      logits_Bx1xV, _, cache = api.forward(self.model, token_B[:, None], cache)
      return (cache.with_length(cache.length_B + 1), logits_Bx1xV[:, 0]), (token_B, q_BxV, top_B)

    rngs = jax.random.split(rng, gamma)
    (cache, logits_BxV), (tokens_GxB, q_GxBxV, top_GxB) = jax.lax.scan(step, (cache, logits_BxV), rngs[:-1])
    last_token, last_q = self._draw(sampling, rngs[-1], logits_BxV)
    tokens_BxG = jnp.concatenate([tokens_GxB.T, last_token[:, None]], axis=1)
    q_BxGxV = None if sampling.greedy else jnp.concatenate([jnp.transpose(q_GxBxV, (1, 0, 2)), last_q[:, None]],
                                                           axis=1)
    confidence_BxG = jnp.concatenate([top_GxB.T, top_probability(logits_BxV)[:, None]], axis=1)
    return cache, Draft(tokens_BxG, q_BxGxV, confidence_BxG=confidence_BxG)
