"""Medusa: J residual one-layer heads on the target's last hidden state, a static sparse tree.

Head k (k = 1..J) reads the hidden state h at position t and predicts token t + k + 1:
``h' = h + SiLU(W_k h + b_k)``, ``logits = lm_head(h')`` with the target's own (frozen) lm_head
(its embedding when tied). ``W_k`` starts at zero, so an untrained head copies the lm_head.

No drafting pass: the verify pass's hidden state at the last accepted node (``commit``) feeds the
heads next round. Its lm_head prediction is the token the loop just appended (the tree's root);
head k's choices fill depth k. A path ``(i_1, ..., i_d)`` of the sparse tree takes head k's
``i_k``-th choice at depth k.

Acceptance: greedy exact match at temperature 0 (lossless). Above it, ``acceptance="rejection"``
draws each head's choices without replacement from its q (Gumbel top-k; every node's child choices
must be 0..k-1) and verifies by recursive rejection sampling (lossless, Medusa-1 on a frozen
target); ``acceptance="typical"`` takes the deterministic top-k with Medusa's typical rule (LOSSY).
"""
from __future__ import annotations

import pathlib

import flax
import jax
import jax.numpy as jnp
import numpy as np

from specjax import tree as tree_lib
from specjax.drafters import vocab
from specjax.drafters.base import Draft, Drafter, hidden_at
from specjax.drafters.specinfer import draw_children
from specjax.models import heads as heads_lib
from specjax.models import store
from specjax.models.bundle import Model

# Medusa's release default tree, 63 candidates, depth 4: "mc_sim_7b_63" from
# FasterDecoding/Medusa medusa/model/medusa_choices.py (commit 5e98053).
MC_SIM_7B_63 = (
    (0,), (0, 0), (1,), (0, 1), (2,), (0, 0, 0), (1, 0), (0, 2), (3,), (0, 3), (4,), (0, 4), (2, 0), (0, 5),
    (0, 0, 1), (5,), (0, 6), (6,), (0, 7), (0, 1, 0), (1, 1), (7,), (0, 8), (0, 0, 2), (3, 0), (0, 9), (8,), (9,),
    (1, 0, 0), (0, 2, 0), (1, 2), (0, 0, 3), (4, 0), (2, 1), (0, 0, 4), (0, 0, 5), (0, 0, 0, 0), (0, 1, 1),
    (0, 0, 6), (0, 3, 0), (5, 0), (1, 3), (0, 0, 7), (0, 0, 8), (0, 0, 9), (6, 0), (0, 4, 0), (1, 4), (7, 0),
    (0, 1, 2), (2, 0, 0), (3, 1), (2, 2), (8, 0), (0, 5, 0), (1, 5), (1, 0, 1), (0, 2, 1), (9, 0), (0, 6, 0),
    (0, 0, 0, 1), (1, 6), (0, 7, 0))


def init_heads(rng, num_heads: int, d_model: int) -> dict:
  del rng  # zero init: every head starts as the lm_head itself (Medusa's choice)
  return {"w_KxExE": jnp.zeros((num_heads, d_model, d_model), jnp.float32),
          "b_KxE": jnp.zeros((num_heads, d_model), jnp.float32)}


def target_lm_head(target: Model) -> jax.Array:
  """``[E, V]`` float32: the target's output projection (its embedding, transposed, when tied)."""
  params = target.params
  w = params["lm_head"] if "lm_head" in params else params["embed"].T
  return jnp.asarray(w, jnp.float32)


def head_logits(heads: dict, lm_head_ExV, hidden_xE) -> jax.Array:
  """``[..., J, V]`` float32: every head's logits at every given hidden state."""
  h = hidden_xE.astype(jnp.float32)[..., None, :]
  h = h + jax.nn.silu(jnp.einsum("...ke,kef->...kf", jnp.broadcast_to(h, h.shape[:-2] + heads["b_KxE"].shape),
                                 heads["w_KxExE"]) + heads["b_KxE"])
  return h @ lm_head_ExV


