"""EAGLE-3's training-time test on a FROZEN target: the head unrolled ``depth`` steps, soft targets.

Batches come from :func:`specjax.train.heads.feature_pool` with the head's ``target_layers``:
``tokens [B, T]``, ``hidden [B, T, E]`` (the target's final hidden; its logits are ``hidden @
unembed``) and ``feat [B, T, n*E]``. Step j at slot s predicts ``x_{s+2}`` from a committed prefix
ending at slot ``s - j + 1`` (:meth:`specjax.models.eagle_head.EagleHead.unrolled`); its loss is
KL(target || head) against the target's distribution at position s+1, weighted ``decay ** (j-1)``
(EAGLE-3: 0.8). A truncated head (``subset_K``) learns the target's distribution renormalised over
its subset (EAGLE-3's t2d mapping).
"""
from __future__ import annotations

import jax
import jax.numpy as jnp

from specjax.train import heads as train_heads


def eagle_loss(module, target, depth: int, decay: float = 0.8, subset_K=None):
  w_J = decay ** jnp.arange(depth, dtype=jnp.float32)

  def loss_fn(embed, unembed, params, batch):
    tokens, hidden, feat = batch["tokens"], batch["hidden"].astype(jnp.float32), batch["feat"]
    t = tokens.shape[1]
    emb_next = embed[jnp.concatenate([tokens[:, 1:], tokens[:, -1:]], 1)]  # slot s reads x_{s+1}
    s_logits = module.apply({"params": params}, feat, emb_next, depth, method="unrolled")  # [J, B, T, V']
    t_logits = jax.lax.stop_gradient(jnp.concatenate([hidden[:, 1:], hidden[:, -1:]], 1) @ unembed)
    t_logp = jax.nn.log_softmax(t_logits)
    s_logp = jax.nn.log_softmax(s_logits)
    kl = jnp.sum(jnp.exp(t_logp)[None] * (t_logp[None] - s_logp), -1)                    # [J, B, T]
    alpha = jnp.sum(jnp.minimum(jnp.exp(t_logp)[None], jnp.exp(s_logp)), -1)
    slot_T = jnp.arange(t)
    valid_JxT = (slot_T[None] >= jnp.arange(depth)[:, None]) & (slot_T[None] <= t - 2)  # step j: s >= j - 1
    denom = jnp.maximum(valid_JxT.sum(-1) * tokens.shape[0], 1)
    kl_J = jnp.sum(kl * valid_JxT[:, None], (1, 2)) / denom
    alpha_J = jnp.sum(alpha * valid_JxT[:, None], (1, 2)) / denom
    match = jnp.argmax(s_logits, -1) == jnp.argmax(t_logits, -1)[None]                 # [J, B, T]
    # teacher-forced greedy acceptance length of the chain drafted after slot c: steps j at c + j - 1
    n_c = t - 1 - depth
    chain_JxBxT = jnp.stack([match[j, :, j:j + n_c] for j in range(depth)])
    accept_len = jnp.sum(jnp.cumprod(chain_JxBxT.astype(jnp.float32), 0), 0).mean()
    loss = jnp.sum(w_J * kl_J) / jnp.sum(w_J)
    return loss, {"kl_first": kl_J[0], "kl_last": kl_J[-1], "alpha_t1_first": alpha_J[0],
                  "alpha_t1_last": alpha_J[-1], "accept_len": accept_len}
  return train_heads.with_frozen(loss_fn, *train_heads.frozen_io(target, subset_K))
