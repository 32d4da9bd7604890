"""Accept rules on a token tree scored by one target pass over every node (see :mod:`specjax.tree`).

A chain of gamma drafts is the tree ``(-1, 0, ..., gamma - 1)`` and goes through these same rules:
on a chain ``multi_round`` is Leviathan et al. Alg. 1 (Chen et al. Alg. 2) and ``greedy`` is the
longest prefix matching the target's argmax.

Each rule returns ``(leaf_B, next_token_B)``: the row keeps the root path to ``leaf`` and then
``next_token`` (the correction at the first rejection, or the bonus token after a full path).
``num_B`` (optional): each row's deepest offered depth; nodes below it were not submitted, so a row
that reaches it draws its bonus token from p there, exactly as if its draft had ended.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from specjax.sampling import argmax, sample_from
from specjax.tree_rows import at_nodes, batched, parent_values

# Below this the residual max(0, p - q) is numerically empty (p ~= q): fall back to p.
RESIDUAL_EPS = 1e-6


def overlap(p_BxGxV, q_BxGxV):
  """sum_x min(p(x), q(x)) per position: the acceptance probability alpha of each draft."""
  return jnp.sum(jnp.minimum(p_BxGxV, q_BxGxV), -1)


def _path_ok_leaf(ok_BxN, tree):
  """Deepest node whose whole root path is ok (the root always is)."""
  anc_ok = jnp.all(ok_BxN[:, None, :] | ~batched(tree.mask, 3), axis=-1)
  score = jnp.where(anc_ok, batched(tree.depth, 2), -1)
  return jnp.argmax(score, axis=-1).astype(jnp.int32)


def greedy(logits_BxNxV, tokens_BxN, tree, num_B=None):
  """Exact match: node i is right iff its token is the target's argmax at its parent."""
  return greedy_from_argmax(argmax(logits_BxNxV), tokens_BxN, tree, num_B)


def greedy_from_argmax(best_BxN, tokens_BxN, tree, num_B=None):
  """:func:`greedy` given the target's argmax at every node: no ``[B, N, V]`` tensor at all."""
  ok = (tokens_BxN == parent_values(tree, best_BxN)).at[:, 0].set(True)
  if num_B is not None:
    ok = ok & (batched(tree.depth, 2) <= num_B[:, None])
  leaf_B = _path_ok_leaf(ok, tree)
  return leaf_B, jnp.take_along_axis(best_BxN, leaf_B[:, None], 1)[:, 0]


def typical(rng, p_BxNxV, tokens_BxN, tree, epsilon: float, delta: float):
  """Medusa's typical acceptance (LOSSY): node ok iff p(x) > min(epsilon, delta * exp(-H(p)))."""
  par = np.maximum(np.asarray(tree.parents), 0)
  ent_BxN = -jnp.sum(jnp.where(p_BxNxV > 0, p_BxNxV * jnp.log(jnp.maximum(p_BxNxV, 1e-30)), 0.0), -1)
  thr_BxN = jnp.minimum(epsilon, delta * jnp.exp(-ent_BxN))
  p_tok = jnp.take_along_axis(p_BxNxV[:, par], tokens_BxN[..., None], -1)[..., 0]
  ok = (p_tok > thr_BxN[:, par]).at[:, 0].set(True)
  leaf_B = _path_ok_leaf(ok, tree)
  return leaf_B, sample_from(rng, jnp.take_along_axis(p_BxNxV, leaf_B[:, None, None], 1)[:, 0])


def _take(x_BxNx, idx_B):
  return jnp.take_along_axis(x_BxNx, idx_B.reshape((-1,) + (1,) * (x_BxNx.ndim - 1)), 1)[:, 0]


def residual(r_BxV, q_BxV):
  """norm(max(0, r - q)) after a rejection; r itself where that is numerically empty (r ~= q)."""
  x_BxV = jnp.maximum(r_BxV - q_BxV, 0.0)
  mass = x_BxV.sum(-1, keepdims=True)
  return jnp.where(mass > RESIDUAL_EPS, x_BxV / jnp.maximum(mass, RESIDUAL_EPS), r_BxV)


