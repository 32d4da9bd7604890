"""EAGLE-3: a one-layer head on the target's features drafts a chain, a static tree, or a dynamic tree.

The head (:mod:`specjax.models.eagle_head`) keeps its own one-layer KV cache. Slot ``t`` holds
``(fc(F_t), x_{t+1})``, ``F_t`` the fused target features at position ``t``; the cache length
counts the slots whose inputs are all known. A row holding ``L`` tokens has target features up to
position ``L - 2`` (the verify pass returns them through ``commit``, which only stores them), so each
``propose`` first *catches up*: one head pass over the slots from the cache length to ``L - 2``
(at most ``depth + 1``, static width), whose last output is the root's -- the distribution of the
first draft. Deeper drafts feed back the head's own output ``g`` instead of ``fc(F)``.

Three shapes of draft, all verified in one target pass (:func:`specjax.tree.verify_and_accept`):

* chain (``paths=()``, ``dynamic=None``): ``gamma`` drafts, one head step each;
* static tree (``paths``, Medusa/SpecInfer style): level by level, one head pass per depth over
  that level's nodes; children are the top-k (greedy) or drawn without replacement (Gumbel top-k)
  / i.i.d. from q (``siblings``), verified by recursive / multi-round rejection sampling;
* dynamic tree (``dynamic=DynamicTree(depth, top_k, total_tokens)``, EAGLE-2): each depth expands
  the ``top_k`` best nodes (beam) into ``top_k`` children each, then the best ``total_tokens``
  nodes of the pool are verified, a different tree per row (:mod:`specjax.tree_rows`). Greedy:
  top-k children and EAGLE-2's cumulative log-probability. Sampling: children drawn without
  replacement and a score that never reads a node's own token, which is what keeps the selection
  unbiased (:func:`specjax.tree_rows.select` says why).
"""
from __future__ import annotations

import dataclasses

import flax
import jax
import jax.numpy as jnp
import numpy as np

from specjax import tree as tree_lib
from specjax import tree_rows
from specjax.drafters import vocab
from specjax.drafters.base import Draft
from specjax.drafters.head import FeatureHeadDrafter
from specjax.drafters.specinfer import draw_children
from specjax.models import heads, kv_cache
from specjax.models.bundle import Model


@dataclasses.dataclass(frozen=True)
class DynamicTree:
  """EAGLE-2's expansion: ``depth`` levels, ``top_k`` children per expanded node and ``top_k``
  expanded nodes per level; ``total_tokens`` draft nodes (root excluded) are verified."""
  depth: int = 6
  top_k: int = 4
  total_tokens: int = 16
  # "rank": a node scores log q_parent[its sibling rank's probability] (lossless, tree_rows.select);
  # "drawn": EAGLE-2's log q of the drawn token itself -- BIASED when sampling, kept for the tests'
  # power check (at temperature 0 both are the same rule).
  score: str = "rank"

  def __post_init__(self):
    if self.score not in ("rank", "drawn"):
      raise ValueError(f"DynamicTree.score must be 'rank' or 'drawn', got {self.score!r}")
    for name in ("depth", "top_k", "total_tokens"):
      v = getattr(self, name)
      if isinstance(v, bool) or int(v) != v or v < 1:
        raise ValueError(f"DynamicTree.{name} must be a positive integer, got {v!r}")
    if self.total_tokens > self.pool_size:
      raise ValueError(f"DynamicTree total_tokens={self.total_tokens} exceeds the {self.pool_size} nodes that "
                       f"depth={self.depth}, top_k={self.top_k} drafts (top_k + (depth - 1) * top_k**2)")

  @property
  def pool_size(self) -> int:
    return self.top_k + (self.depth - 1) * self.top_k ** 2


@flax.struct.dataclass
class EagleState:
  cache: kv_cache.KVCache  # the head's keys/values, one layer; length: slots with every input known
  feat_BxSxF: jax.Array    # the target's fused-layer features by position (written by commit)
  embed_VxE: jax.Array     # the target's embedding (frozen)


