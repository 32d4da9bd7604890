"""A small separate draft model for a real target: frozen target embedding in, truncated vocabulary out.

Shipping a 2-layer drafter for a 49k-token vocabulary would mostly ship its ``V x d`` input
embedding and ``d x V`` LM head. This module keeps both small:

* input: the TARGET's own embedding ``[V, E]`` (frozen, never stored: spliced in from the target at
  load time), then a learned ``E -> d_model`` projection;
* output: logits over ``K`` token ids ``subset_K`` (``specjax.drafters.vocab``; lossless
  truncation, q is zero outside the subset): with ``frozen_head`` (FR-Spec's choice) a learned
  ``d_model -> E`` projection, a norm, then the TARGET's LM-head columns of the subset (frozen, from
  the target at load time); otherwise a learned ``d_model x K`` head.

The blocks are :class:`specjax.models.decoder.Block` (same cache, masks and RoPE as the target),
so ``api.start``/``api.forward`` and :class:`specjax.drafters.DraftModel` drive it unchanged.
A bundle folder is the one checkpoint layout (:mod:`specjax.models.store`): ``config.json`` (family
``draft_lm``), ``model.safetensors`` (every param but the frozen ones, bf16) and ``vocab_subset.npy``;
``specjax.drafters.build("draft_model", {"checkpoint": folder}, target)`` rebuilds it for a target.
"""
from __future__ import annotations

import dataclasses
import pathlib

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
from flax import traverse_util

from specjax.models import bundle, kv_cache, packed, store
from specjax.models.store import ASSETS, SUBSET_FILE
from specjax.models.decoder import Block, DecoderConfig, _norm
from specjax.models.layers import Init, param_with_axes

FROZEN = "frozen_embed"
FROZEN_HEAD = "frozen_unembed"
FROZEN_KEYS = (FROZEN, FROZEN_HEAD)
FAMILY = "draft_lm"


@dataclasses.dataclass(frozen=True)
class DraftLMConfig(DecoderConfig):
  """``vocab_size``: the target's (input ids); ``embed_dim``: the target embedding's width;
  ``out_vocab``: K, the width of the output head (0: vocab_size)."""
  embed_dim: int = 64
  out_vocab: int = 0
  frozen_head: bool = False  # logits = norm(h @ up) @ target_unembed[:, subset]

  def __post_init__(self):
    super().__post_init__()
    if not 0 <= self.out_vocab <= self.vocab_size:
      raise ValueError(f"out_vocab={self.out_vocab} must be in [0, vocab_size={self.vocab_size}]")

  @property
  def num_outputs(self) -> int:
    return self.out_vocab or self.vocab_size


class DraftLM(nn.Module):
  """Returns ``(logits_BxTxK float32, hidden_BxTxE, cache)`` like :class:`Decoder` (K = out_vocab)."""
  cfg: DraftLMConfig

  @staticmethod
  def stored_params(params) -> int:
    return sum(x.size for k, x in traverse_util.flatten_dict(params, sep="/").items() if k not in FROZEN_KEYS)

  @nn.compact
  def __call__(self, tokens_BxT, positions_BxT=None, cache: kv_cache.KVCache | None = None, new_mask_TxT=None):
    cfg, dt = self.cfg, jnp.dtype(self.cfg.dtype)
    b, t = tokens_BxT.shape
    if new_mask_TxT is None:
      new_mask_TxT = kv_cache.causal_mask(t)
    if positions_BxT is None:
      start = jnp.zeros((b,), jnp.int32) if cache is None else cache.length_B
      positions_BxT = start[:, None] + jnp.arange(t)[None, :]
    embed_VxI = jax.lax.stop_gradient(self.param(FROZEN, Init.normal(1.0), (cfg.vocab_size, cfg.embed_dim)))
    proj_IxE = param_with_axes(self, "embed_proj", Init.normal(cfg.embed_dim ** -0.5), (cfg.embed_dim, cfg.d_model),
                               ("mlp", "embed"))
    x = _norm(cfg, "embed_norm")(embed_VxI.astype(dt)[tokens_BxT] @ proj_IxE.astype(dt))
    if cache is None:
      mask = jnp.broadcast_to(new_mask_TxT[None], (b, t, t))
    else:
      mask = kv_cache.attention_mask(cache.length_B, cache.max_len, new_mask_TxT)
    for i in range(cfg.num_layers):
      x, cache = Block(cfg, i, name=f"layer_{i}")(x, positions_BxT, mask, cache)
    hidden = _norm(cfg, "final_norm")(x)
    if cfg.frozen_head:
      up_ExI = param_with_axes(self, "head_proj", Init.normal(cfg.d_model ** -0.5), (cfg.d_model, cfg.embed_dim),
                               ("embed", "mlp"))
      head_IxK = jax.lax.stop_gradient(self.param(FROZEN_HEAD, Init.normal(cfg.embed_dim ** -0.5),
                                                  (cfg.embed_dim, cfg.num_outputs)))
      g = _norm(cfg, "head_norm")(hidden @ up_ExI.astype(dt))
      return (g @ head_IxK.astype(dt)).astype(jnp.float32), hidden, cache
    head_ExK = param_with_axes(self, "lm_head", Init.normal(cfg.d_model ** -0.5), (cfg.d_model, cfg.num_outputs),
                               ("embed", "vocab"))
    return (hidden @ head_ExK.astype(dt)).astype(jnp.float32), hidden, cache