def save_heads(heads: dict, folder, dtype: str = "float32", **meta) -> pathlib.Path:
  """A Medusa head bundle (family ``medusa``, the one checkpoint layout of :mod:`specjax.models.store`):
  config.json ({num_heads, d_model} plus whatever ``meta`` adds), model.safetensors (``dtype``
  storage; the heads load back as float32). A truncated vocabulary goes beside it as vocab_subset.npy."""
  k, e, _ = np.shape(heads["w_KxExE"])
  model = Model(module=heads_lib.MedusaHeads(heads_lib.MedusaConfig(num_heads=int(k), d_model=int(e))),
                params={name: heads[name] for name in ("w_KxExE", "b_KxE")})
  return heads_lib.save_head(model, folder, dtype=dtype, extra=meta)


def load_heads(folder) -> dict:
  """The heads of a Medusa bundle, float32 (a missing, corrupt or non-Medusa folder: CheckpointError)."""
  folder = pathlib.Path(folder)
  if (folder / "heads.npz").is_file() and not (folder / store.CONFIG_FILE).is_file():
    raise store.CheckpointError(f"{folder / 'heads.npz'}: Medusa heads are saved as a head bundle "
                                f"(config.json + model.safetensors) now; retrain with python -m specjax.train medusa")
  return dict(heads_lib.load_head(folder, family="medusa").params)


