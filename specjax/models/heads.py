"""Heads that read a frozen decoder's hidden states: the shared-weight MTP head (Nemotron 3 Super)
and Medusa-1's residual heads.

Also the save/load helpers every head family uses (config.json + model.safetensors, the one layout
of :mod:`specjax.models.store`), and ``target_io``: the target's embedding and LM head, which the
heads reuse frozen instead of learning their own.

MTP head, one step: ``g = f(h, e)`` where ``h`` is a hidden state after a final norm (the target's
at position t, or the head's own output from the previous step) and ``e`` is the embedding of the
token at t+1; ``g`` is again "after a final norm", so ``g @ unembed`` gives logits for t+2 and ``g``
feeds the next step. One set of weights serves every offset, so the chain can be any length.
"""
from __future__ import annotations

import dataclasses
import pathlib

import flax.linen as nn
import jax
import jax.numpy as jnp

from specjax.models import bundle, packed, store
from specjax.models.store import ASSETS
from specjax.models.layers import GatedMLP, Init, RMSNorm, param_with_axes


@dataclasses.dataclass(frozen=True)
class MTPConfig:
  vocab_size: int = 256
  d_model: int = 128     # must equal the target's d_model (reads its hidden states and embeddings)
  mlp_dim: int = 384
  num_blocks: int = 1    # residual SwiGLU blocks after the input projection
  norm_eps: float = 1e-6
  dtype: str = "float32"


class MTPHead(nn.Module):
  """``(h_xE, emb_xE) -> g_xE``: concat(RMSNorm(h), RMSNorm(emb)) -> linear -> SwiGLU blocks -> RMSNorm."""
  cfg: MTPConfig
  family = "mtp_head"

  @nn.compact
  def __call__(self, h_xE, emb_xE):
    cfg, dt = self.cfg, jnp.dtype(self.cfg.dtype)
    e = cfg.d_model
    x = jnp.concatenate([RMSNorm(cfg.norm_eps, name="hidden_norm")(h_xE.astype(dt)),
                         RMSNorm(cfg.norm_eps, name="embed_norm")(emb_xE.astype(dt))], -1)
    w_in = param_with_axes(self, "in_proj", Init.normal((2 * e) ** -0.5), (2 * e, e), ("mlp", "embed"))
    x = x @ w_in.astype(dt)
    for i in range(cfg.num_blocks):
      x = x + GatedMLP(e, cfg.mlp_dim, cfg.dtype, name=f"block_{i}")(RMSNorm(cfg.norm_eps, name=f"norm_{i}")(x))
    return RMSNorm(cfg.norm_eps, name="final_norm")(x)

  def dummy_inputs(self):
    z = jnp.zeros((1, self.cfg.d_model))
    return (z, z), {}


@dataclasses.dataclass(frozen=True)
class MedusaConfig:
  num_heads: int = 4
  d_model: int = 128     # the target's d_model


class MedusaHeads(nn.Module):
  """Medusa-1's ``J`` residual heads: ``h_xE -> h_xJxE``, head k's ``h + SiLU(W_k h + b_k)``; the
  drafter (:mod:`specjax.drafters.medusa`) multiplies them by the target's frozen LM head. Zero init,
  so an untrained head copies the LM head. Params ``w_KxExE`` and ``b_KxE`` (K: heads, the names they are saved with), float32."""
  cfg: MedusaConfig
  family = "medusa"

  @nn.compact
  def __call__(self, h_xE):
    k, e = self.cfg.num_heads, self.cfg.d_model
    w = self.param("w_KxExE", nn.initializers.zeros, (k, e, e), jnp.float32)
    b = self.param("b_KxE", nn.initializers.zeros, (k, e), jnp.float32)
    h = jnp.broadcast_to(h_xE.astype(jnp.float32)[..., None, :], h_xE.shape[:-1] + (k, e))
    return h + jax.nn.silu(jnp.einsum("...ke,kef->...kf", h, w) + b)

  def dummy_inputs(self):
    return (jnp.zeros((1, self.cfg.d_model)),), {}


