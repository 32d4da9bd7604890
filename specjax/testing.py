"""Tiny random models and drafters for tests and notebooks.

Random tiny models left at their init scale fall into repeating one token, which makes
equality tests trivial; ``weight_scale`` sharpens them into varied, non-repeating output.
"""
from __future__ import annotations

import flax
import jax
import jax.numpy as jnp

from specjax.drafters.base import Draft, Drafter
from specjax.models import bundle
from specjax.models.decoder import Decoder, DecoderConfig


def _scaled(model: bundle.Model, weight_scale: float) -> bundle.Model:
  return model.replace(params=jax.tree_util.tree_map(lambda x: x * weight_scale if x.ndim > 1 else x,
                                                     model.params))


def tiny_decoder(vocab_size: int = 64, seed: int = 0, weight_scale: float = 2.5, **overrides) -> bundle.Model:
  cfg = dict(vocab_size=vocab_size, d_model=32, num_layers=2, num_heads=4, num_kv_heads=2, head_dim=8,
             mlp_dim=64, tie_embeddings=False)
  cfg.update(overrides)
  scan = cfg.pop("scan_layers", None)  # the same weights either way: built unrolled, then stacked
  model = _scaled(bundle.init_model(Decoder(DecoderConfig(**cfg, scan_layers=False)), seed), weight_scale)
  flat = flax.traverse_util.flatten_dict(model.params, sep="/")
  return bundle.from_flat(Decoder(DecoderConfig(**cfg, scan_layers=scan)), flat)


def tiny_t5(vocab_size: int = 64, seed: int = 0, weight_scale: float = 1.0, **overrides) -> bundle.Model:
  from specjax.models.t5 import T5, T5Config  # pylint: disable=import-outside-toplevel
  cfg = dict(vocab_size=vocab_size, d_model=32, num_encoder_layers=2, num_decoder_layers=2, num_heads=4,
             head_dim=8, mlp_dim=64)
  cfg.update(overrides)
  return _scaled(bundle.init_model(T5(T5Config(**cfg)), seed), weight_scale)


def perturbed(model: bundle.Model, noise: float, seed: int = 0) -> bundle.Model:
  """The same model with relative Gaussian noise on every weight: a drafter that mostly agrees."""
  leaves, treedef = jax.tree_util.tree_flatten(model.params)
  keys = jax.random.split(jax.random.PRNGKey(seed), len(leaves))
  noisy = [x * (1 + noise * jax.random.normal(k, x.shape)) for x, k in zip(leaves, keys)]
  return model.replace(params=jax.tree_util.tree_unflatten(treedef, noisy))


@flax.struct.dataclass
class ConstantDrafter(Drafter):
  """Always proposes one token: an adversarial drafter when the target never emits it."""
  token: int = flax.struct.field(pytree_node=False, default=0)
  kind = "constant"

  def init(self, target, prompts_BxP, prompt_lengths_B, max_len, prefill=None):
    return ()

  def propose(self, state, tokens_BxS, seq_len_B, gamma, sampling, rng):
    return state, Draft(jnp.full((tokens_BxS.shape[0], gamma), self.token, jnp.int32), None)
