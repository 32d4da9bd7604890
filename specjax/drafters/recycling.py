"""Token Recycling (Luo et al., arXiv 2408.08696): an adjacency table of each token's most likely
successors, filled from the candidates every verify pass computes and would throw away, read by
breadth-first expansion from the row's last token into a small static tree.

The table ``table_VxK`` (token id -> its ``K`` successor ids, best first) is the drafter's memory
(:class:`specjax.drafters.Drafter`): one table for every row and call, learned inside the jitted
loop and returned by ``speculative_generate`` as ``out.drafter``. After each round, every verified
position's row of the table is overwritten with the target's top-``K`` ids there (``verify_topk``):
the row's last token and each accepted draft, the bonus position included; with
``learn_from="tree"`` first every node the pass scored, rejected drafts too (as the paper does: their
candidates would otherwise be thrown away), so a round teaches as many rows as the tree has nodes. It starts as ids
``0..K-1`` in every row: distinct, so siblings never repeat, and simply rejected until the target's
own successors overwrite them (a table saved from earlier runs, :mod:`specjax.drafters.memory`,
starts warm, and so does one counted from text the target wrote, :func:`table_from_text`). 151,936 x 8 int32 ids take 4.9 MB.

The tree is a template of ``paths``: ``(r1, ..., rd)`` is the node reached by taking successor
``r1`` of the last token, then successor ``r2`` of that, ... Its nodes come in the template's order
(each path after its parent, siblings by rank), so its first ``b`` nodes are a tree too: the node
budgets ``budgets`` the loop chooses from per round with ``adaptive`` (0: a plain step). The draft
is deterministic (q one-hot, ``q=None``): siblings are distinct tokens verified one after another
against the running residual (``accept.residual_one_hot``), exact at every temperature.
"""
from __future__ import annotations

import heapq

import flax
import jax
import jax.numpy as jnp
import numpy as np

from specjax import tree as tree_lib
from specjax.drafters.base import Draft, Drafter

# Token Recycling's shape scaled down to 8 nodes for a CPU: a chain first (budget 2 is a chain of
# two, budget 4 adds the second successor at depth 1 and a third level), then the next choices.
DEFAULT_PATHS = ((0,), (0, 0), (1,), (0, 0, 0), (0, 1), (2,), (1, 0), (0, 0, 0, 0))
DEFAULT_BUDGETS = (0, 2, 4, 8)
# the share of rounds assumed to accept each successor rank, when ranking template paths (ranked_paths)
RANK_WEIGHTS = (0.5, 0.14, 0.07, 0.045, 0.03, 0.022, 0.017, 0.013)
# which verified nodes the table learns from: the accepted path (and the bonus position), or every node
# the pass scored (Token Recycling's update: rejected drafts' candidates too, before the path's)
LEARN_FROM = ("path", "tree")


def template(paths) -> tuple[tuple[int, ...], np.ndarray]:
  """``(parents, rank_N)`` of the tree whose node i + 1 is ``paths[i]``; checked: every path's parent
  path comes before it and siblings come in increasing rank."""
  paths = tuple(tuple(int(r) for r in p) for p in paths)
  index, parents, rank = {(): 0}, [-1], [0]
  for p in paths:
    if not p or min(p) < 0:
      raise ValueError(f"recycling path {p} must be a non-empty tuple of successor ranks >= 0")
    if p in index:
      raise ValueError(f"recycling path {p} appears twice")
    if p[:-1] not in index:
      raise ValueError(f"recycling path {p} comes before its parent path {p[:-1]}")
    earlier = [rank[i] for i, par in enumerate(parents) if par == index[p[:-1]]]
    if earlier and p[-1] <= max(earlier):
      raise ValueError(f"recycling path {p}: siblings must come in increasing rank (after rank {max(earlier)})")
    index[p] = len(parents)
    parents.append(index[p[:-1]])
    rank.append(p[-1])
  return tuple(parents), np.asarray(rank, np.int32)


def ranked_paths(nodes: int, max_depth: int = 6) -> tuple[tuple[int, ...], ...]:
  """A template of the ``nodes`` likeliest paths, each weighted by the product of its ranks'
  ``RANK_WEIGHTS``, heaviest first: a child weighs less than its parent and a sibling less than the
  one ranked before it, so parents and lower ranks come first and every prefix is a tree (a budget)."""
  if isinstance(nodes, bool) or not isinstance(nodes, int) or nodes < 1:
    raise ValueError(f"ranked_paths: nodes must be a positive integer, got {nodes!r}")
  key = lambda w, path: (-w, len(path), path)  # noqa: E731
  frontier = [key(RANK_WEIGHTS[r], (r,)) for r in range(len(RANK_WEIGHTS))]
  heapq.heapify(frontier)
  out = []
  while frontier and len(out) < nodes:
    neg_w, _, path = heapq.heappop(frontier)
    out.append(path)
    if len(path) < max_depth:
      for r, w in enumerate(RANK_WEIGHTS):
        heapq.heappush(frontier, key(-neg_w * w, path + (r,)))
  if len(out) < nodes:
    raise ValueError(f"ranked_paths: nodes={nodes} is more than the {len(out)} paths of depth <= {max_depth}")
  return tuple(out)


def initial_table(vocab_size: int, k: int) -> jax.Array:
  """int32 ``[V, K]``: ids ``0..K-1`` in every row (distinct successors; nothing learned yet)."""
  return jnp.broadcast_to(jnp.arange(k, dtype=jnp.int32)[None], (vocab_size, k))