@flax.struct.dataclass
class Eagle(FeatureHeadDrafter):
  head: Model                        # an EagleHead bundle
  subset_K: jax.Array | None = None  # EAGLE-3's d2t: the draft vocabulary's target ids; None: all
  paths: tuple = flax.struct.field(pytree_node=False, default=())  # a static tree (tree.from_paths)
  dynamic: DynamicTree | None = flax.struct.field(pytree_node=False, default=None)
  siblings: str = flax.struct.field(pytree_node=False, default="without_replacement")  # static trees
  kind = "eagle"

  def __post_init__(self):
    if self.paths and self.dynamic is not None:
      raise ValueError("Eagle takes a static tree (paths) or a dynamic one, not both")
    if self.siblings not in tree_lib.SIBLINGS:
      raise ValueError(f"unknown siblings mode {self.siblings!r}; expected one of {tree_lib.SIBLINGS}")
    if self.dynamic is not None and self.siblings != "without_replacement":
      raise ValueError(f"Eagle siblings={self.siblings!r} does not apply to a dynamic tree (it takes the top-k "
                       "when greedy and draws without replacement when sampling); leave siblings unset")

  @property
  def tree(self):
    """None for a chain; the static tree; or the dynamic tree's shape (its nodes differ per row)."""
    if self.dynamic is not None:
      return tree_rows.Shape(self.dynamic.total_tokens + 1, self.dynamic.depth)
    return tree_lib.from_paths(self.paths) if self.paths else None

  def lossy_reason(self, sampling) -> str | None:
    if sampling.greedy:
      return None
    if self.dynamic is not None:
      return (f"DynamicTree(score='drawn') scores a sampled child by its own probability, which biases the "
              f"output at temperature {sampling.temperature}; use score='rank'") if self.dynamic.score == "drawn" else None
    return tree_lib.siblings_lossy_reason(self.siblings, sampling)

  def check_compatible(self, target) -> None:
    self.check_head(target, "EAGLE head", "EAGLE")
    cfg = self.head.config
    if self.subset_K is not None:
      if self.subset_K.shape[0] != cfg.out_vocab:
        raise ValueError(f"EAGLE head has {cfg.out_vocab} outputs but its d2t map has {self.subset_K.shape[0]} ids")
    elif cfg.out_vocab != target.vocab_size:
      raise ValueError(f"EAGLE head has a truncated vocabulary ({cfg.out_vocab} of {target.vocab_size}) but no "
                       "d2t map: pass subset_K (the target ids of its outputs)")
    self.check_feature_layers(target, "EAGLE")

  # ----------------------------------------------------------------------------- head calls
  def _tokens(self, ids_xK):
    """Draft-vocabulary ids -> target ids."""
    return ids_xK if self.subset_K is None else jnp.take(self.subset_K, ids_xK)

  def _full_q(self, q_xK, vocab_size: int):
    return q_xK if self.subset_K is None else vocab.scatter_probs(q_xK, self.subset_K, vocab_size)

  def _extra_slots(self) -> int:
    """Head-cache slots past the target's max_len: a dynamic tree's beams can outnumber its nodes."""
    return 0 if self.dynamic is None else (self.dynamic.depth - 1) * self.dynamic.top_k

  def init(self, target, prompts_BxP, prompt_lengths_B, max_len, prefill=None):
    b, p = prompts_BxP.shape
    embed, _ = heads.target_io(target)
    feat_BxPxF = self.prefill_of(target, prompts_BxP, prefill).features_BxPxF
    feat = jnp.zeros((b, max_len, feat_BxPxF.shape[-1]), jnp.float32).at[:, :p].set(feat_BxPxF)
    cfg = self.head.config
    cache = kv_cache.init_cache(1, b, max_len + self._extra_slots(), cfg.num_kv_heads, cfg.head_dim)
    next_BxP = jnp.concatenate([prompts_BxP[:, 1:], jnp.zeros((b, 1), prompts_BxP.dtype)], 1)
    h = self.apply_head(feat_BxPxF, method="project")
    positions = jnp.broadcast_to(jnp.arange(p)[None], (b, p))
    _, _, cache = self.apply_head(h, embed[next_BxP], positions, cache, kv_cache.causal_mask(p))
    return EagleState(cache.with_length(jnp.maximum(prompt_lengths_B - 2, 0)), feat, embed)

  def commit(self, state, tokens_BxS, seq_len_B, n_accepted_B, target_hidden_BxTxE):
    del tokens_BxS, n_accepted_B
    want = len(self.feature_layers) * self.head.config.d_model
    if target_hidden_BxTxE.shape[-1] != want:
      raise ValueError(f"Eagle.commit got target features of width {target_hidden_BxTxE.shape[-1]}, expected "
                       f"{want} (layers {self.feature_layers}): the loop must honour drafter.feature_layers")
    # the verify pass started at the last token: its features are positions seq_len - 1 onwards
    feat = kv_cache.write_rows(state.feat_BxSxF, target_hidden_BxTxE.astype(jnp.float32), seq_len_B - 1)
    return state.replace(feat_BxSxF=feat)

  def _catch_up(self, state, tokens_BxS, seq_len_B, depth: int):
    """Head pass over slots ``length .. length + depth`` (inputs known up to ``L - 2``): the root's
    ``(g, logits)`` and the cache committed through the root's slot ``L - 2``.

    A row holding one token (``L = 1``) has no slot ``-1`` to predict its first draft: the pass's
    first slot then reads a zero feature and ``x_0`` (drafts are poor, never wrong) and nothing is
    committed, so slot 0 is written with ``(F_0, x_1)`` once ``x_1`` exists instead of pairing
    ``F_0`` with whatever sits past the row's text."""
    cache, s = state.cache, tokens_BxS.shape[1]
    w = depth + 1
    slots_BxT = cache.length_B[:, None] + jnp.arange(w)[None]
    alone_BxT = (seq_len_B < 2)[:, None] & (slots_BxT == 0)  # the L = 1 root, read from x_0 alone
    h = self.apply_head(kv_cache.gather_rows(state.feat_BxSxF, jnp.minimum(slots_BxT, s - 1)), method="project")
    h = jnp.where(alone_BxT[..., None], 0.0, h)
    next_BxT = jnp.where(alone_BxT, 0, jnp.minimum(slots_BxT + 1, s - 1))
    emb = state.embed_VxE[kv_cache.gather_rows(tokens_BxS, next_BxT)]
    g, logits, cache = self.apply_head(h, emb, slots_BxT, cache, kv_cache.causal_mask(w))
    root_B = jnp.clip(seq_len_B - 2 - cache.length_B, 0, w - 1)
    pick = lambda x: jnp.take_along_axis(x, root_B.reshape(-1, 1, 1), 1)[:, 0]
    return pick(g), pick(logits), cache.with_length(jnp.maximum(cache.length_B, seq_len_B - 1))

  def propose(self, state, tokens_BxS, seq_len_B, gamma, sampling, rng):
    depth = self.dynamic.depth if self.dynamic is not None else gamma
    g_BxE, logits_BxK, cache = self._catch_up(state, tokens_BxS, seq_len_B, depth)
    root_slot_B = cache.length_B - 1
    v = state.embed_VxE.shape[0]
    if self.dynamic is not None:
      draft, cache = self._dynamic(state, cache, g_BxE, logits_BxK, root_slot_B, sampling, rng, v)
    else:
      tree = self.tree if self.paths else tree_lib.chain(gamma)
      draft, cache = self._static(state, cache, tree, g_BxE, logits_BxK, root_slot_B, sampling, rng, v)
    return state.replace(cache=cache.with_length(root_slot_B + 1)), draft

  def _static(self, state, cache, tree, g_root_BxE, root_logits_BxK, root_slot_B, sampling, rng, v):
    """Level by level over a static tree (a chain is the tree chain(gamma)); as SpecInfer does."""
    b, n, depth = g_root_BxE.shape[0], tree.num_nodes, tree.max_depth
    greedy = sampling.greedy
    tokens_BxG = jnp.zeros((b, n - 1), jnp.int32)
    q_BxGxV = None if greedy else jnp.zeros((b, n - 1, v), jnp.float32)
    g_BxNxE = jnp.zeros((b, n, g_root_BxE.shape[-1]), g_root_BxE.dtype).at[:, 0].set(g_root_BxE)
    level_logits, level_nodes = root_logits_BxK[:, None], np.array([0])
    for d in range(1, depth + 1):
      k = max(len(tree.children[par]) for par in level_nodes)
      q_level = None if greedy else sampling.probs(level_logits)
      kids = draw_children(jax.random.fold_in(rng, d), level_logits, q_level, k, self.siblings, greedy)
      nodes, parent_idx, rank = map(np.array, zip(*[(c, i, j) for i, par in enumerate(level_nodes)
                                                    for j, c in enumerate(tree.children[par])]))
      tokens_BxG = tokens_BxG.at[:, nodes - 1].set(self._tokens(kids[:, parent_idx, rank]))
      if q_level is not None:
        q_BxGxV = q_BxGxV.at[:, nodes - 1].set(self._full_q(q_level[:, parent_idx], v))
      if d == depth:
        break
      lo, hi = int(nodes.min()), int(nodes.max())  # BFS: level d is nodes lo..hi at slots root + lo..
      parents = np.asarray(tree.parents)[lo:hi + 1]
      pos_BxT = root_slot_B[:, None] + jnp.asarray(tree.depth[lo:hi + 1])[None]
      window = jnp.asarray(tree.mask[lo:hi + 1, 1:hi + 1])  # the root's slot is committed: always seen
      g, level_logits, cache = self.apply_head(g_BxNxE[:, parents], state.embed_VxE[tokens_BxG[:, lo - 1:hi]], pos_BxT,
                                          cache.with_length(root_slot_B + lo), window)
      g_BxNxE = g_BxNxE.at[:, lo:hi + 1].set(g)
      level_nodes = nodes
    # a chain keeps its siblings mode too: top-1 drafts at T > 0 are deterministic, not draws from q
    return Draft(tokens_BxG, q_BxGxV, tree=None if tree.is_chain else tree, siblings=self.siblings), cache

  def _dynamic(self, state, cache, g_root_BxE, root_logits_BxK, root_slot_B, sampling, rng, v):
    """EAGLE-2: expand the beam level by level, then keep the best ``total_tokens`` nodes."""
    dyn, greedy = self.dynamic, sampling.greedy
    k, depth, b = dyn.top_k, dyn.depth, g_root_BxE.shape[0]
    probs = (lambda lg: jax.nn.softmax(lg.astype(jnp.float32), -1)) if greedy else sampling.probs
    mode = "topk" if greedy else "without_replacement"

    def children(q_BxNxK, logits_BxNxK, key):
      """Tokens, the node-independent estimate log q[j-th largest], and exact log q of each child."""
      logq = jnp.log(q_BxNxK)
      kids = draw_children(key, logits_BxNxK, q_BxNxK, k, mode, greedy)
      own = jnp.take_along_axis(logq, kids, -1)
      est = jax.lax.top_k(logq, k)[0] if dyn.score == "rank" else own  # rank j: the j-th largest probability
      return kids, est, own

    q_root = probs(root_logits_BxK)[:, None]
    kids, est, logq_tok = children(q_root, root_logits_BxK[:, None], jax.random.fold_in(rng, 0))
    pool_tok, pool_score, pool_parent, pool_q = [kids[:, 0]], [est[:, 0]], [jnp.full((b, k), -1, jnp.int32)], \
        [jnp.zeros((b, k), jnp.int32)]
    q_store = [q_root]
    beam_idx = jnp.broadcast_to(jnp.arange(k, dtype=jnp.int32)[None], (b, k))  # pool indices of the beam
    beam_tok, beam_score, beam_cum = kids[:, 0], est[:, 0], logq_tok[:, 0]
    beam_g = jnp.broadcast_to(g_root_BxE[:, None], (b, k, g_root_BxE.shape[-1]))  # the parents' outputs
    beam_vis = jnp.zeros((b, k, (depth - 1) * k), bool)  # which beam slots each beam node sees
    offset = k  # pool size so far
    for d in range(1, depth):
      slot0 = (d - 1) * k  # this beam's first slot after the root
      beam_vis = beam_vis.at[:, :, slot0:slot0 + k].set(jnp.eye(k, dtype=bool)[None])
      g, logits, cache = self.apply_head(beam_g, state.embed_VxE[self._tokens(beam_tok)],
                                    jnp.broadcast_to((root_slot_B + d)[:, None], (b, k)),
                                    cache.with_length(root_slot_B + 1 + slot0), beam_vis[:, :, :slot0 + k])
      q_beam = probs(logits)
      q_store.append(q_beam)
      kids, est, logq_tok = children(q_beam, logits, jax.random.fold_in(rng, d))
      score = jnp.minimum(beam_cum[:, :, None] + est, beam_score[:, :, None]).reshape(b, k * k)
      cum = (beam_cum[:, :, None] + logq_tok).reshape(b, k * k)
      pool_tok.append(kids.reshape(b, k * k))
      pool_score.append(score)
      pool_parent.append(jnp.repeat(beam_idx, k, axis=1))
      pool_q.append(jnp.repeat(1 + (d - 1) * k + jnp.arange(k, dtype=jnp.int32)[None], k, axis=1) * jnp.ones((b, 1), jnp.int32))
      if d + 1 < depth:  # the next beam: the best k children (ties: earlier in the pool)
        _, pick = jax.lax.top_k(score, k)
        parent_m = pick // k
        beam_idx = (offset + pick).astype(jnp.int32)
        beam_tok = jnp.take_along_axis(kids.reshape(b, k * k), pick, 1)
        beam_score, beam_cum = jnp.take_along_axis(score, pick, 1), jnp.take_along_axis(cum, pick, 1)
        beam_g = jnp.take_along_axis(g, parent_m[..., None], 1)
        beam_vis = jnp.take_along_axis(beam_vis, parent_m[..., None], 1)
      offset += k * k
    tok_BxZ, score_BxZ = jnp.concatenate(pool_tok, 1), jnp.concatenate(pool_score, 1)
    parent_BxZ, qsrc_BxZ = jnp.concatenate(pool_parent, 1), jnp.concatenate(pool_q, 1)
    keep_BxN, rows = tree_rows.select(score_BxZ, parent_BxZ, dyn.total_tokens, depth, k)
    tokens_BxN = self._tokens(jnp.take_along_axis(tok_BxZ, keep_BxN, 1))
    q_BxNxV = None
    if not greedy:
      q_all = jnp.concatenate(q_store, 1)  # [B, 1 + (depth - 1) k, K]: the root's and each beam node's q
      q_BxNxV = self._full_q(kv_cache.gather_rows(q_all, jnp.take_along_axis(qsrc_BxZ, keep_BxN, 1)), v)
    return Draft(tokens_BxN, q_BxNxV, siblings=mode, row_tree=rows), cache


def default_static_paths(gamma: int) -> str:
  """A chain of ``gamma`` plus the second choice at depths 1 and 2 (EAGLE's trees spend nodes early)."""
  branches = "".join(f"+{d}x{gamma - d - (d > 1)}" for d in (1, 2) if gamma - d - (d > 1) >= 1)
  return f"chain{gamma}{branches}"
