"""A model is a bundle (module, config, params): one pytree, params as a plain nested dict."""
from __future__ import annotations

import dataclasses
from typing import Any

import flax
import flax.linen as nn
import jax
import jax.numpy as jnp
from flax import traverse_util

from specjax.models import store


@flax.struct.dataclass
class Model:
  module: nn.Module = flax.struct.field(pytree_node=False)
  params: Any

  @property
  def config(self):
    return self.module.cfg

  @property
  def vocab_size(self) -> int:
    return self.module.cfg.vocab_size

  @property
  def is_encoder_decoder(self) -> bool:
    return getattr(self.module, "is_encoder_decoder", False)

  @property
  def num_params(self) -> int:
    return sum(x.size for x in jax.tree_util.tree_leaves(self.params))

  def cast(self, dtype) -> "Model":
    return self.replace(params=jax.tree_util.tree_map(lambda x: x.astype(dtype), self.params))


def _dummy_inputs(module):
  if hasattr(module, "dummy_inputs"):  # heads read hidden states, not token ids
    return module.dummy_inputs()
  if getattr(module, "is_encoder_decoder", False):
    return (jnp.zeros((1, 2), jnp.int32),), {"encoder_tokens": jnp.zeros((1, 2), jnp.int32)}
  return (jnp.zeros((1, 2), jnp.int32),), {}


def init_model(module: nn.Module, seed: int = 0) -> Model:
  args, kwargs = _dummy_inputs(module)
  variables = module.init(jax.random.PRNGKey(seed), *args, **kwargs)
  return Model(module=module, params=nn.unbox(variables["params"]))


def abstract_params(module: nn.Module) -> Any:
  """``module``'s params as ``ShapeDtypeStruct`` leaves, from an abstract init (no memory, no compute)."""
  args, kwargs = _dummy_inputs(module)
  return nn.unbox(jax.eval_shape(lambda: module.init(jax.random.PRNGKey(0), *args, **kwargs))["params"])


def from_flat(module: nn.Module, flat: dict, source: str = "<params>") -> Model:
  """A bundle from '/'-joined params, their names and shapes checked against ``module``'s abstract init
  (:func:`specjax.models.store.check_params`); empties ``flat`` as it moves arrays to the device.
  Arrays a loader already placed (:class:`specjax.placement.PlacedParams`) stay where they are."""
  args, kwargs = _dummy_inputs(module)
  cfg = getattr(module, "cfg", None)
  if getattr(cfg, "scanned", False):
    flat = store.stack_layers(flat, cfg.num_layers)
  store.check_params(store.expected_shapes(module, *args, **kwargs), flat, source)
  return Model(module=module, params=store.unflatten(flat))


def with_scan_layers(model: Model, scan: bool = True) -> Model:
  """The same decoder with its layers scanned (params stacked ``[L, ...]``) or unrolled."""
  cfg = model.module.cfg
  if cfg.scanned == scan:
    return model
  flat = store.unstack_layers(traverse_util.flatten_dict(jax.device_get(model.params), sep="/"))
  return from_flat(type(model.module)(dataclasses.replace(cfg, scan_layers=scan)), flat)


def logical_axes(model_or_module) -> Any:
  """Pytree (like params) of PartitionSpecs over logical axis names; computed abstractly."""
  module = getattr(model_or_module, "module", model_or_module)
  args, kwargs = _dummy_inputs(module)
  abstract = jax.eval_shape(lambda: module.init(jax.random.PRNGKey(0), *args, **kwargs))
  return nn.get_partition_spec(abstract)["params"]
