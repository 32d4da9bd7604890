"""Token trees: static topology, one target pass over every node, KV compaction (rules: specjax.accept).

Topology. Node 0 is the **root**: the row's last committed token, the one the loop feeds next
(it is in the verify input but not drafted). Nodes ``1..N-1`` are drafts; ``parents[i] < i``
(topological order) and ``parents[0] == -1``. A draft's ``tokens_BxG`` / ``q_BxGxV`` hold nodes
``1..N-1`` (``G = N - 1``). Node i sits in cache slot ``length + i`` at position
``length + depth[i]`` and sees the committed prefix plus its ancestors and itself. A chain of gamma
drafts is the tree ``(-1, 0, 1, ..., gamma - 1)``: the loop verifies chains through this same code.

``q`` of a draft node is the distribution its token was drawn from: with ``siblings="iid"`` each
child's own proposal; with ``"without_replacement"`` the sibling group's base distribution (the
rule removes earlier siblings itself). Deterministic drafts (and every draft when greedy) pass
``q=None``, meaning one-hot on the token: it is never materialised. Greedy verification uses the
target's argmax only, so a greedy round builds no ``[B, N, V]`` tensor besides the logits.
"""
from __future__ import annotations

import dataclasses
import functools
import itertools
import re

import jax
import jax.numpy as jnp
import numpy as np

from specjax import accept
from specjax import sampling as sampling_lib
from specjax.models import api, kv_cache
from specjax.tree_rows import at_nodes

SIBLINGS = ("iid", "without_replacement", "topk", "topk_lossy")


@dataclasses.dataclass(frozen=True)
class Tree:
  parents: tuple[int, ...]

  def __post_init__(self):
    p = tuple(int(x) for x in self.parents)
    object.__setattr__(self, "parents", p)
    if not p or p[0] != -1:
      raise ValueError(f"tree parents must start with the root's -1, got {p[:4]}")
    for i, par in enumerate(p[1:], 1):
      if not 0 <= par < i:
        raise ValueError(f"tree node {i} has parent {par}; parents must come earlier (0 <= parent < {i})")

  @property
  def num_nodes(self) -> int:
    return len(self.parents)

  @functools.cached_property
  def depth(self) -> np.ndarray:
    d = np.zeros(self.num_nodes, np.int32)
    for i in range(1, self.num_nodes):
      d[i] = d[self.parents[i]] + 1
    return d

  @property
  def max_depth(self) -> int:
    return int(self.depth.max())

  @functools.cached_property
  def children(self) -> tuple[tuple[int, ...], ...]:
    ch = [[] for _ in range(self.num_nodes)]
    for i in range(1, self.num_nodes):
      ch[self.parents[i]].append(i)
    return tuple(tuple(c) for c in ch)

  @property
  def max_width(self) -> int:
    return max(len(c) for c in self.children)

  @functools.cached_property
  def children_table(self) -> np.ndarray:
    """``[N, C]`` children of each node in order, -1 padded."""
    t = np.full((self.num_nodes, max(self.max_width, 1)), -1, np.int32)
    for i, c in enumerate(self.children):
      t[i, :len(c)] = c
    return t

  @functools.cached_property
  def ancestors(self) -> np.ndarray:
    """``[N, G+1]``: node i's ancestor at depth d (itself at and past its own depth)."""
    a = np.zeros((self.num_nodes, self.max_depth + 1), np.int32)
    for i in range(self.num_nodes):
      node = i
      a[i, :] = i
      a[i, 0] = 0
      while node > 0:
        a[i, self.depth[node]] = node
        node = self.parents[node]
    return a

  @functools.cached_property
  def mask(self) -> np.ndarray:
    return tree_mask(self.parents)

  @property
  def is_chain(self) -> bool:
    return self.parents == tuple(range(-1, self.num_nodes - 1))

  @property
  def is_bfs(self) -> bool:
    return bool(np.all(np.diff(self.depth) >= 0))

  def positions(self, length_B):
    """Position ids ``[B, N]``: prefix length + depth."""
    return jnp.asarray(length_B, jnp.int32)[:, None] + jnp.asarray(self.depth)[None]