# ----------------------------------------------------------------------------- target weights
def target_io(target):
  """``(embed_VxE, unembed_ExV)`` of a decoder-only target: its input embedding and LM head."""
  if target.is_encoder_decoder:
    raise ValueError("MTP/DFlash heads need a decoder-only target; got an encoder-decoder")
  p = target.params
  embed = p["embed"]
  unembed = p["lm_head"] if "lm_head" in p else embed.T  # tied embeddings: logits = h @ embed.T
  return embed, unembed


def check_feature_config(cfg) -> None:
  """Validates (in ``__post_init__``) the config of a head fed by target-layer features: stores
  ``target_layers`` as a tuple of ints (JSON gives lists), which must name at least one layer, and
  needs ``num_heads`` to be a multiple of ``num_kv_heads``."""
  object.__setattr__(cfg, "target_layers", tuple(int(i) for i in cfg.target_layers))
  if not cfg.target_layers:
    raise ValueError(f"{type(cfg).__name__}.target_layers must name at least one target layer")
  if cfg.num_heads % cfg.num_kv_heads:
    raise ValueError(f"num_heads={cfg.num_heads} is not a multiple of num_kv_heads={cfg.num_kv_heads}")


def check_head(head_model, target, what: str) -> None:
  cfg, tcfg = head_model.config, target.config
  if target.is_encoder_decoder:
    raise ValueError(f"{what} needs a decoder-only target; got an encoder-decoder")
  if cfg.vocab_size != tcfg.vocab_size:
    raise ValueError(f"{what} vocab_size={cfg.vocab_size} differs from target vocab_size={tcfg.vocab_size}")
  if cfg.d_model != tcfg.d_model:
    raise ValueError(f"{what} d_model={cfg.d_model} differs from target d_model={tcfg.d_model}; the head "
                     "reads the target's hidden states and embeddings")


# ----------------------------------------------------------------------------- init, save, load


def resolve(name) -> pathlib.Path | None:
  """A head folder: ``name`` itself, or ``specjax/assets/<name>``; None when neither exists."""
  if not name:
    return None
  path = pathlib.Path(name)
  path = path if path.exists() or not (ASSETS / path).exists() else ASSETS / path
  return path if path.exists() else None


_REGISTERED: dict = {}  # family -> (module class, config class), filled by register_head


def register_head(module_cls, config_cls) -> None:
  """Makes saved heads of ``module_cls.family`` loadable (a drafter kind's ``head``/``head_config`` do this)."""
  _REGISTERED[module_cls.family] = (module_cls, config_cls)


def load_or_init(name: str, module_fn, seed: int, what: str) -> bundle.Model:
  """The head at ``name`` (a folder, or a name under specjax/assets) if it exists, else a random
  ``module_fn()`` head, with a printed note: a random head is exact, just rarely accepted."""
  path = resolve(name)
  if path is not None:
    return load_head(path)
  print(f"NOTE: no trained {what} at {name!r}; using a RANDOM head (exact, but few drafts accepted)")
  return init_head(module_fn(), seed)




def _init_variables(module, rng):
  args, kwargs = module.dummy_inputs()
  return module.init(rng, *args, **kwargs)


def init_head(module, seed: int = 0) -> bundle.Model:
  return bundle.Model(module=module, params=nn.unbox(_init_variables(module, jax.random.PRNGKey(seed))["params"]))


def save_head(model: bundle.Model, folder, dtype: str = "float32", extra: dict | None = None) -> pathlib.Path:
  """The one checkpoint layout (:mod:`specjax.models.store`): config.json + model.safetensors
  (bf16 storage allowed); ``extra`` lands in config.json."""
  return store.save(folder, model.module.family, dataclasses.asdict(model.config), model.params, dtype, extra=extra)


def load_head(folder, family: str | None = None, param_dtype: str = "float32", **config_overrides) -> bundle.Model:
  """Loads a head folder (of ``family`` when given); a missing or corrupt file, another family, or a
  name/shape mismatch raises a CheckpointError naming the file."""
  folder = pathlib.Path(folder)
  meta = store.read_meta(folder, _REGISTERED if family is None else (family,), "head" if family is None else family)
  module_cls, config_cls = _REGISTERED[meta["family"]]
  module = module_cls(store.make_config(config_cls, meta, folder, **config_overrides))
  flat = store.read_params(packed.weights_folder(folder), jnp.dtype(param_dtype))
  return bundle.from_flat(module, flat, source=str(folder / store.WEIGHTS_FILE))