def table_from_text(vocab_size: int, k: int, docs) -> jax.Array:
  """int32 ``[V, K]``: each token's ``K`` most frequent successors in ``docs`` (sequences of ids, e.g.
  the target's own text: its greedy successors), most frequent first (ties: the smaller id); a row
  with fewer seen successors is filled with the smallest ids not among them, so a row never repeats."""
  pairs = [np.stack([d[:-1], d[1:]], 1) for d in (np.asarray(d, np.int64).reshape(-1) for d in docs) if len(d) > 1]
  table = np.broadcast_to(np.arange(k, dtype=np.int32)[None], (vocab_size, k)).copy()
  if not pairs:
    return jnp.asarray(table)
  pairs_Px2 = np.concatenate(pairs)
  if pairs_Px2.min() < 0 or pairs_Px2.max() >= vocab_size:
    raise ValueError(f"recycling text holds token ids outside the vocabulary (0..{vocab_size - 1})")
  bigram_P, counts_P = np.unique(pairs_Px2[:, 0] * vocab_size + pairs_Px2[:, 1], return_counts=True)
  first_P, next_P = bigram_P // vocab_size, bigram_P % vocab_size
  order = np.lexsort((next_P, -counts_P, first_P))  # by token, then most frequent, then smaller id
  first_P, next_P = first_P[order], next_P[order]
  starts = np.flatnonzero(np.r_[True, first_P[1:] != first_P[:-1]])  # each token's run of successors
  for start, end in zip(starts, np.r_[starts[1:], len(first_P)]):
    seen = next_P[start:min(end, start + k)]
    taken = set(seen.tolist())
    fill = [i for i in range(k + len(seen)) if i not in taken][:k - len(seen)]
    table[first_P[start]] = np.concatenate([seen, fill]).astype(np.int32)
  return jnp.asarray(table)


@flax.struct.dataclass
class Recycling(Drafter):
  table_VxK: jax.Array
  paths: tuple = flax.struct.field(pytree_node=False, default=DEFAULT_PATHS)
  budgets: tuple = flax.struct.field(pytree_node=False, default=DEFAULT_BUDGETS)
  learn_from: str = flax.struct.field(pytree_node=False, default="path")
  kind = "recycling"

  def __post_init__(self):  # static fields only: jax rebuilds the dataclass around placeholder leaves
    if self.learn_from not in LEARN_FROM:
      raise ValueError(f"recycling learn_from must be one of {LEARN_FROM}, got {self.learn_from!r}")
    parents, _ = template(self.paths)
    n = len(parents) - 1
    if any(isinstance(b, bool) or int(b) != b or not 0 <= b <= n for b in self.budgets):
      raise ValueError(f"recycling budgets must be node counts in 0..{n} (the template's nodes), got {self.budgets}")

  @classmethod
  def create(cls, vocab_size: int, k: int = 8, paths=DEFAULT_PATHS, budgets=DEFAULT_BUDGETS,
             learn_from: str = "path") -> "Recycling":
    return cls(initial_table(vocab_size, k), tuple(tuple(p) for p in paths), tuple(budgets), learn_from)

  @property
  def tree(self):
    return tree_lib.Tree(template(self.paths)[0])

  @property
  def tree_budgets(self):
    return tuple(self.budgets)

  @property
  def verify_topk(self):
    return int(self.table_VxK.shape[-1])

  @property
  def verify_topk_nodes(self):
    return self.learn_from == "tree"

  @property
  def memory(self):
    return self.table_VxK

  def with_memory(self, memory):
    return self.replace(table_VxK=memory)

  def check_compatible(self, target) -> None:
    _, rank = template(self.paths)
    shape = tuple(self.table_VxK.shape)
    if len(shape) != 2 or shape[0] != target.vocab_size or int(rank.max()) >= shape[1]:
      raise ValueError(f"recycling table must be [vocab {target.vocab_size}, k > {int(rank.max())} (the largest "
                       f"successor rank in paths)], got shape {shape}")

  def init(self, target, prompts_BxP, prompt_lengths_B, max_len, prefill=None):
    del target, prompts_BxP, prompt_lengths_B, max_len, prefill
    return ()

  def propose(self, state, tokens_BxS, seq_len_B, gamma, sampling, rng):
    del gamma, sampling, rng
    parents, rank = template(self.paths)
    last_B = jnp.take_along_axis(tokens_BxS, (seq_len_B - 1)[:, None], 1)[:, 0]
    nodes = [last_B]
    for i in range(1, len(parents)):  # breadth-first along the template: each node a successor of its parent
      nodes.append(self.table_VxK[nodes[parents[i]], rank[i]])
    return state, Draft(jnp.stack(nodes[1:], axis=1), None, tree=self.tree, siblings="iid")

  def learn(self, memory, verified):
    """Each verified position's row <- the target's top-k there (positions past a row's count dropped);
    ``learn_from="tree"``: every scored node's row first, so the accepted path's rows win."""
    if self.learn_from == "tree":
      memory = _overwrite(memory, verified.scored_BxN, verified.scored_count_B, verified.scored_topk_BxNxK)
    return _overwrite(memory, verified.fed_BxT, verified.count_B, verified.topk_BxTxK)


def _overwrite(table_VxK, fed_BxT, count_B, topk_BxTxK):
  valid_BxT = jnp.arange(fed_BxT.shape[1])[None] < count_B[:, None]
  rows_BxT = jnp.where(valid_BxT, fed_BxT, table_VxK.shape[0])  # out of range: dropped
  return table_VxK.at[rows_BxT].set(topk_BxTxK.astype(table_VxK.dtype), mode="drop")