def residual_one_hot(r_BxV, x_B):
  """:func:`residual` for q one-hot on ``x``: r with x removed, renormalised (r itself if that is empty)."""
  x_BxV = jnp.where(jnp.arange(r_BxV.shape[-1])[None] == x_B[:, None], 0.0, r_BxV)
  mass = x_BxV.sum(-1, keepdims=True)
  return jnp.where(mass > RESIDUAL_EPS, x_BxV / jnp.maximum(mass, RESIDUAL_EPS), r_BxV)


def multi_round(rng, p_BxNxV, q_BxNxV, tokens_BxN, tree, without_replacement: bool,
                lenience: float = 1.0, update_q: bool = True, num_B=None):
  """SpecInfer's multi-round verification (recursive rejection sampling). Lossless at lenience 1.

  ``q_BxNxV=None``: every draft is deterministic (q one-hot on its own token, i.i.d. siblings),
  handled sparsely: q(x) = 1, and the residual after rejecting x is r with x removed, renormalised
  (max(0, r - onehot(x)) is exactly that), so no ``[B, N, V]`` one-hot is built.

  At each node, try its children in order with r = the target's p there: accept child x with
  probability min(1, r(x) / (lenience * q(x))); on rejection r <- ``residual(r, q)`` and, for
  siblings drawn without replacement, q <- q with x removed, renormalised. When every child is
  rejected (or the node is a leaf) draw the next token from r. ``q_BxNxV[:, 0]`` is unused (the
  root is not drafted). ``lenience < 1`` is Leviathan's lossy relaxation; ``update_q=False`` is a
  deliberately WRONG variant, kept for the tests' power check.
  """
  b = p_BxNxV.shape[0]
  sparse = q_BxNxV is None
  if sparse and without_replacement:
    raise ValueError("deterministic drafts (q=None) are verified with i.i.d. siblings, not without_replacement")
  table = tree.children_table
  w = table.shape[-1]
  u_BxGxC = jax.random.uniform(jax.random.fold_in(rng, 0), (b, tree.max_depth, w))
  cur_B = jnp.zeros((b,), jnp.int32)
  walking_B = jnp.ones((b,), bool)
  r_BxV = p_BxNxV[:, 0]
  for d in range(tree.max_depth):
    if num_B is not None:  # rows whose draft ended at depth d stop here and draw from p
      walking_B = walking_B & (d < num_B)
    ch_BxC = at_nodes(tree, table, cur_B)
    if not sparse:
      q_run = _take(q_BxNxV, jnp.maximum(ch_BxC[:, 0], 0))  # the sibling group's base q
    moved_B = jnp.zeros((b,), bool)
    nxt_B = cur_B
    for j in range(w):
      c_B = ch_BxC[:, j]
      try_B = walking_B & ~moved_B & (c_B >= 0)
      c_B = jnp.maximum(c_B, 0)
      x_B = jnp.take_along_axis(tokens_BxN, c_B[:, None], 1)[:, 0]
      rx = jnp.take_along_axis(r_BxV, x_B[:, None], 1)[:, 0]
      if sparse:
        qx = jnp.ones_like(rx)
      else:
        q_BxV = q_run if without_replacement else _take(q_BxNxV, c_B)
        qx = jnp.take_along_axis(q_BxV, x_B[:, None], 1)[:, 0]
      drawable = qx > 0  # a token q cannot draw (exhausted support) is skipped, not tested
      acc_B = try_B & drawable & (u_BxGxC[:, d, j] * lenience * qx < rx)
      rej_B = try_B & drawable & ~acc_B
      if sparse:
        res_BxV = residual_one_hot(r_BxV, x_B)
      else:
        res_BxV = residual(r_BxV, q_BxV)
      r_BxV = jnp.where(rej_B[:, None], res_BxV, r_BxV)
      if without_replacement and update_q:
        q_drop = q_run * (jnp.arange(q_run.shape[-1])[None] != x_B[:, None])
        q_run = jnp.where(rej_B[:, None], q_drop / jnp.maximum(q_drop.sum(-1, keepdims=True), 1e-30), q_run)
      nxt_B = jnp.where(acc_B, c_B, nxt_B)
      moved_B = moved_B | acc_B
    cur_B = nxt_B
    r_BxV = jnp.where(moved_B[:, None], _take(p_BxNxV, cur_B), r_BxV)
    walking_B = walking_B & moved_B
  return cur_B, sample_from(jax.random.fold_in(rng, 1), r_BxV)