def tree_mask(parents) -> np.ndarray:
  """``[N, N]`` bool: ``mask[i, j]`` iff j is i or an ancestor of i."""
  n = len(parents)
  m = np.eye(n, dtype=bool)
  for i in range(1, n):
    m[i] |= m[parents[i]]
  return m


# ----------------------------------------------------------------------------- builders
def chain(gamma: int) -> Tree:
  return Tree(tuple(range(-1, gamma)))


def from_children(children_per_depth) -> Tree:
  """SpecInfer expansion: every node at depth d gets ``children_per_depth[d]`` children (BFS order)."""
  widths = tuple(int(c) for c in children_per_depth)
  if not widths or min(widths) < 1:
    raise ValueError(f"children per depth must be positive integers, got {children_per_depth}")
  parents, level = [-1], [0]
  for c in widths:
    nxt = []
    for node in level:
      for _ in range(c):
        parents.append(node)
        nxt.append(len(parents) - 1)
    level = nxt
  return Tree(tuple(parents))


def from_paths(paths) -> Tree:
  """Medusa sparse tree: each path ``(i_1, ..., i_d)`` is the node taking head k's ``i_k``-th choice
  at depth k. Every proper prefix of a path must be a path too. Nodes come out in BFS order,
  siblings by ascending choice."""
  paths = sorted({tuple(int(x) for x in p) for p in paths}, key=lambda p: (len(p), p))
  if not paths or any(not p or min(p) < 0 for p in paths):
    raise ValueError(f"Medusa paths must be non-empty tuples of non-negative choices, got {paths[:4]}")
  index = {(): 0}
  parents = [-1]
  for p in paths:
    if p[:-1] not in index:
      raise ValueError(f"Medusa path {p} has no parent path {p[:-1]}")
    index[p] = len(parents)
    parents.append(index[p[:-1]])
  return Tree(tuple(parents))


def full_paths(top_k_per_depth) -> list[tuple[int, ...]]:
  """All choice paths of a dense tree: ``(3, 2)`` gives 3 + 3*2 paths."""
  out = []
  for d in range(1, len(top_k_per_depth) + 1):
    out += list(itertools.product(*[range(k) for k in top_k_per_depth[:d]]))
  return out


def chain_with_branches(depth: int, branches) -> tuple:
  """Paths of a chain of ``depth`` top-1 drafts plus, for each ``(d, length)`` in ``branches``, the
  second choice at depth d followed by ``length - 1`` top-1 drafts: a sparse tree that spends
  extra nodes only where the chain tends to break."""
  paths = [(0,) * i for i in range(1, depth + 1)]
  for d, length in branches:
    if not 1 <= d <= depth or length < 1:
      raise ValueError(f"branch (depth {d}, length {length}) must have 1 <= depth <= {depth} and length >= 1")
    paths += [(0,) * (d - 1) + (1,) + (0,) * i for i in range(length)]
  return tuple(paths)


def parse_chain_paths(text: str) -> tuple:
  """``"chain8+1x2+3x1"``: :func:`chain_with_branches` of depth 8 with branches (1, 2) and (3, 1)."""
  match = re.fullmatch(r"chain(\d+)((?:\+\d+x\d+)*)", text)
  if match is None:
    raise ValueError(f"tree {text!r}: expected 'chainDEPTH[+DxLEN...]', e.g. 'chain8+1x2' (a chain of 8 "
                     "plus the second choice at depth 1 followed by one more draft)")
  branches = [tuple(int(x) for x in b.split("x")) for b in match.group(2).split("+") if b]
  return chain_with_branches(int(match.group(1)), branches)


def sibling_choices(tree: Tree) -> np.ndarray:
  """``[N]``: each node's rank among its siblings (0 for the root)."""
  r = np.zeros(tree.num_nodes, np.int32)
  for ch in tree.children:
    r[list(ch)] = np.arange(len(ch))
  return r