@flax.struct.dataclass
class Medusa(Drafter):
  heads: dict
  lm_head_ExV: jax.Array
  paths: tuple = flax.struct.field(pytree_node=False, default=tuple(tree_lib.full_paths((3, 2, 1))))
  acceptance: str = flax.struct.field(pytree_node=False, default="rejection")
  typical_epsilon: float = flax.struct.field(pytree_node=False, default=0.09)  # Medusa's posterior_threshold
  typical_delta: float = flax.struct.field(pytree_node=False, default=0.3)     # Medusa's posterior_alpha
  # truncated draft vocabulary (specjax.drafters.vocab): lm_head_ExV then holds only these columns
  subset_K: jax.Array | None = None
  vocab_size: int = flax.struct.field(pytree_node=False, default=0)  # the target's, when truncated
  kind = "medusa"
  array_axes = {"lm_head_ExV": ("embed", "vocab")}

  @property
  def num_params(self) -> int:  # the heads only: the lm_head is the target's
    return sum(int(x.size) for x in jax.tree_util.tree_leaves(self.heads))

  @classmethod
  def create(cls, target: Model, heads: dict, paths=None, **kw) -> "Medusa":
    paths = tuple(tuple(p) for p in (paths if paths is not None else tree_lib.full_paths((3, 2, 1))))
    lm_head = target_lm_head(target)
    if kw.get("subset_K") is not None:  # only the subset's columns of the target's LM head
      vocab.check_subset(kw["subset_K"], target.vocab_size, "Medusa")
      kw["subset_K"] = jnp.asarray(kw["subset_K"], jnp.int32)
      lm_head = jnp.take(lm_head, kw["subset_K"], axis=1)
      kw["vocab_size"] = target.vocab_size
    return cls(heads, lm_head, paths, **kw)

  def __post_init__(self):
    if self.acceptance not in ("rejection", "typical"):
      raise ValueError(f"Medusa acceptance must be 'rejection' or 'typical', got {self.acceptance!r}")
    tree = self.tree  # static fields only here: pytree unflattening re-runs this with any leaves
    choices = self._choices()
    if self.acceptance == "rejection":  # without-replacement siblings must be the first k draws
      for ch in tree.children:
        if ch and sorted(choices[list(ch)].tolist()) != list(range(len(ch))):
          raise ValueError(f"sampled Medusa trees need each node's child choices to be 0..k-1; got "
                           f"{choices[list(ch)].tolist()} (use acceptance='typical' or fix the paths)")

  @property
  def tree(self) -> tree_lib.Tree:
    return tree_lib.from_paths(self.paths)

  def _choices(self) -> np.ndarray:
    """``[N]``: each node's choice index (its path's last entry; 0 for the root)."""
    paths = sorted(set(self.paths), key=lambda p: (len(p), p))
    return np.array([0] + [p[-1] for p in paths], np.int32)

  def lossy_reason(self, sampling) -> str | None:
    if self.acceptance == "typical" and not sampling.greedy:
      return (f"Medusa's typical acceptance keeps plausible drafts instead of sampling the target at "
              f"temperature {sampling.temperature}; use acceptance='rejection' for exact output")
    return None

  def check_compatible(self, target) -> None:
    k = self.heads["w_KxExE"].shape[0]
    if self.tree.max_depth > k:
      raise ValueError(f"the Medusa tree has depth {self.tree.max_depth} but there are only {k} heads")
    if target.is_encoder_decoder:
      raise ValueError("Medusa heads need a decoder-only target")
    e, v = self.lm_head_ExV.shape
    if self.subset_K is not None:
      vocab.check_subset(self.subset_K, target.vocab_size, "Medusa")
      if v != self.subset_K.shape[0]:
        raise ValueError(f"Medusa lm_head has {v} columns but its vocab subset has K={self.subset_K.shape[0]} ids")
      v = self.vocab_size
    if v != target.vocab_size or e != target.config.d_model:
      raise ValueError(f"Medusa lm_head is [{e}, {v}] but the target has d_model={target.config.d_model}, "
                       f"vocab_size={target.vocab_size}")

  def init(self, target, prompts_BxP, prompt_lengths_B, max_len, prefill=None):
    # the hidden state before the last prompt token (its lm_head predicted that token)
    del max_len
    return hidden_at(self.prefill_of(target, prompts_BxP, prefill).hidden_BxPxE, jnp.maximum(prompt_lengths_B - 2, 0))

  def propose(self, hidden_BxE, tokens_BxS, seq_len_B, gamma, sampling, rng):
    del tokens_BxS, seq_len_B, gamma
    tree = self.tree
    logits_BxJxV = head_logits(self.heads, self.lm_head_ExV, hidden_BxE)
    depth = jnp.asarray(tree.depth[1:]) - 1  # head index of every draft node
    choice = jnp.asarray(self._choices()[1:])
    width = max(1, int(self._choices().max()) + 1)
    typical = self.acceptance == "typical" and not sampling.greedy
    q_BxJxV = None if (sampling.greedy or typical) else sampling.probs(logits_BxJxV)  # top-k needs no q
    siblings = "topk" if (sampling.greedy or typical) else "without_replacement"
    ranked_BxJxC = draw_children(rng, logits_BxJxV, q_BxJxV, width, siblings, sampling.greedy)
    if self.subset_K is not None:  # ranks over the subset's columns -> token ids; q over the full vocab
      ranked_BxJxC = jnp.take(self.subset_K, ranked_BxJxC)
      if q_BxJxV is not None:
        q_BxJxV = vocab.scatter_probs(q_BxJxV, self.subset_K, self.vocab_size)
    tokens_BxG = ranked_BxJxC[:, depth, choice]
    q_BxGxV = None if (sampling.greedy or typical) else q_BxJxV[:, depth]
    return hidden_BxE, Draft(tokens_BxG, q_BxGxV, tree=tree, siblings=siblings,
                             rule=("typical", self.typical_epsilon, self.typical_delta) if typical else None)

  def commit(self, hidden_BxE, tokens_BxS, seq_len_B, n_accepted_B, target_hidden_BxTxE):
    del hidden_BxE, tokens_BxS, seq_len_B
    return jnp.take_along_axis(target_hidden_BxTxE, n_accepted_B[:, None, None], 1)[:, 0].astype(jnp.float32)
