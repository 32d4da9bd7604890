"""Per-row token trees: a different topology in every row, with static shapes (EAGLE-2's dynamic trees).

:class:`RowTrees` holds what :class:`specjax.tree.Tree` derives from its parents -- depth, ancestor
mask, ancestors per depth, children table -- as ``[B, N, ...]`` arrays, so the verify pass and the
accept rules (:mod:`specjax.accept`, :func:`specjax.tree.verify_and_accept`) run unchanged on either;
:func:`at_nodes` is the one indexing helper they share. Nodes are in topological order in every row
(``parents[b, i] < i``), node 0 is the root.

:func:`select` is the dynamic tree's node selection, lossless when sampling (see its docstring).
"""
from __future__ import annotations

import dataclasses

import flax
import jax
import jax.numpy as jnp
import numpy as np


@flax.struct.dataclass
class RowTrees:
  parents: jax.Array         # [B, N] int32, -1 at the root
  depth: jax.Array           # [B, N]
  mask: jax.Array            # [B, N, N] bool: mask[b, i, j] iff j is i or an ancestor of i
  ancestors: jax.Array       # [B, N, G+1]: node i's ancestor at depth d (itself at and past its depth)
  children_table: jax.Array  # [B, N, W] children in order, -1 padded
  max_depth: int = flax.struct.field(pytree_node=False)
  is_chain = False

  @property
  def num_nodes(self) -> int:
    return self.parents.shape[1]

  def positions(self, length_B):
    return jnp.asarray(length_B, jnp.int32)[:, None] + self.depth


@dataclasses.dataclass(frozen=True)
class Shape:
  """What the loop needs before drafting: cache slots for the verify pass, and the depth (= gamma)."""
  num_nodes: int
  max_depth: int


def from_parents(parents_BxN, max_depth: int, max_width: int) -> RowTrees:
  """Derives every table from ``parents`` (topological, root first, at most ``max_width`` children)."""
  parents_BxN = jnp.asarray(parents_BxN, jnp.int32)
  b, n = parents_BxN.shape
  up_BxN = jnp.maximum(parents_BxN, 0)  # the root points at itself
  hops = [jnp.broadcast_to(jnp.arange(n, dtype=jnp.int32)[None], (b, n))]
  for _ in range(max_depth):
    hops.append(jnp.take_along_axis(up_BxN, hops[-1], 1))
  hops_BxNxG1 = jnp.stack(hops, -1)  # the node k hops up, for k = 0..G (stays at the root once there)
  depth_BxN = jnp.sum(hops_BxNxG1[..., :max_depth] != 0, -1).astype(jnp.int32)
  mask = jnp.any(hops_BxNxG1[..., None] == jnp.arange(n)[None, None, None], axis=2)
  d_1xG1 = jnp.arange(max_depth + 1)[None, None]
  k_BxNxG1 = jnp.clip(depth_BxN[..., None] - d_1xG1, 0, max_depth)
  ancestors = jnp.where(d_1xG1 > depth_BxN[..., None], jnp.arange(n)[None, :, None],
                        jnp.take_along_axis(hops_BxNxG1, k_BxNxG1, 2))
  earlier_NxN = jnp.arange(n)[None, :] < jnp.arange(n)[:, None]
  rank_BxN = jnp.sum((parents_BxN[:, None, :] == parents_BxN[:, :, None]) & earlier_NxN[None], -1)
  rows_BxN = jnp.broadcast_to(jnp.arange(b)[:, None], (b, n))
  slot_parent = jnp.where(jnp.arange(n)[None] == 0, n, up_BxN)  # the root is nobody's child: dropped
  table = jnp.full((b, n, max_width), -1, jnp.int32).at[rows_BxN, slot_parent, rank_BxN].set(
      jnp.broadcast_to(jnp.arange(n, dtype=jnp.int32)[None], (b, n)), mode="drop")
  return RowTrees(parents_BxN, depth_BxN, mask, ancestors.astype(jnp.int32), table, max_depth)


