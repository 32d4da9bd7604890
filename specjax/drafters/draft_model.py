"""A separate, smaller autoregressive model with its own KV cache (Leviathan; Chen's SpS).

``stop_below`` (set by the loop's adaptive draft length, :meth:`Drafter.stopping_below`): the round
stops drafting once every row has reached a position whose confidence (the model's largest
probability there) is under its row's threshold (``stop_below_B``, set each round, else
``stop_below``); the loop would not submit anything past that point. With a draft
model costing a real fraction of a target step per token, that is time saved, not only a narrower
verify pass (transformers' assisted generation stops the same way, ``assistant_confidence_threshold``).
The drafts that are computed are the same as without the stop: same random keys, same positions.

``max_drafts`` (set by the loop each round, :meth:`Drafter.drafting_at_most`): the round's draft
budget, chosen from the rows' past before drafting; the model runs that many passes at most, so a
round the loop plans to verify at width 1 costs one draft pass, not ``gamma``.

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


CATCH_UP = 8  # tokens per pass when a draft model feeds what idle rounds committed


def _fed(cache, seq_len_B):
  """Per row, the committed tokens the cache surely holds. After a drafting round the last one or
  two may be missing (a bonus round leaves the last draft unseen) and rejected drafts lie past the
  accepted ones, so every slot from ``seq_len - 2`` on is fed again; idle rounds (``idle``) leave
  the length at what they found, at most ``seq_len - 2``, and feed nothing."""
  return jnp.maximum(jnp.minimum(cache.length_B, seq_len_B - 2), 0)


@flax.struct.dataclass
class DraftModel(Drafter):
  model: Model
  subset_K: jax.Array | None = None  # int32 token ids the drafter's logits cover (None: all)
  stop_below: float = flax.struct.field(pytree_node=False, default=0.0)  # 0: always draft gamma tokens
  stop_below_B: jax.Array | None = None  # float32 [B]: this round's per-row thresholds (None: stop_below)
  max_drafts: jax.Array | None = None  # int32 []: this round's draft budget (None: gamma)
  kind = "draft_model"

  def drafting_at_most(self, limit) -> "DraftModel":
    return self.replace(max_drafts=jnp.asarray(limit, jnp.int32))

  def stopping_below(self, confidence) -> "DraftModel":
    if isinstance(confidence, (int, float)):
      return self.replace(stop_below=float(confidence), stop_below_B=None)
    return self.replace(stop_below_B=jnp.asarray(confidence, jnp.float32))

  @property
  def num_params(self) -> int:
    stored = getattr(self.model.module, "stored_params", None)  # draft_lm: frozen target parts excluded
    return stored(self.model.params) if stored else self.model.num_params

  def _draw(self, sampling, rng, logits_BxK):
    return vocab.draw(sampling, rng, logits_BxK, self.subset_K, self.model.vocab_size)

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
    cache, logits_BxV = self._catch_up(cache, tokens_BxS, seq_len_B)
    return self._draft(cache, logits_BxV, gamma, sampling, jax.random.split(rng, gamma))

  def idle(self, cache, tokens_BxS, seq_len_B):
    """A round with nothing drafted feeds nothing: the committed tokens wait until the next drafting
    round, which feeds them ``CATCH_UP`` at a time (a pass over a few tokens costs about what one
    over a single token does). Idle rounds then cost almost nothing: feeding every one of them costs
    a draft model's step each, a share of the target's, so a run that never drafted would run slower
    than autoregressive decoding."""
    del tokens_BxS
    cache = cache.with_length(_fed(cache, seq_len_B))
    if self.model.is_encoder_decoder:
      return cache
    # zeros past the length (never read): a branch of the loop's idle-or-draft choice that returned
    # the cache untouched made XLA copy the whole cache every round
    l, b, k, _, d = cache.k_LxBxAxSxD.shape
    zeros = jnp.zeros((l, b, 1, k, d), cache.k_LxBxAxSxD.dtype)
    return kv_cache.write_pending(cache, zeros, zeros)

  def _catch_up(self, cache, tokens_BxS, seq_len_B):
    """The cache through every committed token, and the logits after the last one. After a
    drafting round at most the last two are missing (a bonus round leaves the last draft unseen;
    rejected drafts lie past the accepted ones): one pass over the last two. After idle rounds,
    first passes over ``CATCH_UP`` tokens at a time until at most two are missing."""
    def behind(carry):
      return jnp.any(seq_len_B - carry.length_B > 2)

    def chunk(carry):  # rows already caught up write past their length: never read, fed again later
      start_B = carry.length_B
      last_BxT = kv_cache.gather_rows(tokens_BxS, start_B[:, None] + jnp.arange(CATCH_UP)[None])
      _, _, carry = api.forward(self.model, last_BxT, carry)
      return carry.with_length(jnp.minimum(start_B + CATCH_UP, jnp.maximum(seq_len_B - 2, 0)))

    cache = jax.lax.while_loop(behind, chunk, cache.with_length(_fed(cache, seq_len_B)))
    start_B = jnp.maximum(seq_len_B - 2, 0)
    last_Bx2 = kv_cache.gather_rows(tokens_BxS, start_B[:, None] + jnp.arange(2)[None])
    logits_Bx2xV, _, cache = api.forward(self.model, last_Bx2, cache.with_length(start_B))
    logits_BxV = jnp.take_along_axis(logits_Bx2xV, (seq_len_B - 1 - start_B)[:, None, None], 1)[:, 0]
    return cache.with_length(seq_len_B), logits_BxV

  def _draft(self, cache, logits_BxV, gamma, sampling, rngs):
    """Position by position from the last committed token's logits; with ``stop_below``, only while
    some row has been sure at every position so far (later positions keep position 0's token and
    q, never submitted, and confidence 0)."""
    token_B, q_BxV = self._draw(sampling, rngs[0], logits_BxV)  # q None when greedy
    top_B = top_probability(logits_BxV)  # the distribution's, not the drawn token's
    tokens_GxB = jnp.broadcast_to(token_B, (gamma,) + token_B.shape)
    q_GxBxV = None if q_BxV is None else jnp.broadcast_to(q_BxV, (gamma,) + q_BxV.shape)
    top_GxB = jnp.zeros((gamma,) + top_B.shape, jnp.float32).at[0].set(top_B)
    below_B = self.stop_below if self.stop_below_B is None else self.stop_below_B

    last = gamma if self.max_drafts is None else jnp.minimum(gamma, self.max_drafts)

    def more(carry):
      i, _, _, sure_B, *_ = carry
      stops = self.stop_below > 0 or self.stop_below_B is not None
      return (i < last) & jnp.any(sure_B) if stops else i < last  # no reduction when fixed

    def step(carry):
      i, cache, token_B, sure_B, tokens_GxB, q_GxBxV, top_GxB = carry
      logits_Bx1xV, _, cache = api.forward(self.model, token_B[:, None], cache)
      cache = cache.with_length(cache.length_B + 1)
      token_B, q_BxV = self._draw(sampling, rngs[i], logits_Bx1xV[:, 0])
      top_B = top_probability(logits_Bx1xV[:, 0])
      q_GxBxV = None if q_BxV is None else q_GxBxV.at[i].set(q_BxV)
      return (i + 1, cache, token_B, sure_B & (top_B >= below_B), tokens_GxB.at[i].set(token_B), q_GxBxV,
              top_GxB.at[i].set(top_B))

    carry = (jnp.ones((), jnp.int32), cache, token_B, top_B >= below_B, tokens_GxB, q_GxBxV, top_GxB)
    _, cache, _, _, tokens_GxB, q_GxBxV, top_GxB = jax.lax.while_loop(more, step, carry)
    q_BxGxV = None if q_GxBxV is None else jnp.transpose(q_GxBxV, (1, 0, 2))
    num_B = None if self.max_drafts is None else jnp.full(token_B.shape, last, jnp.int32)
    return cache, Draft(tokens_GxB.T, q_BxGxV, num_B=num_B, confidence_BxG=top_GxB.T)