def frozen_params(cfg: DraftLMConfig, target, subset_K=None) -> dict:
  """The params a bundle does not store, taken from the target: its embedding (and LM-head columns)."""
  from specjax.models import heads  # pylint: disable=import-outside-toplevel
  embed, unembed = heads.target_io(target)
  if embed.shape != (cfg.vocab_size, cfg.embed_dim):
    raise ValueError(f"target embedding is {tuple(embed.shape)}; the config expects "
                     f"(vocab_size={cfg.vocab_size}, embed_dim={cfg.embed_dim})")
  out = {FROZEN: jnp.asarray(embed, jnp.float32)}
  if cfg.frozen_head:
    if subset_K is None and cfg.num_outputs != cfg.vocab_size:
      raise ValueError("a frozen_head draft_lm with out_vocab < vocab_size needs its subset_K")
    cols = unembed if subset_K is None else jnp.take(unembed, jnp.asarray(subset_K), axis=1)
    out[FROZEN_HEAD] = jnp.asarray(cols, jnp.float32)
  return out


def init(cfg: DraftLMConfig, target, seed: int = 0, subset_K=None) -> bundle.Model:
  """A random DraftLM whose frozen parts are the target's."""
  model = bundle.init_model(DraftLM(cfg), seed)
  return model.replace(params={**model.params, **frozen_params(cfg, target, subset_K)})


def resolve(name) -> pathlib.Path | None:
  """The folder of a draft_lm bundle (a path or a name under specjax/assets), else None."""
  if not name:
    return None
  for path in (pathlib.Path(name).expanduser(), ASSETS / str(name)):
    if (path / store.CONFIG_FILE).is_file():
      return path if store.read_family(path) == FAMILY else None
  return None


def save(model: bundle.Model, subset_K, folder, dtype: str = "bfloat16", extra: dict | None = None) -> pathlib.Path:
  """Everything but the frozen embedding (``dtype`` storage), the config and the vocab subset, in the
  one checkpoint layout (:mod:`specjax.models.store`)."""
  subset_K = np.asarray(subset_K, np.int32)
  store.check_subset(subset_K, model.config.vocab_size, "draft_lm.save")
  if subset_K.size != model.config.num_outputs:
    raise ValueError(f"vocab subset has K={subset_K.size} ids but the head has out_vocab={model.config.num_outputs}")
  return store.save(folder, FAMILY, dataclasses.asdict(model.config), model.params, dtype, skip=FROZEN_KEYS,
                    subset=subset_K, extra=extra)


def load(folder, target) -> tuple[bundle.Model, np.ndarray]:
  """``(model, subset_K)`` from a bundle folder, the frozen embedding taken from ``target``."""
  folder = pathlib.Path(folder)
  meta = store.read_meta(folder, (FAMILY,), FAMILY)
  cfg = store.make_config(DraftLMConfig, meta, folder)
  if cfg.vocab_size != target.vocab_size:
    raise store.CheckpointError(f"{folder}: drafter vocab_size={cfg.vocab_size} differs from the target's "
                                f"vocab_size={target.vocab_size}; both must share one tokenizer")
  subset_K = store.read_subset(folder, target.vocab_size, required=True)
  if subset_K.size != cfg.num_outputs:
    raise store.CheckpointError(f"{folder / SUBSET_FILE}: K={subset_K.size} ids but the head has "
                                f"out_vocab={cfg.num_outputs}")
  flat = store.read_params(packed.weights_folder(folder), jnp.float32)
  flat.update(frozen_params(cfg, target, subset_K))
  model = bundle.from_flat(DraftLM(cfg), flat, source=str(folder / store.WEIGHTS_FILE))
  return model, subset_K
