"""SpecInfer: a small model expands a static token tree.

``children=(1, 1, 3, 1, 1, 1, 1, 1)`` is the paper's expansion (every node at depth d gets
``children[d]`` children); any widths work (width 5 and up). ``paths`` instead gives any sparse
tree, Medusa-style: the path ``(i_1, ..., i_d)`` is the node reached by taking the i_k-th sibling at
depth k, e.g. a long chain ``(0,), (0, 0), ...`` plus a second choice ``(1,)`` where the chain
often breaks (:func:`specjax.tree.chain_with_branches`). A node's children are its top-1, top-2, ...
drafts in path order (gaps in the choice indices are closed up).
Siblings are drawn from the small model's q (after the target's temperature/top-k/top-p):

* ``"iid"``: independent draws (duplicates possible); verified by multi-round rejection, lossless.
* ``"without_replacement"``: Gumbel top-k, distinct tokens; recursive rejection sampling, lossless.
* ``"topk"``: the k most likely tokens, deterministic. Exact only for greedy; at temperature > 0
  it raises unless ``"topk_lossy"`` asks for the (lossy) multi-round rule with the softmax q.

At temperature 0 every mode drafts the deterministic top-k (sampling a one-hot q would repeat).

``subset_K`` (optional): draft-vocabulary truncation as in :class:`~specjax.drafters.DraftModel`
(a ``K``-wide head such as :mod:`specjax.models.draft_lm`, or a full model cut to ``K`` columns):
siblings are drawn over ``K`` and mapped to token ids; q is scattered to the full vocabulary.

Drafter cache and cost. The small model's cache holds the committed text; the tree's nodes are
never committed there. Each round (1) feeds the up-to ``depth + 1`` tokens committed since the
last round (one pass) to get the root's logits, then (2) for d = 1..depth-1 feeds only the nodes of
depth d, written after the earlier levels' nodes, with a window mask so each sees the committed
prefix, its ancestors and itself. That is ``depth`` small-model passes over ``N`` tokens in all per
round: a chain-shaped tree costs exactly what a chain costs.
"""
from __future__ import annotations

import flax
import jax
import jax.numpy as jnp
import numpy as np

from specjax import tree as tree_lib
from specjax.drafters import vocab
from specjax.drafters.base import Draft, Drafter
from specjax.models import api, kv_cache
from specjax.models.bundle import Model
from specjax.sampling import sample_from


def draw_children(rng, logits_BxNxV, q_BxNxV, k: int, siblings: str, greedy: bool):
  """``[B, N, k]`` sibling tokens for N parent nodes: top-k, i.i.d. from q, or Gumbel top-k (no replacement)."""
  if greedy or siblings in ("topk", "topk_lossy"):
    return jax.lax.top_k(logits_BxNxV, k)[1].astype(jnp.int32)
  if siblings == "iid":  # k independent draws per parent (inverse CDF: no Gumbel per token)
    return sample_from(rng, jnp.broadcast_to(q_BxNxV[..., None, :], q_BxNxV.shape[:-1] + (k, q_BxNxV.shape[-1])))
  logq = jnp.log(q_BxNxV)
  gumbel = jax.random.gumbel(rng, q_BxNxV.shape)
  return jax.lax.top_k(logq + gumbel, k)[1].astype(jnp.int32)