def tried_along_path(tree: Tree, tokens_BxN, new_BxG1, n_B, num_nodes_B=None):
  """float32 ``[B]``: drafts the accept rule tried in a round (accepted or rejected): along the
  accepted path, each chosen child and the siblings before it, then every child of the last node
  (all rejected). Children are found by token (distinct siblings); only nodes below
  ``num_nodes_B`` (a node budget: the tree's first nodes) count. A chain gives n + 1 (n if all
  were accepted), the count the chain's acceptance estimate uses."""
  b = tokens_BxN.shape[0]
  table = jnp.asarray(tree.children_table)
  limit = tree.num_nodes if num_nodes_B is None else num_nodes_B
  cur_B, tried_B = jnp.zeros((b,), jnp.int32), jnp.zeros((b,), jnp.float32)
  for d in range(tree.max_depth + 1):
    ch_BxC = table[cur_B]
    live_BxC = (ch_BxC >= 0) & (ch_BxC < jnp.reshape(limit, (-1, 1)))
    tok_BxC = jnp.take_along_axis(tokens_BxN, jnp.maximum(ch_BxC, 0), 1)
    if d < tree.max_depth:
      hit_BxC = live_BxC & (tok_BxC == new_BxG1[:, d:d + 1])
    else:
      hit_BxC = jnp.zeros_like(live_BxC)
    on_path_B = d < n_B
    j_B = jnp.argmax(hit_BxC, axis=1)
    tried_B += jnp.where(on_path_B, j_B + 1, jnp.where(d == n_B, live_BxC.sum(1), 0)).astype(jnp.float32)
    cur_B = jnp.where(on_path_B, jnp.take_along_axis(ch_BxC, j_B[:, None], 1)[:, 0], cur_B)
  return tried_B


# ----------------------------------------------------------------------------- KV compaction
def compact(cache, src_slots_BxG, dst_start_B):
  """Copies each row's slots ``src[b]`` to ``dst_start[b] .. dst_start[b] + G - 1`` (all layers).

  After tree verification the accepted path is scattered over the node slots; this makes it
  contiguous after the prefix, so committing is again only a length change.
  """
  b, d = src_slots_BxG.shape
  rows_BxG = jnp.broadcast_to(jnp.arange(b)[:, None], (b, d))
  dst_BxG = dst_start_B[:, None] + jnp.arange(d)[None, :]

  def move(buf_LxBxAxSxD):  # one gather and one in-place scatter (no per-row vmap: see write_layer)
    path_BxGxLxAxD = buf_LxBxAxSxD[:, rows_BxG, :, src_slots_BxG]  # split advanced indices lead
    return buf_LxBxAxSxD.at[:, rows_BxG, :, dst_BxG].set(path_BxGxLxAxD, mode="drop")

  if hasattr(cache, "self_attn"):  # T5Cache wraps its decoder self-attention cache
    return cache.replace(self_attn=compact(cache.self_attn, src_slots_BxG, dst_start_B))
  return cache.replace(k_LxBxAxSxD=move(cache.k_LxBxAxSxD), v_LxBxAxSxD=move(cache.v_LxBxAxSxD))


# ----------------------------------------------------------------------------- one verify step
def siblings_lossy_reason(siblings: str, sampling) -> str | None:
  """Why drafts taken as ``siblings`` are not exact under ``sampling`` (None: they are)."""
  if siblings not in SIBLINGS:
    raise ValueError(f"unknown siblings mode {siblings!r}; expected one of {SIBLINGS}")
  if siblings in ("topk", "topk_lossy") and not sampling.greedy:
    return (f"top-k siblings verified against the drafter's softmax q ({siblings!r}) are exact only for greedy "
            f"decoding (temperature 0; deterministic drafts verified as one-hot proposals, q=None, are exact), "
            f"got temperature={sampling.temperature}; sample siblings ('iid' or 'without_replacement')")
  return None


