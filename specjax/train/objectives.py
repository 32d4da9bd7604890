"""Loss functions: next-token cross entropy, and distillation from a target's softmax."""
from __future__ import annotations

import jax
import jax.numpy as jnp
import optax


def lm_loss(module, pad_id: int):
  """``batch``: int32 [B, T+1]; predicts tokens 1..T from 0..T-1; pads don't count."""
  def loss_fn(params, batch):
    inputs, labels = batch[:, :-1], batch[:, 1:]
    logits, _, _ = module.apply({"params": params}, inputs)
    weight = (labels != pad_id).astype(jnp.float32)
    nll = optax.softmax_cross_entropy_with_integer_labels(logits, labels)
    loss = jnp.sum(nll * weight) / jnp.maximum(weight.sum(), 1.0)
    return loss, {"bits_per_token": loss / jnp.log(2.0)}
  return loss_fn


def distill_loss(student_module, teacher_module, teacher_params, pad_id: int, hard_weight: float = 0.0):
  """KL(teacher || student) over the full softmax at every position (+ optional hard CE)."""
  def loss_fn(params, batch):
    inputs, labels = batch[:, :-1], batch[:, 1:]
    t_logits = jax.lax.stop_gradient(teacher_module.apply({"params": teacher_params}, inputs)[0])
    s_logits, _, _ = student_module.apply({"params": params}, inputs)
    t_logp, s_logp = jax.nn.log_softmax(t_logits), jax.nn.log_softmax(s_logits)
    kl = jnp.sum(jnp.exp(t_logp) * (t_logp - s_logp), axis=-1)
    weight = (labels != pad_id).astype(jnp.float32)
    ce = optax.softmax_cross_entropy_with_integer_labels(s_logits, labels)
    per_tok = kl + hard_weight * ce
    loss = jnp.sum(per_tok * weight) / jnp.maximum(weight.sum(), 1.0)
    # expected agreement alpha at temperature 1: sum_x min(p, q)
    alpha = jnp.sum(jnp.minimum(jnp.exp(t_logp), jnp.exp(s_logp)), -1)
    agree = (jnp.argmax(t_logits, -1) == jnp.argmax(s_logits, -1)).astype(jnp.float32)
    norm = jnp.maximum(weight.sum(), 1.0)
    return loss, {"kl": jnp.sum(kl * weight) / norm, "alpha_t1": jnp.sum(alpha * weight) / norm,
                  "greedy_agreement": jnp.sum(agree * weight) / norm}
  return loss_fn
