"""Continuous refill: a queue of prompts longer than the batch, decoded in one jitted loop.

A static batch runs until its slowest row is done. With a queue, every loop iteration ends with
:func:`refill`: rows that finished hand their tokens to the output buffer (by prompt index), and
each free row takes the next queued prompt: its target cache row, token row and drafter state row
are replaced by a fresh batch-1 start (``api.start`` / ``drafter.init`` on that one prompt, i.e. a
prefill into the row's own cache slots), and its bookkeeping restarts. Shapes never change, so the
loop stays one compiled ``while_loop``. Exactness holds per prompt: a row only ever sees its own
prompt's cache and state (the others' rows are untouched), so greedy output equals decoding that
prompt alone, and sampled output is drawn from the target by the same rule.

Which axis of a state leaf is the batch is read off ``jax.eval_shape`` at batch 1 and 2 (the
axis whose size changes), so every cache and drafter state works unchanged, T5's included; leaves
without a batch axis (a drafter's shared embedding) are left alone.
"""
from __future__ import annotations

from typing import Callable

import flax
import jax
import jax.numpy as jnp


@flax.struct.dataclass
class Queue:
  prompts_QxP: jax.Array
  lengths_Q: jax.Array
  next_prompt: jax.Array  # scalar int32: the next queued prompt to start
  row_prompt_B: jax.Array  # which prompt each row holds; -1: none (finished, queue empty)
  start_B: jax.Array       # where each row's generated tokens begin in its token buffer
  out_QxN: jax.Array
  out_len_Q: jax.Array

  @classmethod
  def create(cls, prompts_QxP, lengths_Q, batch: int, start_B, max_new_tokens: int, pad_id: int):
    q = prompts_QxP.shape[0]
    return cls(prompts_QxP, lengths_Q, jnp.asarray(batch, jnp.int32), jnp.arange(batch, dtype=jnp.int32), start_B,
               jnp.full((q, max_new_tokens), pad_id, jnp.int32), jnp.zeros((q,), jnp.int32))


def batch_axes(start_fn: Callable, prompt_len: int):
  """For ``start_fn(prompts_BxP, lengths_B) -> pytree``: each leaf's batch axis (None: shared),
  as a list in ``tree_flatten`` order."""
  def shapes(b):
    return jax.eval_shape(start_fn, jax.ShapeDtypeStruct((b, prompt_len), jnp.int32),
                          jax.ShapeDtypeStruct((b,), jnp.int32))

  def axis(one, two):
    diff = [i for i, (a, c) in enumerate(zip(one.shape, two.shape)) if a != c]
    return diff[0] if diff else None
  return [axis(a, c) for a, c in zip(jax.tree_util.tree_leaves(shapes(1)), jax.tree_util.tree_leaves(shapes(2)))]


def put_row(tree_B, tree_1, row, axes):
  """``tree_B`` with its batch entry ``row`` replaced by ``tree_1``'s only one (in place)."""
  leaves_B, treedef = jax.tree_util.tree_flatten(tree_B)
  out = []
  for x, y, ax in zip(leaves_B, treedef.flatten_up_to(tree_1), axes, strict=True):
    if ax is not None:
      idx = [0] * x.ndim
      idx[ax] = row
      x = jax.lax.dynamic_update_slice(x, y.astype(x.dtype), tuple(idx))
    out.append(x)
  return jax.tree_util.tree_unflatten(treedef, out)


def refill(queue: Queue, rows, states: tuple, start_fns: tuple, output_fn):
  """Records finished rows, then restarts free rows from the queue, one prompt each.

  ``states``: per-row pytrees (target cache, drafter state, ...) and ``start_fns`` the batch-1
  starts that make them, ``fn(prompts_1xP, lengths_1) -> (state, tokens_1xS, seq_len_1)``; the
  first fn's tokens and lengths restart the row. ``output_fn(rows, start_B) -> (out_BxN, len_B)``.
  """
  q, p = queue.prompts_QxP.shape
  finished_B = rows.done_B & (queue.row_prompt_B >= 0)
  out_BxN, len_B = output_fn(rows, queue.start_B)
  dst_B = jnp.where(finished_B, queue.row_prompt_B, q)  # q: out of range, dropped
  queue = queue.replace(out_QxN=queue.out_QxN.at[dst_B].set(out_BxN, mode="drop"),
                        out_len_Q=queue.out_len_Q.at[dst_B].set(len_B, mode="drop"),
                        row_prompt_B=jnp.where(finished_B, -1, queue.row_prompt_B))
  axes = [batch_axes(lambda pr, ln, f=f: f(pr, ln)[0], p) for f in start_fns]

  def wants(carry):
    queue = carry[0]
    return jnp.any(queue.row_prompt_B < 0) & (queue.next_prompt < q)

  def start_one(carry):
    queue, rows, states = carry
    row = jnp.argmax(queue.row_prompt_B < 0)
    prompt_1xP = jax.lax.dynamic_slice_in_dim(queue.prompts_QxP, queue.next_prompt, 1)
    length_1 = jax.lax.dynamic_slice_in_dim(queue.lengths_Q, queue.next_prompt, 1)
    started = [f(prompt_1xP, length_1) for f in start_fns]
    states = tuple(put_row(s, new[0], row, ax) for s, new, ax in zip(states, started, axes))
    _, tokens_1xS, seq_len_1 = started[0]
    rows = rows.replace(tokens_BxS=jax.lax.dynamic_update_slice_in_dim(rows.tokens_BxS, tokens_1xS, row, 0),
                        seq_len_B=rows.seq_len_B.at[row].set(seq_len_1[0]),
                        new_B=rows.new_B.at[row].set(0), done_B=rows.done_B.at[row].set(False))
    queue = queue.replace(next_prompt=queue.next_prompt + 1, row_prompt_B=queue.row_prompt_B.at[row].set(queue.next_prompt),
                          start_B=queue.start_B.at[row].set(seq_len_1[0]))
    return queue, rows, states

  return jax.lax.while_loop(wants, start_one, (queue, rows, states))
