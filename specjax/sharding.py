"""Meshes, logical-axis rules and placement: one table says where every named dim lives.

Params carry logical axis names (``layers.param_with_axes``); :func:`standard_logical_axis_rules`
maps them to two mesh axes, ``data`` (batch) and ``model`` (Megatron tensor parallelism: heads and
MLP columns split, the residual stream replicated, so each layer pays one all-reduce after the
attention output projection and one after the MLP down projection). Target and drafter go on the
same mesh under the same rules (Chen et al. 2023: a wide, shallow drafter shares the target's
topology and pays few all-reduces per step).

Everything is a no-op without a mesh: :func:`constrain` returns its input unless a mesh is in
context (``jax.set_mesh``, which :func:`decode_context` sets), and ``mesh=None`` leaves inputs as
they are. Meshes use ``AxisType.Auto`` (GSPMD propagation); JAX's default became ``Explicit``.
"""
from __future__ import annotations

import contextlib
import math
import os
import re

import flax.linen as nn
import jax
import numpy as np
from jax.sharding import AxisType, Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

MESH_AXES = ("data", "model")

# logical name -> mesh axis (None: replicated)
_RULES = (
    ("batch", "data"),
    ("heads", "model"),
    ("kv_heads", "model"),
    ("mlp", "model"),
    ("vocab", "model"),
    ("embed", None),
    ("kv", None),
    ("length", None),
    ("layers", None),
    ("relpos_buckets", None),
)

# logical name -> the config field an error message should name
_CONFIG_FIELD = {"heads": "num_heads", "kv_heads": "num_kv_heads", "mlp": "mlp_dim", "vocab": "vocab_size",
                 "embed": "d_model", "kv": "head_dim", "batch": "batch"}

CACHE_AXES = ("layers", "batch", "length", "kv_heads", "kv")  # KVCache buffers [L, B, S, K, D]


def standard_logical_axis_rules() -> tuple[tuple[str, str | None], ...]:
  return _RULES


def _rules(rules):
  if rules is not None:
    return tuple(rules)
  return tuple(nn.get_logical_axis_rules()) or _RULES  # a flax ``logical_axis_rules`` context wins


# ----------------------------------------------------------------------------- meshes
def parse_mesh_shape(shape) -> dict[str, int]:
  """``{"data": 2, "model": 4}``, ``"2x4"`` (data x model) or ``(2, 4)`` -> an ordered dict."""
  if isinstance(shape, dict):
    out = {str(k): int(v) for k, v in shape.items()}
  else:
    if isinstance(shape, str):
      if not re.fullmatch(r"\s*\d+\s*(x\s*\d+\s*)*", shape):
        raise ValueError(f"mesh string {shape!r} must look like '2x4' (data x model)")
      shape = [int(s) for s in shape.split("x")]
    shape = tuple(int(s) for s in shape)
    if len(shape) > len(MESH_AXES):
      raise ValueError(f"mesh {shape} has more axes than the named ones {MESH_AXES}; pass a dict")
    out = dict(zip(MESH_AXES, shape))
  if not out or any(v < 1 for v in out.values()):
    raise ValueError(f"mesh axis sizes must be positive, got {out}")
  return out


def make_mesh(shape, devices=None) -> Mesh:
  """A ``Mesh`` with named axes (default ``data``, ``model``) over the first prod(shape) devices."""
  axes = parse_mesh_shape(shape)
  devices = list(jax.devices() if devices is None else devices)
  need = math.prod(axes.values())
  if need > len(devices):
    raise ValueError(
        f"mesh {axes} needs {need} devices but only {len(devices)} are present "
        f"({jax.default_backend()}); on CPU set XLA_FLAGS=--xla_force_host_platform_device_count={need} "
        "before jax is imported")
  return jax.make_mesh(tuple(axes.values()), tuple(axes), axis_types=(AxisType.Auto,) * len(axes),
                       devices=devices[:need])


def mesh_shape_str(mesh: Mesh) -> str:
  return "x".join(str(mesh.shape[a]) for a in mesh.axis_names)


