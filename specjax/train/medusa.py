"""Medusa-1: train J heads on a frozen target with self-distillation data the target generates.

1. ``specjax.train.heads.generated_text``: the target continues held-out prompts.
2. ``hidden_states``: one frozen, cache-free target pass per sequence; computed once and kept.
3. ``train_heads``: head k (0-based) at position t learns token t + k + 2 (the lm_head already
   predicts t + 1), cross-entropy on generated tokens only, weighted ``decay**k`` (Medusa: 0.8).
``head_accuracy`` reports each head's top-1 accuracy. For a real target, ``medusa_kl_loss`` trains
on :func:`specjax.train.heads.feature_pool` batches against the target's soft distributions instead
(every position counts, and a truncated head learns them renormalised over its subset).
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from specjax.drafters import medusa as medusa_lib
from specjax.train import heads as heads_train
from specjax.train import loop


def hidden_states(target, tokens_NxT, batch_size: int = 16) -> np.ndarray:
  """The target's last hidden state (after the final norm) at every position, float32."""
  fwd = jax.jit(lambda params, toks: target.module.apply({"params": params}, toks)[1].astype(jnp.float32))
  return np.concatenate([np.asarray(fwd(target.params, jnp.asarray(tokens_NxT[i:i + batch_size])))
                         for i in range(0, len(tokens_NxT), batch_size)])


def _labels(tokens_BxT, num_heads: int, label_from: int):
  """``[B, J, T]`` targets and mask: head k at position t predicts token t + k + 2."""
  b, t = tokens_BxT.shape
  labels, masks = [], []
  for k in range(num_heads):
    shift = k + 2
    lab = jnp.concatenate([tokens_BxT[:, shift:], jnp.zeros((b, shift), tokens_BxT.dtype)], axis=1)
    pos = jnp.arange(t) + shift  # the label's own index
    masks.append(jnp.broadcast_to((pos < t) & (pos >= label_from), (b, t)))
    labels.append(lab)
  return jnp.stack(labels, 1), jnp.stack(masks, 1)


def medusa_loss(lm_head_ExV, num_heads: int, label_from: int, decay: float = 0.8):
  """``loss_fn(heads, batch) -> (loss, metrics)``; batch = (hidden_BxTxE, tokens_BxT)."""
  weights = decay ** jnp.arange(num_heads)

  def loss_fn(lm_head_ExV, heads, batch):
    hidden_BxTxE, tokens_BxT = batch
    logits_BxTxJxV = medusa_lib.head_logits(heads, lm_head_ExV, hidden_BxTxE)
    logits_BxJxTxV = jnp.swapaxes(logits_BxTxJxV, 1, 2)
    labels_BxJxT, mask_BxJxT = _labels(tokens_BxT, num_heads, label_from)
    logp = jax.nn.log_softmax(logits_BxJxTxV, -1)
    nll = -jnp.take_along_axis(logp, labels_BxJxT[..., None], -1)[..., 0]
    count_J = jnp.maximum(mask_BxJxT.sum((0, 2)), 1)
    nll_J = (nll * mask_BxJxT).sum((0, 2)) / count_J
    acc_J = ((jnp.argmax(logits_BxJxTxV, -1) == labels_BxJxT) * mask_BxJxT).sum((0, 2)) / count_J
    metrics = {f"head{k}_top1": acc_J[k] for k in range(num_heads)}
    metrics.update({f"head{k}_nll": nll_J[k] for k in range(num_heads)})
    return jnp.sum(weights * nll_J) / weights.sum(), metrics

  return heads_train.with_frozen(loss_fn, lm_head_ExV)


def medusa_kl_loss(lm_head_ExK, num_heads: int, decay: float = 0.8):
  """``loss_fn(heads, batch)`` on a feature-pool batch (``tokens``, ``hidden``): head k (0-based) at
  position t against the target's distribution for token t + k + 2, i.e. ``hidden[t + k + 1] @
  lm_head``; KL weighted ``decay**k``. ``lm_head_ExK``: the target's LM head, or its subset columns."""
  w_J = decay ** jnp.arange(num_heads, dtype=jnp.float32)

  def loss_fn(lm_head_ExK, heads, batch):
    hidden = batch["hidden"].astype(jnp.float32)
    t = hidden.shape[1] - num_heads - 1
    s_logits_BxTxJxK = medusa_lib.head_logits(heads, lm_head_ExK, hidden[:, :t])
    t_hidden_BxTxJxE = jnp.stack([hidden[:, k + 1:k + 1 + t] for k in range(num_heads)], 2)
    t_logits_BxTxJxK = jax.lax.stop_gradient(t_hidden_BxTxJxE @ lm_head_ExK)
    kl, alpha = heads_train.kl_and_overlap(t_logits_BxTxJxK, s_logits_BxTxJxK)  # [B, T, J]
    match = jnp.argmax(s_logits_BxTxJxK, -1) == jnp.argmax(t_logits_BxTxJxK, -1)
    kl_J, top1_J = kl.mean((0, 1)), match.mean((0, 1))
    metrics = {f"head{k}_top1": top1_J[k] for k in range(num_heads)}
    metrics.update(kl_first=kl_J[0], alpha_t1_first=alpha[..., 0].mean(),
                   accept_len=heads_train.accept_len(match).mean())
    return jnp.sum(w_J * kl_J) / jnp.sum(w_J), metrics

  return heads_train.with_frozen(loss_fn, lm_head_ExK)


def head_accuracy(heads, lm_head_ExV, hidden_NxTxE, tokens_NxT, label_from: int, batch_size: int = 16):
  """Per-head top-1 accuracy on generated tokens: a list of J floats."""
  k = heads["w_KxExE"].shape[0]
  loss_fn = medusa_loss(lm_head_ExV, k, label_from)
  step = jax.jit(lambda fn, h, b: fn(h, b))  # the LM head an argument, not a compiled-in constant
  hits, total = np.zeros(k), 0
  for i in range(0, len(tokens_NxT), batch_size):
    batch = (jnp.asarray(hidden_NxTxE[i:i + batch_size]), jnp.asarray(tokens_NxT[i:i + batch_size]))
    _, m = step(loss_fn, heads, batch)
    n = len(batch[1])
    hits += n * np.array([float(m[f"head{j}_top1"]) for j in range(k)])
    total += n
  return (hits / max(total, 1)).round(4).tolist()


def train_heads(target, tokens_NxT, hidden_NxTxE, *, num_heads: int, label_from: int, cfg: loop.TrainConfig,
                workdir, batch_size: int = 16, seed: int = 0, desc: str = "medusa"):
  """Medusa-1 on a frozen target: only the heads' parameters train."""
  lm_head = medusa_lib.target_lm_head(target)
  heads = medusa_lib.init_heads(jax.random.PRNGKey(seed), num_heads, hidden_NxTxE.shape[-1])

  def batch_fn(step):  # a pure function of the step: resumed runs see the same data
    idx = np.random.default_rng([seed, step]).integers(0, len(tokens_NxT), size=batch_size)
    return jnp.asarray(hidden_NxTxE[idx]), jnp.asarray(tokens_NxT[idx])

  return loop.train(heads, medusa_loss(lm_head, num_heads, label_from), batch_fn, cfg, workdir, desc=desc)