def at_nodes(tree, table, idx):
  """``table`` at node indices ``idx [B, ...]``: ``table[b, idx[b, ...]]`` for a :class:`RowTrees`
  table ``[B, N, ...]``, ``table[idx]`` for a static tree's ``[N, ...]``."""
  if not isinstance(tree, RowTrees):
    return jnp.asarray(table)[idx]
  b = idx.shape[0]
  flat_BxN = idx.reshape(b, -1)
  out = jnp.take_along_axis(table, flat_BxN.reshape(flat_BxN.shape + (1,) * (table.ndim - 2)), 1)
  return out.reshape(idx.shape + table.shape[2:])


def parent_values(tree, x_BxN):
  """``x[b, parent(i)]`` per node (the root's own value at the root)."""
  if not isinstance(tree, RowTrees):
    return x_BxN[:, np.maximum(np.asarray(tree.parents), 0)]
  return jnp.take_along_axis(x_BxN, jnp.maximum(tree.parents, 0), 1)


def batched(table, ndim: int):
  """A static tree's ``[N, ...]`` table with a leading batch axis of 1; a per-row table as is."""
  table = jnp.asarray(table)
  return table if table.ndim == ndim else table[None]


# ----------------------------------------------------------------------------- dynamic selection
def select(score_BxZ, parent_BxZ, num_keep: int, max_depth: int, max_width: int):
  """Keeps the ``num_keep`` best of a pool of drafted nodes; returns ``(pool index [B, num_keep], RowTrees)``.

  The pool is ordered by depth (and, within a parent, by sibling rank); ``parent_BxZ`` is a pool
  index or -1 for children of the root. The kept nodes come out in pool order (topological), and
  the tree's node ``i + 1`` is pool node ``index[:, i]``.

  Why this selection does not bias sampling. Recursive rejection sampling at a node is exact as
  long as (1) its children are a prefix of a sequence drawn without replacement from q and (2)
  whether the j-th child is verified at all is decided without looking at that child's token (or
  later siblings', which depend on it). So the score of a node must not read the node's own
  token: here it is ``score(parent) + log q_parent[j-th largest]`` (``min``-ed with the parent's
  score so scores fall along every path and over siblings), which is EAGLE-2's cumulative
  log-probability exactly when children are the deterministic top-k (greedy), and an estimate
  that ignores the drawn token when they are sampled. Every node whose score or existence depends
  on a node's token (its subtree, its later siblings and theirs) then scores no higher and sorts
  after it (ties: shallower, then earlier in the pool, which ``lax.top_k`` keeps), so the nodes
  ranked before it -- and so whether it is kept -- are independent of its token. Scoring by the
  node's own drawn probability (EAGLE-2's rule applied to sampled children) is biased: it keeps a
  sampled child more often when its token is likely, which is not the q it was drawn from.
  """
  b, p = score_BxZ.shape
  if not 1 <= num_keep <= p:
    raise ValueError(f"dynamic tree keeps total_tokens={num_keep} of a pool of {p} drafted nodes; "
                     f"use 1 <= total_tokens <= {p}")
  _, keep_BxN = jax.lax.top_k(score_BxZ, num_keep)  # ties: the lower pool index first
  keep_BxN = jnp.sort(keep_BxN, axis=-1).astype(jnp.int32)
  node_of_pool = jnp.zeros((b, p), jnp.int32).at[jnp.arange(b)[:, None], keep_BxN].set(
      jnp.arange(1, num_keep + 1, dtype=jnp.int32)[None])  # 0: not kept (or the root)
  pool_parent = jnp.take_along_axis(parent_BxZ, keep_BxN, 1)
  parent_node = jnp.where(pool_parent < 0, 0, jnp.take_along_axis(node_of_pool, jnp.maximum(pool_parent, 0), 1))
  parents_BxN = jnp.concatenate([jnp.full((b, 1), -1, jnp.int32), parent_node], 1)
  return keep_BxN, from_parents(parents_BxN, max_depth, max_width)