# ----------------------------------------------------------------------------- logical -> mesh
def logical_to_spec(logical_axes, mesh=None, rules=None) -> P:
  """A PartitionSpec over mesh axes; axes the mesh lacks, or unknown names, are replicated."""
  table = dict(_rules(rules))
  names = set(mesh.axis_names) if mesh is not None else None
  out = []
  for name in logical_axes:
    axis = table.get(name)
    out.append(axis if axis is not None and (names is None or axis in names) else None)
  return P(*out)


def _check_divisible(what: str, shape, logical_axes, mesh, rules) -> None:
  spec = logical_to_spec(logical_axes, mesh, rules)
  for size, name, axis in zip(shape, logical_axes, spec):
    if axis is not None and size % mesh.shape[axis]:
      field = _CONFIG_FIELD.get(name, name)
      raise ValueError(f"{field}={size} is not divisible by mesh axis {axis}={mesh.shape[axis]} "
                       f"({what}, logical axis '{name}'); pick a mesh whose '{axis}' size divides it")


def param_shardings(model, mesh: Mesh, rules=None, check: bool = True):
  """NamedShardings (a pytree like ``model.params``) placing each param by its logical axes."""
  from specjax.models import bundle  # pylint: disable=import-outside-toplevel
  axes = bundle.logical_axes(model)
  if check:
    specs = jax.tree_util.tree_flatten_with_path(axes, is_leaf=_is_spec)[0]
    params = jax.tree_util.tree_leaves(model.params)
    assert len(specs) == len(params), (len(specs), len(params))
    for (path, spec), param in zip(specs, params):  # both dicts: the same (sorted) order
      _check_divisible("param " + jax.tree_util.keystr(path, simple=True, separator="/"), tuple(param.shape),
                       tuple(spec), mesh, rules)
  return jax.tree_util.tree_map(lambda spec: NamedSharding(mesh, logical_to_spec(tuple(spec), mesh, rules)),
                                axes, is_leaf=_is_spec)


def _is_spec(x):
  return isinstance(x, P)


def put(x, sharding_: NamedSharding):
  """``device_put`` that also works when the mesh spans processes (every process passes the same
  full value; each keeps only its own devices' shards)."""
  if sharding_.is_fully_addressable:
    return jax.device_put(x, sharding_)
  host = np.asarray(x)
  return jax.make_array_from_callback(host.shape, sharding_, lambda idx: host[idx])


def to_host(x) -> np.ndarray:
  """The full value as numpy, gathering from other processes when the array spans them."""
  if isinstance(x, jax.Array) and not x.is_fully_addressable and not x.is_fully_replicated:
    from jax.experimental import multihost_utils  # pylint: disable=import-outside-toplevel
    return np.asarray(multihost_utils.process_allgather(x, tiled=True))
  return np.asarray(x)


def shard(model_or_drafter, mesh: Mesh, rules=None):
  """Places a model's params on ``mesh`` by the rules; a ``DraftModel`` has its model placed.

  Drafters without weights (``NGram``) come back unchanged.
  """
  from specjax.models.bundle import Model  # pylint: disable=import-outside-toplevel
  obj = model_or_drafter
  if isinstance(obj, Model):
    return obj.replace(params=jax.tree_util.tree_map(put, obj.params, param_shardings(obj, mesh, rules)))
  if isinstance(getattr(obj, "model", None), Model):
    return obj.replace(model=shard(obj.model, mesh, rules))
  return obj


def _on_mesh(model_or_drafter, mesh) -> bool:
  from specjax.models.bundle import Model  # pylint: disable=import-outside-toplevel
  model = model_or_drafter if isinstance(model_or_drafter, Model) else getattr(model_or_drafter, "model", None)
  if not isinstance(model, Model):
    return True
  leaves = jax.tree_util.tree_leaves(model.params)
  return all(isinstance(getattr(x, "sharding", None), NamedSharding) and x.sharding.mesh == mesh for x in leaves)


def ensure_sharded(model_or_drafter, mesh, rules=None):
  """``shard`` unless already on ``mesh`` (so ``generate(..., mesh=)`` accepts unplaced models)."""
  if mesh is None or _on_mesh(model_or_drafter, mesh):
    return model_or_drafter
  return shard(model_or_drafter, mesh, rules)