def check_rule(siblings: str, sampling, rule) -> None:
  """Raised at trace time, before anything compiles: only known modes and rules."""
  del sampling
  if siblings not in SIBLINGS:
    raise ValueError(f"unknown siblings mode {siblings!r}; expected one of {SIBLINGS}")
  if rule is not None and rule[0] != "typical":
    raise ValueError(f"unknown accept rule {rule!r}; expected None (lossless) or ('typical', epsilon, delta)")


def verify_and_accept(target, cache, last_B, draft, sampling, rng, lenience, feature_layers=(), num_B=None,
                      topk: int = 0, topk_nodes: bool = False):
  """One target pass over [root, nodes] with the tree mask; accept; compact the accepted path.

  ``draft.tree`` None means a chain of ``draft.tokens_BxG.shape[1]`` drafts: the same code with the
  tree ``chain(G)``, whose accepted path is already contiguous (no compaction needed).
  Returns ``(cache, hidden_BxG1xE along the accepted path, new_BxG1 tokens, n_B accepted,
  overlap_BxG)`` with ``G`` the tree depth; ``new[b, n]`` is the target's token after the path
  and ``hidden[b, n]`` the hidden state of the last accepted node. ``feature_layers`` (a drafter
  attribute, e.g. DFlash's): the hidden is then those target layers' outputs concatenated on the
  last axis instead of the final hidden state. ``num_B`` (chains): drafts each row submits; the
  positions past it are verified by the pass but never accepted. ``topk > 0`` (a drafter's
  ``verify_topk``): a sixth output, int32 ``[B, G+1, topk]``, the target's most likely ids at each
  node of the accepted path (by its logits); ``topk_nodes`` also a seventh, ``[B, N, topk]``, the same at
  every node the pass scored (root first, then the drafted nodes, accepted or not). ``cache`` may be a :class:`kv_cache.PendingKV` (a
  budget switch): the path's keys and values are then moved to the front of its buffers instead.
  """
  tree = draft.row_tree if draft.row_tree is not None else (  # per-row (dynamic) trees: specjax.tree_rows
      draft.tree if draft.tree is not None else chain(draft.tokens_BxG.shape[1]))
  check_rule(draft.siblings, sampling, draft.rule)
  b, d = last_B.shape[0], tree.max_depth
  tokens_BxN = jnp.concatenate([last_B[:, None], draft.tokens_BxG], axis=1)
  length_B = cache.length_B
  positions_BxN, mask_NxN = tree.positions(length_B), jnp.asarray(tree.mask)
  if feature_layers:
    logits, _, cache, layer_hidden = target.module.apply(
        {"params": target.params}, tokens_BxN, positions_BxN, cache, mask_NxN, return_layer_hidden=True)
    hidden_BxNxE = jnp.concatenate([layer_hidden[i].astype(jnp.float32) for i in feature_layers], axis=-1)
  else:
    logits, hidden_BxNxE, cache = api.forward(target, tokens_BxN, cache, positions_BxN, mask_NxN)
  q_BxGxV = draft.q_BxGxV  # None: deterministic drafts, q one-hot on each token (never built)
  q_BxNxV = None if q_BxGxV is None else jnp.concatenate([jnp.zeros_like(q_BxGxV[:, :1]), q_BxGxV], axis=1)
  if sampling.greedy:  # argmax only: no [B, N, V] probabilities
    best_BxN = sampling_lib.argmax(logits)
    leaf_B, next_B = accept.greedy_from_argmax(best_BxN, tokens_BxN, tree, num_B)
    p_BxNxV = None
  else:
    p_BxNxV = sampling.probs(logits)
    if draft.rule is not None:  # ("typical", epsilon, delta)
      leaf_B, next_B = accept.typical(rng, p_BxNxV, tokens_BxN, tree, *draft.rule[1:])
    else:
      wr = draft.siblings == "without_replacement"
      if q_BxNxV is None and wr:  # deterministic drafts offered as without-replacement siblings: dense one-hot
        q_BxNxV = jax.nn.one_hot(tokens_BxN, logits.shape[-1]).at[:, 0].set(0.0)
      leaf_B, next_B = accept.multi_round(rng, p_BxNxV, q_BxNxV, tokens_BxN, tree, wr, lenience, num_B=num_B)
  path_BxG1 = at_nodes(tree, tree.ancestors, leaf_B)
  n_B = at_nodes(tree, tree.depth, leaf_B)
  path_tokens_BxG = jnp.take_along_axis(tokens_BxN, path_BxG1[:, 1:], 1)
  new_BxG1 = jnp.concatenate([path_tokens_BxG, jnp.zeros((b, 1), jnp.int32)], axis=1)
  new_BxG1 = jnp.where(jnp.arange(d + 1)[None] == n_B[:, None], next_B[:, None], new_BxG1)
  if not tree.is_chain:  # a chain's accepted path already sits in slots length + 1 .. length + n
    if isinstance(cache, kv_cache.PendingKV):  # written later at length ..: the path goes first
      take = lambda new_LxBxTxAxD: jnp.take_along_axis(new_LxBxTxAxD, path_BxG1[None, :, :, None, None], 2)
      cache = cache.replace(k_new_LxBxTxAxD=take(cache.k_new_LxBxTxAxD), v_new_LxBxTxAxD=take(cache.v_new_LxBxTxAxD))
    else:
      cache = compact(cache, length_B[:, None] + path_BxG1[:, 1:], length_B + 1)
  hidden_BxG1xE = jnp.take_along_axis(hidden_BxNxE, path_BxG1[..., None], 1)
  # alpha per depth: overlap sum_x min(p, q) of p at each path node with its first child's proposal
  first_xN = tree.children_table[..., 0]
  child_BxG = at_nodes(tree, jnp.maximum(first_xN, 0), path_BxG1[:, :d])
  live_BxG = at_nodes(tree, first_xN >= 0, path_BxG1[:, :d])  # a childless node proposes nothing: overlap 0
  if num_B is not None:
    live_BxG = live_BxG & (jnp.arange(d)[None] < num_B[:, None])
  child_tok_BxG = jnp.take_along_axis(tokens_BxN, child_BxG, 1)
  if p_BxNxV is None:  # greedy: p is one-hot on the argmax a, so the overlap is q(a)
    best_BxG = jnp.take_along_axis(best_BxN, path_BxG1[:, :d], 1)
    if q_BxNxV is None:
      ov = (child_tok_BxG == best_BxG).astype(jnp.float32)
    else:
      q_child = jnp.take_along_axis(q_BxNxV, child_BxG[..., None], 1)
      ov = jnp.take_along_axis(q_child, best_BxG[..., None], -1)[..., 0]
  elif q_BxNxV is None:  # q one-hot on the child's token: the overlap is p(token)
    p_path = jnp.take_along_axis(p_BxNxV, path_BxG1[:, :d, None], 1)
    ov = jnp.take_along_axis(p_path, child_tok_BxG[..., None], -1)[..., 0]
  else:
    p_path = jnp.take_along_axis(p_BxNxV, path_BxG1[:, :d, None], 1)
    q_path = jnp.take_along_axis(q_BxNxV, child_BxG[..., None], 1)
    ov = accept.overlap(p_path, q_path)
  out = (cache, hidden_BxG1xE, new_BxG1, n_B, jnp.where(live_BxG, ov, 0.0))
  if topk and topk_nodes:
    top_BxNxK = jax.lax.top_k(logits, topk)[1].astype(jnp.int32)
    out += (jnp.take_along_axis(top_BxNxK, path_BxG1[..., None], 1), top_BxNxK)
  elif topk:
    path_logits_BxG1xV = jnp.take_along_axis(logits, path_BxG1[..., None], 1)
    out += (jax.lax.top_k(path_logits_BxG1xV, topk)[1].astype(jnp.int32),)
  return out
