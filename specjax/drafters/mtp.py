"""Nemotron 3 Super's shared-weight MTP head, applied recursively to draft a chain of any length.

Bookkeeping: a row holding ``L`` tokens needs ``h_{L-2}``, the target's hidden state (after its
final norm) at the second-to-last token: with the embedding of the last token ``x_{L-1}`` the head
predicts ``x_L``; its output and the embedding of that draft give the next, and so on.
The verify pass over ``[x_{L-1}, d_1..d_G]`` returns hidden states for positions ``L-1 .. L-1+G``;
after ``n`` accepted drafts and one target token the row holds ``L + n + 1`` tokens, so ``commit``
keeps ``hidden[:, n]``. ``init`` takes ``h_{P-2}`` from the target's prefill (prompts of one token
get a zero hidden: drafts are then poor, never wrong).
"""
from __future__ import annotations

import flax
import jax
import jax.numpy as jnp

from specjax.drafters import vocab
from specjax.drafters.base import Draft, hidden_at, top_probability
from specjax.drafters.head import HeadDrafter
from specjax.models.bundle import Model


@flax.struct.dataclass
class MTPState:
  hidden_BxE: jax.Array   # target hidden at position seq_len - 2
  embed_VxE: jax.Array    # the target's (frozen) embedding and LM head, read once at init
  unembed_ExV: jax.Array


@flax.struct.dataclass
class MTP(HeadDrafter):
  head: Model  # an MTPHead bundle (specjax.models.heads)
  subset_K: jax.Array | None = None  # truncated draft vocabulary (specjax.drafters.vocab); None: all
  kind = "mtp"

  def check_compatible(self, target) -> None:
    self.check_head(target, "MTP head", "MTP")

  def init(self, target, prompts_BxP, prompt_lengths_B, max_len, prefill=None):
    del max_len
    embed, unembed = self.embed_and_unembed(target)
    prefill = self.prefill_of(target, prompts_BxP, prefill)
    h_BxE = hidden_at(prefill.hidden_BxPxE, jnp.maximum(prompt_lengths_B - 2, 0))
    h_BxE = jnp.where((prompt_lengths_B >= 2)[:, None], h_BxE, 0.0)
    return MTPState(h_BxE, embed, unembed)

  def step(self, state: MTPState, h_BxE, token_B):
    """One head application: ``(h_t, x_{t+1}) -> (g, logits for x_{t+2})``."""
    g_BxE = self.apply_head(h_BxE, state.embed_VxE[token_B])
    return g_BxE, (g_BxE @ state.unembed_ExV.astype(g_BxE.dtype)).astype(jnp.float32)

  def propose(self, state, tokens_BxS, seq_len_B, gamma, sampling, rng):
    last_B = jnp.take_along_axis(tokens_BxS, (seq_len_B - 1)[:, None], 1)[:, 0]

    def body(carry, step_rng):
      h_BxE, token_B = carry
      g_BxE, logits_BxV = self.step(state, h_BxE, token_B)
      draft_B, q_BxV = vocab.draw(sampling, step_rng, logits_BxV, self.subset_K,
                                  state.embed_VxE.shape[0])  # q None when greedy
      return (g_BxE.astype(h_BxE.dtype), draft_B), (draft_B, q_BxV, top_probability(logits_BxV))

    _, (tokens_GxB, q_GxBxV, top_GxB) = jax.lax.scan(body, (state.hidden_BxE, last_B), jax.random.split(rng, gamma))
    return state, Draft(tokens_GxB.T, None if q_GxBxV is None else jnp.transpose(q_GxBxV, (1, 0, 2)),
                        confidence_BxG=top_GxB.T)

  def commit(self, state, tokens_BxS, seq_len_B, n_accepted_B, target_hidden_BxTxE):
    del tokens_BxS, seq_len_B
    h_BxE = jnp.take_along_axis(target_hidden_BxTxE, n_accepted_B[:, None, None], 1)[:, 0]
    return state.replace(hidden_BxE=h_BxE.astype(state.hidden_BxE.dtype))
