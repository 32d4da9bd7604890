"""Streamed placement: every param goes to its final device(s) as soon as it is read.

The loaders (``load_pretrained``, ``hf_import.from_hf``, ``checkpoint.load_model``,
``gguf_import.from_gguf``) take ``mesh=``. They build the model abstractly first (an ``eval_shape``
of its init: names, shapes and logical axes, no memory), take each param's ``NamedSharding`` from
:func:`specjax.sharding.param_shardings` on that abstract model (on :func:`~specjax.sharding.factored_mesh`,
as :func:`specjax.sharding.shard` does), then put every tensor there the moment it is read and cast
to the storage dtype, so its host copy is dropped before the next one is read. Host memory then
peaks near the params in their storage dtype plus the largest tensor (plus the copies the mesh
replicates, e.g. KV heads fewer than the ``model`` axis) instead of a whole host copy plus the
placed one; the result equals ``sharding.shard(load(...), mesh)``, values and shardings, and
``sharding.ensure_sharded`` sees it as already placed. ``mesh=None`` puts each tensor on the
default device, as loading always did. A scanned decoder's ``[L, ...]`` params are allocated on
their sharding and each layer written into place as it arrives. ``python -m specjax.bench
load_memory`` measures the peaks.

Tensors from safetensors files (specjax checkpoints, GGUF conversion caches, HF folders) arrive
unread, as :class:`specjax.models.lazy.Lazy` views: the HF importers' transposes and reshapes map a
slice of the result back to a slice of the file. On a mesh each one is built with
``jax.make_array_from_callback``, which asks for the slice of each device this process addresses,
and only those bytes are read (a slice shared by replicated devices once). On a mesh that spans
processes (``jax.distributed``) a process so reads only its own part of the checkpoint
(``tests/test_multihost.py`` counts the bytes). A GGUF file is dequantized a whole tensor at a time.
"""
from __future__ import annotations

import functools
import re

import jax
import jax.numpy as jnp
import numpy as np
from flax import traverse_util

from specjax import sharding
from specjax.models import bundle, lazy

# a scanned decoder's "layers/<name>" [L, ...] is stacked from the per-layer "layer_{i}/<name>" that
# checkpoints hold (store.stack_layers)
_PER_LAYER = re.compile(r"layer_(\d+)/(.+)")
_SCANNED = "layers/"


def targets(module, mesh=None, rules=None) -> dict:
  """``{'/'-joined name: (shape, NamedSharding or None)}`` of ``module``'s params, from an abstract
  init; the sharding is None without a mesh (the default device)."""
  abstract = bundle.Model(module=module, params=bundle.abstract_params(module))
  shapes = traverse_util.flatten_dict(abstract.params, sep="/")
  if mesh is None:
    return {name: (tuple(x.shape), None) for name, x in shapes.items()}
  placed = sharding.param_shardings(abstract, sharding.factored_mesh(mesh), rules)
  placed = traverse_util.flatten_dict(placed, sep="/")
  return {name: (tuple(x.shape), placed[name]) for name, x in shapes.items()}


def put(x, target: jax.sharding.NamedSharding | None):
  """``x`` on ``target`` (an array already there is kept as is); None: the default device.

  ``device_put`` copies a numpy array (a transposed view too) once; ``jnp.asarray`` held two copies.
  """
  if isinstance(x, lazy.Lazy):
    return jax.device_put(x.read()) if target is None else _put_slices(x, target)
  if target is None:
    return x if isinstance(x, jax.Array) else jax.device_put(x)
  if isinstance(x, jax.Array) and x.sharding == target:
    return x
  return sharding.put(x, target)


def _put_slices(x: lazy.Lazy, target: jax.sharding.NamedSharding):
  """``x`` on ``target``, reading only the slices this process's devices hold (each distinct slice
  once: replicated devices share the read)."""
  read: dict = {}

  def slice_for(idx):
    key = lazy.normalize(idx, x.shape)
    if key not in read:
      read[key] = x.read(key)
    return read[key]

  return jax.make_array_from_callback(x.shape, target, slice_for)


