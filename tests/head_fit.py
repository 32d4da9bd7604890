"""Fitting small drafters to a target's own greedy text inside a test (seconds, one compile each).

A drafter with untrained weights accepts almost nothing, and greedy equality then says little: the
accept and commit steps never run past depth 0. The helpers here fit a drafter's weights, by Adam
steps in one compiled ``lax.scan``, to the target's greedy continuations of the very prompts a test
decodes: the drafts are then mostly right (memorised), so every draft depth is accepted somewhere,
while the weights stay what the drafter's own code reads (nothing in the loop is bypassed).
"""
import jax
import numpy as np
import optax


def fit(params, loss_fn, batch, steps=300, learning_rate=3e-3):
  """``steps`` Adam steps of ``loss_fn(params, batch) -> (loss, aux)`` on one fixed batch; returns
  ``(params, losses)``."""
  opt = optax.adam(learning_rate)

  def one(carry, _):
    p, state = carry
    (loss, _), grads = jax.value_and_grad(loss_fn, has_aux=True)(p, batch)
    updates, state = opt.update(grads, state, p)
    return (optax.apply_updates(p, updates), state), loss

  @jax.jit
  def run(p):
    (p, _), losses = jax.lax.scan(one, (p, opt.init(p)), None, length=steps)
    return p, losses

  p, losses = run(params)
  return p, np.asarray(losses)


def full_rows(prompts_BxP, lengths_B, continuation_BxN, width):
  """Each row's prompt then its continuation, left-aligned, cut to ``width`` (every token real: the
  continuation must be long enough to fill the row)."""
  rows = []
  for p, n, c in zip(np.asarray(prompts_BxP), np.asarray(lengths_B), np.asarray(continuation_BxN)):
    row = np.concatenate([p[:n], c])
    assert len(row) >= width, "continuation too short to fill the row"
    rows.append(row[:width])
  return np.stack(rows).astype(np.int32)