# ----------------------------------------------------------------------------- activations, state
def constrain(x, logical_axes, rules=None):
  """``with_sharding_constraint`` by logical names; a no-op unless a mesh is in context."""
  mesh = jax.sharding.get_abstract_mesh()
  if mesh.empty:
    return x
  return jax.lax.with_sharding_constraint(x, logical_to_spec(logical_axes, mesh, rules))


def batch_sharding(mesh: Mesh, ndim: int) -> NamedSharding:
  """Leading batch dim over ``data``, the rest replicated (prompts, lengths, loop rows)."""
  return NamedSharding(mesh, logical_to_spec(("batch",) + ("length",) * (ndim - 1), mesh))


def replicated(mesh: Mesh) -> NamedSharding:
  return NamedSharding(mesh, P())


def cache_sharding(mesh: Mesh, rules=None) -> NamedSharding:
  """KV cache ``[layers, batch, len, kv_heads, head_dim]`` -> ``(None, 'data', None, 'model', None)``."""
  return NamedSharding(mesh, logical_to_spec(CACHE_AXES, mesh, rules))


def check_batch(batch: int, mesh: Mesh) -> None:
  if "data" in mesh.axis_names and batch % mesh.shape["data"]:
    raise ValueError(f"batch={batch} is not divisible by mesh axis data={mesh.shape['data']}; pad the "
                     "batch or use a smaller data axis")


def place_inputs(mesh: Mesh | None, prompts_BxP, lengths_B, rng):
  """Prompts and lengths split over ``data``; the rng replicated (every device draws the same bits)."""
  if mesh is None:
    return prompts_BxP, lengths_B, rng
  check_batch(prompts_BxP.shape[0], mesh)
  return (put(prompts_BxP, batch_sharding(mesh, 2)), put(lengths_B, batch_sharding(mesh, 1)),
          put(rng, replicated(mesh)))


@contextlib.contextmanager
def decode_context(mesh: Mesh | None):
  """Runs jitted code with ``mesh`` in context (so :func:`constrain` is live); no-op for None."""
  if mesh is None:
    yield
    return
  with jax.set_mesh(mesh):
    yield


def prepare(mesh, target, drafter, prompts_BxP, lengths_B, rng):
  """Everything ``generate``/``speculative_generate`` need for ``mesh=``: placed weights and inputs."""
  if mesh is None:
    return target, drafter, prompts_BxP, lengths_B, rng
  check_batch(prompts_BxP.shape[0], mesh)  # before moving any weights
  target, drafter = ensure_sharded(target, mesh), ensure_sharded(drafter, mesh)
  return (target, drafter) + place_inputs(mesh, prompts_BxP, lengths_B, rng)


# ----------------------------------------------------------------------------- multi-host
def initialize_distributed(coordinator_address: str | None = None, num_processes: int | None = None,
                           process_id: int | None = None, local_device_count: int | None = None) -> None:
  """``jax.distributed.initialize`` (all None: auto-detected on TPU pods / SLURM).

  ``local_device_count`` fakes that many CPU devices in this process (tests, laptops); it must be
  called before any jax computation.
  """
  if local_device_count is not None:
    jax.config.update("jax_num_cpu_devices", int(local_device_count))
  kwargs = {k: v for k, v in dict(coordinator_address=coordinator_address, num_processes=num_processes,
                                  process_id=process_id).items() if v is not None}
  jax.distributed.initialize(**kwargs)


def force_cpu_devices_env(n: int, env=None) -> dict:
  """A copy of ``env`` whose XLA_FLAGS fake ``n`` CPU devices (for subprocesses)."""
  env = dict(os.environ if env is None else env)
  flags = re.sub(r"--xla_force_host_platform_device_count=\d+", "", env.get("XLA_FLAGS", ""))
  env["XLA_FLAGS"] = f"{flags} --xla_force_host_platform_device_count={n}".strip()
  env.setdefault("JAX_PLATFORMS", "cpu")
  return env