@flax.struct.dataclass
class SpecInfer(Drafter):
  model: Model
  children: tuple = flax.struct.field(pytree_node=False, default=(1, 1, 3, 1, 1, 1, 1, 1))
  siblings: str = flax.struct.field(pytree_node=False, default="iid")
  paths: tuple = flax.struct.field(pytree_node=False, default=())  # non-empty: overrides children
  subset_K: jax.Array | None = None  # int32 token ids the small model's logits cover (None: all)
  kind = "specinfer"

  @property
  def num_params(self) -> int:  # as a chain drafter counts the same small model
    from specjax.drafters.draft_model import DraftModel  # pylint: disable=import-outside-toplevel
    return DraftModel(self.model).num_params

  def __post_init__(self):
    if self.siblings not in tree_lib.SIBLINGS:
      raise ValueError(f"unknown siblings mode {self.siblings!r}; expected one of {tree_lib.SIBLINGS}")
    _ = self.tree  # validates the widths or paths

  @property
  def tree(self) -> tree_lib.Tree:
    return tree_lib.from_paths(self.paths) if self.paths else tree_lib.from_children(self.children)

  def lossy_reason(self, sampling) -> str | None:
    return tree_lib.siblings_lossy_reason(self.siblings, sampling)

  def draft_models(self) -> tuple:
    return (self.model,)

  def check_compatible(self, target) -> None:
    if self.model.vocab_size != target.vocab_size:
      raise ValueError(f"drafter vocab_size={self.model.vocab_size} differs from target "
                       f"vocab_size={target.vocab_size}; both must share one tokenizer")
    if self.model.is_encoder_decoder or target.is_encoder_decoder:
      raise ValueError("SpecInfer token trees support decoder-only models")
    out = getattr(self.model.config, "out_vocab", 0) or self.model.vocab_size  # width of its logits
    if self.subset_K is None and out != target.vocab_size:
      raise ValueError(f"SpecInfer's small model predicts {out} tokens but the target's vocab_size is "
                       f"{target.vocab_size}: a truncated drafter needs its subset_K")
    if self.subset_K is not None:
      vocab.check_subset(self.subset_K, target.vocab_size, "SpecInfer")
      if out not in (self.subset_K.shape[0], target.vocab_size):
        raise ValueError(f"SpecInfer's small model predicts {out} tokens but its vocab subset has "
                         f"K={self.subset_K.shape[0]} ids (expected K or vocab_size={target.vocab_size})")

  def init(self, target, prompts_BxP, prompt_lengths_B, max_len, prefill=None):
    del target, prefill
    return api.start(self.model, prompts_BxP, prompt_lengths_B, max_len)[0]  # committed: all but the last

  def propose(self, cache, tokens_BxS, seq_len_B, gamma, sampling, rng):
    tree = self.tree
    tree_lib.check_rule(self.siblings, sampling, None)
    depth, n = tree.max_depth, tree.num_nodes
    del gamma  # == depth, checked by speculative_generate
    # (1) catch up on the tokens committed since last round: the root's logits
    start_B = jnp.minimum(cache.length_B, seq_len_B - 1)
    fresh_BxT = kv_cache.gather_rows(tokens_BxS, start_B[:, None] + jnp.arange(depth + 1)[None])
    logits_BxTxV, _, cache = api.forward(self.model, fresh_BxT, cache.with_length(start_B))
    root_BxV = jnp.take_along_axis(logits_BxTxV, (seq_len_B - 1 - start_B)[:, None, None], 1)[:, 0]
    cache = cache.with_length(seq_len_B)
    v = self.model.vocab_size
    narrow = (lambda logits_xK: logits_xK) if self.subset_K is None else (
        lambda logits_xK: vocab.select_logits(logits_xK, self.subset_K, v))  # K-wide logits: draws over K
    # (2) expand level by level; draft index g = node - 1, BFS order makes each level a range
    root_BxV = narrow(root_BxV)
    b = root_BxV.shape[0]
    tokens_BxG = jnp.zeros((b, n - 1), jnp.int32)
    greedy = sampling.greedy  # deterministic top-k children: no q at all
    q_BxGxV = None if greedy else jnp.zeros((b, n - 1, v), jnp.float32)
    level_logits, level_nodes = root_BxV[:, None], np.array([0])
    mask_NxN = tree.mask
    for d in range(1, depth + 1):
      k = max(len(tree.children[par]) for par in level_nodes)  # draw the widest; nodes take theirs
      q_level = None if greedy else sampling.probs(level_logits)
      kids_BxPxk = draw_children(jax.random.fold_in(rng, d), level_logits, q_level, k, self.siblings,
                                 sampling.greedy)
      if self.subset_K is not None:  # subset ranks -> token ids; q zero outside the subset
        kids_BxPxk = jnp.take(self.subset_K, kids_BxPxk)
        q_level = None if q_level is None else vocab.scatter_probs(q_level, self.subset_K, v)
      # child nodes of this level in BFS order, with their parent's index in the level and sibling rank
      nodes, parent_idx, rank = map(np.array, zip(*[(c, i, j) for i, par in enumerate(level_nodes)
                                                    for j, c in enumerate(tree.children[par])]))
      tokens_BxG = tokens_BxG.at[:, nodes - 1].set(kids_BxPxk[:, parent_idx, rank])
      if q_level is not None:
        q_BxGxV = q_BxGxV.at[:, nodes - 1].set(q_level[:, parent_idx])
      if d == depth:
        break
      lo, hi = int(nodes.min()), int(nodes.max())  # BFS: level d is nodes lo..hi, in slots after 1..lo-1
      pos_BxT = (seq_len_B - 1)[:, None] + jnp.asarray(tree.depth[lo:hi + 1])[None]
      window_TxU = jnp.asarray(mask_NxN[lo:hi + 1, 1:hi + 1])  # sees earlier nodes only if ancestors
      logits_BxTxV, _, cache = api.forward(self.model, tokens_BxG[:, lo - 1:hi],
                                           cache.with_length(seq_len_B + lo - 1), pos_BxT, window_TxU)
      level_logits, level_nodes = narrow(logits_BxTxV), nodes
    cache = cache.with_length(seq_len_B)  # the nodes stay uncommitted
    return cache, Draft(tokens_BxG, q_BxGxV, tree=tree, siblings=self.siblings)