@functools.lru_cache(maxsize=64)
def _zeros_on(shape: tuple, dtype, target):
  return jax.jit(lambda: jnp.zeros(shape, dtype), out_shardings=target)


def _write_layer(big, slice_1x, layer: int, target):
  """``big[layer] = slice_1x[0]`` in place (``big`` donated): a concatenation would hold every slice
  and the result at once, and XLA:CPU concatenates bfloat16 through float32 copies."""
  return _write_layer_on(target)(big, slice_1x, np.int32(layer))


@functools.lru_cache(maxsize=64)
def _write_layer_on(target):
  return jax.jit(lambda big, x, i: jax.lax.dynamic_update_slice_in_dim(big, x, i, 0), donate_argnums=0,
                 out_shardings=target)


class PlacedParams(dict):
  """'/'-joined params whose values go to their final sharding as they are set: a loader fills it
  tensor by tensor and keeps no host copy. A name the module does not have, or a shape it does not
  expect, is kept as given, for :func:`specjax.models.store.check_params` to report by name.

  For a scanned decoder, a per-layer ``layer_{i}/<name>`` is written at once into slice i of
  ``layers/<name>`` (``[L, ...]``, allocated on its sharding when its first layer arrives; the
  ``layers`` dim is never split, so each device writes its own part): neither host nor devices
  ever hold a layer twice.
  """

  def __init__(self, module, mesh=None, rules=None):
    super().__init__()
    self.module, self.mesh, self.rules = module, mesh, rules
    self._targets = targets(module, mesh, rules)
    self._stacking: dict[str, tuple[jax.Array, set]] = {}  # scanned names still missing layers

  def __setitem__(self, name, value):
    target = self._targets.get(name)
    if target is None and self._stack_layer(name, value):
      return
    if target is not None and tuple(np.shape(value)) == target[0]:
      # wait for the copy: a queued device_put keeps its host buffer, and a queue of them is a host copy
      value = jax.block_until_ready(put(value, target[1]))
    super().__setitem__(name, value)

  def _stack_layer(self, name, value) -> bool:
    """Writes ``layer_{i}/<rest>`` into slice i of a scanned ``layers/<rest>``; False if it is not one."""
    match = _PER_LAYER.fullmatch(name)
    if not match or (_SCANNED + match.group(2)) not in self._targets:
      return False
    layer, rest = int(match.group(1)), match.group(2)
    (num_layers, *shape), target = self._targets[_SCANNED + rest]
    if tuple(np.shape(value)) != tuple(shape) or layer >= num_layers:
      return False
    big, written = self._stacking.get(rest) or (_zeros_on((num_layers, *shape), np.dtype(value.dtype), target)(), set())
    big = jax.block_until_ready(_write_layer(big, put(value[None], target), layer, target))
    written.add(layer)
    if len(written) < num_layers:
      self._stacking[rest] = (big, written)
    else:
      self._stacking.pop(rest, None)
      super().__setitem__(_SCANNED + rest, big)
    return True

  def unstacked(self) -> None:
    """Layers of a scanned name that never all arrived go back under their per-layer names, for
    :func:`specjax.models.store.check_params` to report what is missing."""
    for rest, (big, written) in self._stacking.items():
      for i in sorted(written):
        super().__setitem__(f"layer_{i}/{rest}", big[i])
    self._stacking.clear()


def place_flat(module, flat: dict, mesh=None, rules=None) -> PlacedParams:
  """Every value of ``flat`` on its final sharding for ``module`` (values already there are kept);
  pops ``flat`` as it goes, so a host copy is dropped as soon as its value is placed."""
  if isinstance(flat, PlacedParams):
    flat.unstacked()
    if (flat.module, flat.mesh, flat.rules) == (module, mesh, rules):
      return flat  # filled for this very module: every value it expects is placed already
  placed = PlacedParams(module, mesh, rules)
  for name in list(flat):
    placed[name] = flat.pop(name)
  placed.unstacked()
  return placed
