"""Meshes, logical-axis rules and placement: one table says where every named dim lives.

Params carry logical axis names (``layers.param_with_axes``); :func:`standard_logical_axis_rules`
maps them to two mesh axes, ``data`` (batch) and ``model`` (Megatron tensor parallelism: heads and
MLP columns split, the residual stream replicated, so each layer pays one all-reduce after the
attention output projection and one after the MLP down projection). Target and drafter go on the
same mesh under the same rules (Chen et al. 2023: a wide, shallow drafter shares the target's
topology and pays few all-reduces per step).

Head counts that do not divide the ``model`` axis (GQA/MQA: SmolLM2-135M has 3 KV heads, Gemma 3
270M one, Llama-3-70B eight on 16 chips) are laid out as vLLM and tpu-inference do. :func:`shard`
places params on :func:`factored_mesh` (the same devices, the ``model`` axis split into its prime
factors, major first), so a dim the whole axis does not divide splits over the longest major prefix
that divides it and is replicated over the rest: 8 KV heads on model=16 split 8 ways, each KV head
kept by the 2 devices whose query heads use it (K/V projections and KV cache alike), while query
heads, MLP and vocabulary split 16 ways; 4 heads on model=8 split attention 4 ways (replicated 2x)
and the MLP 8 ways; one KV head is replicated everywhere. ``layers.attend`` slices the KV heads a
device's query heads need, so no layer pays more than the two Megatron all-reduces. On a plain
mesh (``param_shardings(model, make_mesh(...))``) the fallback is all-or-nothing: a dim its axis
does not divide is replicated. :func:`layout_report` says what is split how (``shard`` logs it once
per layout); ``strict=True`` restores the old error. Only what truly cannot be laid out raises (a
batch the ``data`` axis does not divide), naming the value.

Everything is a no-op without a mesh: :func:`constrain` returns its input unless a mesh is in
context (``jax.set_mesh``, which :func:`decode_context` sets), and ``mesh=None`` leaves inputs as
they are. Meshes use ``AxisType.Auto`` (GSPMD propagation); JAX's default became ``Explicit``.
"""
from __future__ import annotations

import contextlib
import dataclasses
import functools
import logging
import math
import os
import re

import flax.linen as nn
import jax
import numpy as np
from jax.sharding import AxisType, Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from specjax.latency import prime_factors

MESH_AXES = ("data", "model")
log = logging.getLogger(__name__)

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

CACHE_AXES = ("layers", "batch", "kv_heads", "length", "kv")  # KVCache buffers [L, B, A, S, D]


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
  """``"2x4"`` (data x model; a factored mesh is shown as the mesh it was factored from)."""
  sizes = {a: mesh.shape[a] for a in mesh.axis_names if not a.startswith("model_")}
  subs = _model_subaxes(mesh)
  if subs:
    sizes["model"] = math.prod(mesh.shape[a] for a in subs)
  return "x".join(str(v) for v in sizes.values())


def _model_subaxes(mesh) -> tuple[str, ...]:
  return tuple(a for a in mesh.axis_names if a.startswith("model_"))


@functools.lru_cache(maxsize=64)
def factored_mesh(mesh):
  """The same devices in the same order, the ``model`` axis split into its prime factors
  (``model_0`` major). A dim the whole model axis does not divide can then split over a major
  prefix of it and stay replicated over the rest: 8 KV heads on model=16 split 8 ways, each KV
  head kept by the 2 devices whose query heads use it (vLLM's and tpu-inference's GQA layout);
  4 heads on model=8 split 4 ways. Meshes without a ``model`` axis wider than a prime come back as is.
  """
  names = tuple(mesh.axis_names)
  if "model" not in names or len(prime_factors(mesh.shape["model"])) < 2:
    return mesh
  factors = prime_factors(mesh.shape["model"])  # ascending: more prefixes to choose from (16 -> 2, 4, 8, 16)
  new_names, sizes = [], []
  for a in names:
    if a == "model":
      new_names += [f"model_{i}" for i in range(len(factors))]
      sizes += factors
    else:
      new_names.append(a)
      sizes.append(mesh.shape[a])
  if isinstance(mesh, Mesh):
    return Mesh(np.asarray(mesh.devices).reshape(sizes), tuple(new_names),
                axis_types=(AxisType.Auto,) * len(new_names))
  return jax.sharding.AbstractMesh(tuple(sizes), tuple(new_names))


# ----------------------------------------------------------------------------- logical -> mesh
def logical_to_spec(logical_axes, mesh=None, rules=None, shape=None) -> P:
  """A PartitionSpec over mesh axes; axes the mesh lacks, or unknown names, are replicated.

  With ``shape`` (and a mesh), a dim whose size its mesh axis does not divide is replicated too
  (the GQA/MQA fallback, see the module doc); on a :func:`factored_mesh` it splits over the
  longest major prefix of the model sub-axes whose size divides it instead.
  """
  table = dict(_rules(rules))
  names = set(mesh.axis_names) if mesh is not None else None
  subs = _model_subaxes(mesh) if mesh is not None else ()
  out = []
  for i, name in enumerate(logical_axes):
    axis = table.get(name)
    if axis == "model" and subs and "model" not in names:
      keep, prod = [], 1
      for a in subs:
        if shape is not None and shape[i] % (prod * mesh.shape[a]):
          break
        keep.append(a)
        prod *= mesh.shape[a]
      out.append(None if not keep else keep[0] if len(keep) == 1 else tuple(keep))
      continue
    if axis is not None and names is not None and axis not in names:
      axis = None
    if axis is not None and shape is not None and mesh is not None and shape[i] % mesh.shape[axis]:
      axis = None
    out.append(axis)
  return P(*out)


def _axis_size(mesh, axis) -> int:
  return math.prod(mesh.shape[a] for a in ((axis,) if isinstance(axis, str) else axis))


def _check_divisible(what: str, shape, logical_axes, mesh, rules) -> None:
  spec = logical_to_spec(logical_axes, mesh, rules)
  for size, name, axis in zip(shape, logical_axes, spec):
    if axis is not None and size % _axis_size(mesh, axis):
      field = _CONFIG_FIELD.get(name, name)
      axis_size = _axis_size(mesh, axis)
      axis = axis if isinstance(axis, str) else "model"
      raise ValueError(f"{field}={size} is not divisible by mesh axis {axis}={axis_size} "
                       f"({what}, logical axis '{name}'); pick a mesh whose '{axis}' size divides it")


def logical_axes(model):
  """``bundle.logical_axes``, also for heads whose module has its own ``dummy_inputs`` (MTP, DFlash)."""
  from specjax.models import bundle  # pylint: disable=import-outside-toplevel
  module = model.module
  if not hasattr(module, "dummy_inputs"):
    return bundle.logical_axes(model)
  args, kwargs = module.dummy_inputs()
  abstract = jax.eval_shape(lambda: module.init(jax.random.PRNGKey(0), *args, **kwargs))
  return nn.get_partition_spec(abstract)["params"]


def _param_specs(model, mesh, rules):
  """``[(path, logical axes, shape)]`` of every param, in ``tree_leaves`` order."""
  axes = logical_axes(model)
  specs = jax.tree_util.tree_flatten_with_path(axes, is_leaf=_is_spec)[0]
  params = jax.tree_util.tree_leaves(model.params)
  assert len(specs) == len(params), (len(specs), len(params))
  return axes, [(jax.tree_util.keystr(path, simple=True, separator="/"), tuple(spec), tuple(param.shape))
                for (path, spec), param in zip(specs, params)]  # both dicts: the same (sorted) order


def param_shardings(model, mesh: Mesh, rules=None, check: bool = True, strict: bool = False):
  """NamedShardings (a pytree like ``model.params``) placing each param by its logical axes.

  A dim its mesh axis does not divide is replicated on that axis (see :func:`layout_report`);
  ``strict=True`` raises instead, naming the config value.
  """
  axes, entries = _param_specs(model, mesh, rules)
  if strict:
    for path, spec, shape in entries:
      _check_divisible("param " + path, shape, spec, mesh, rules)
  flat = [NamedSharding(mesh, logical_to_spec(spec, mesh, rules, shape)) for _, spec, shape in entries]
  if check:
    _log_layout(model, mesh, rules)
  return jax.tree_util.tree_unflatten(jax.tree_util.tree_structure(axes, is_leaf=_is_spec), flat)


def layout_report(model, mesh: Mesh, rules=None, factored: bool = True) -> dict:
  """What the mesh cannot split fully, per logical axis: ``{name: {"size", "mesh_axis", "axis_size",
  "split", "field", "params", "note"}}`` (empty when every named dim splits). ``split`` is how many
  ways the dim is split (1: replicated). ``factored``: the layout :func:`shard` uses (on
  :func:`factored_mesh`); False: the plain mesh's all-or-nothing fallback."""
  mesh = factored_mesh(mesh) if factored else mesh
  _, entries = _param_specs(model, mesh, rules)
  table = dict(_rules(rules))
  out = {}
  for path, spec, shape in entries:
    placed = logical_to_spec(spec, mesh, rules, shape)
    for size, name, axis in zip(shape, spec, placed):
      want = table.get(name)
      if want is None or (want not in mesh.axis_names and not (want == "model" and _model_subaxes(mesh))):
        continue
      full = _axis_size(mesh, want if want in mesh.axis_names else _model_subaxes(mesh))
      split = 1 if axis is None else _axis_size(mesh, axis)
      if split == full:
        continue
      entry = out.setdefault(name, dict(size=int(size), mesh_axis=want, axis_size=int(full), split=int(split),
                                        field=_CONFIG_FIELD.get(name, name), params=[]))
      entry["params"].append(path)
  for name, e in out.items():
    e["note"] = _replication_note(name, e, out)
  return out


def _replication_note(name, e, report) -> str:
  head = f"{e['field']}={e['size']} does not divide {e['mesh_axis']}={e['axis_size']}"
  split, rep = e["split"], e["axis_size"] // e["split"]
  if name == "kv_heads" and "heads" in report and report["heads"]["split"] == split:
    return head + f": K/V follow the query heads (split {split} ways)" if split > 1 else \
        head + ": replicated with the query heads"
  if name == "kv_heads":
    if split > 1:
      return (head + f": K/V projections and the KV cache split {split} ways, each KV head kept by the {rep} "
              "devices whose query heads use it; query heads and MLP still split")
    keeps = "the one KV head" if e["size"] == 1 else f"all {e['size']} KV heads"
    return head + f": K/V projections and the KV cache replicated (each device keeps {keeps}); query heads and MLP still split"
  what = {"heads": "attention (q, o)", "mlp": "MLP weights", "vocab": "embedding / LM head"}.get(
      name, f"{len(e['params'])} params")
  tail = "; the MLP and the vocabulary still split" if name == "heads" else ""
  if split > 1:
    return head + f": {what} split {split} ways, replicated {rep}x" + tail
  return head + f": {what} replicated" + tail


_LOGGED: set = set()


def _log_layout(model, mesh, rules) -> None:
  try:
    report = layout_report(model, mesh, rules, factored=False)  # the mesh as given is the layout used
  except Exception:  # pylint: disable=broad-except  # a report must never break placement
    return
  if not report:
    return
  key = (type(model.module).__name__, tuple(e["note"] for e in report.values()), tuple(mesh.shape.items()))
  if key in _LOGGED:
    return
  _LOGGED.add(key)
  log.warning("sharding %s on mesh %s: %s", type(model.module).__name__, mesh_shape_str(mesh),
              "; ".join(e["note"] for e in report.values()))


def format_layout_report(report: dict) -> str:
  if not report:
    return "every named dim splits on the mesh"
  return "\n".join(f"{name}: {e['note']} ({len(e['params'])} params)" for name, e in report.items())


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


# drafter fields that are arrays tied to a target weight: their logical axes (others are replicated)
def shard(model_or_drafter, mesh: Mesh, rules=None):
  """Places a model's params on ``mesh`` by the rules; a drafter has every ``Model`` it holds placed
  (``DraftModel.model``, ``MTP``/``DFlash`` ``.head``) and its other arrays (Medusa's heads and
  ``lm_head_ExV``) put on the mesh: replicated, or by the drafter's declared ``array_axes``.

  Drafters without weights (``NGram``) come back unchanged.
  """
  from specjax.models.bundle import Model  # pylint: disable=import-outside-toplevel
  obj = model_or_drafter
  mesh = factored_mesh(mesh)
  if isinstance(obj, Model):
    return obj.replace(params=jax.tree_util.tree_map(put, obj.params, param_shardings(obj, mesh, rules)))
  if not dataclasses.is_dataclass(obj):
    return obj
  changes = {}
  for f in dataclasses.fields(obj):
    if f.metadata.get("pytree_node", True) is False:
      continue
    value = getattr(obj, f.name)
    if isinstance(value, Model):
      changes[f.name] = shard(value, mesh, rules)
    elif jax.tree_util.tree_leaves(value) and all(isinstance(x, (jax.Array, np.ndarray))
                                                  for x in jax.tree_util.tree_leaves(value)):
      axes = type(obj).array_axes.get(f.name) if hasattr(type(obj), "array_axes") else None
      changes[f.name] = jax.tree_util.tree_map(
          lambda x, axes=axes: put(x, NamedSharding(mesh, logical_to_spec(axes, mesh, rules, x.shape))
                                   if axes is not None and len(axes) == np.ndim(x) else replicated(mesh)), value)
  return obj.replace(**changes) if changes else obj


def _on_mesh(model_or_drafter, mesh) -> bool:
  leaves = [x for x in jax.tree_util.tree_leaves(model_or_drafter) if isinstance(x, jax.Array)]
  return all(isinstance(x.sharding, NamedSharding) and x.sharding.mesh == mesh for x in leaves)


def ensure_sharded(model_or_drafter, mesh, rules=None):
  """``shard`` unless already on ``mesh`` (so ``generate(..., mesh=)`` accepts unplaced models)."""
  if mesh is None or _on_mesh(model_or_drafter, factored_mesh(mesh)):
    return model_or_drafter
  return shard(model_or_drafter, mesh, rules)


# ----------------------------------------------------------------------------- activations, state
def constrain(x, logical_axes, rules=None):
  """``with_sharding_constraint`` by logical names; a no-op unless a mesh is in context."""
  mesh = jax.sharding.get_abstract_mesh()
  if mesh.empty:
    return x
  return jax.lax.with_sharding_constraint(x, logical_to_spec(logical_axes, mesh, rules, np.shape(x)))


def batch_sharding(mesh: Mesh, ndim: int) -> NamedSharding:
  """Leading batch dim over ``data``, the rest replicated (prompts, lengths, loop rows)."""
  return NamedSharding(mesh, logical_to_spec(("batch",) + ("length",) * (ndim - 1), mesh))


def replicated(mesh: Mesh) -> NamedSharding:
  return NamedSharding(mesh, P())


def cache_sharding(mesh: Mesh, rules=None, num_kv_heads: int | None = None, shape=None) -> NamedSharding:
  """KV cache ``[layers, batch, kv_heads, len, head_dim]`` -> ``(None, 'data', 'model', None, None)``.

  ``num_kv_heads`` (or the buffer's full ``shape``) applies the GQA/MQA rule: KV heads the
  ``model`` axis does not divide are replicated on it. A batch the ``data`` axis does not divide
  is an error (see :func:`check_batch`).
  """
  if shape is None and num_kv_heads is not None:
    shape = (1, 0, int(num_kv_heads), 1, 1)  # only the kv_heads dim decides; batch is checked elsewhere
  if shape is not None:
    check_batch(int(shape[1]), mesh)
    shape = tuple(shape[:1]) + (0,) + tuple(shape[2:])  # batch: never silently replicated
  return NamedSharding(mesh, logical_to_spec(CACHE_AXES, mesh, rules, shape))


def check_batch(batch: int, mesh: Mesh) -> None:
  if "data" in mesh.axis_names and batch % mesh.shape["data"]:
    raise ValueError(f"batch={batch} is not divisible by mesh axis data={mesh.shape['data']}; pad the "
                     "batch or use a smaller data axis")


def place_inputs(mesh: Mesh | None, prompts_BxP, lengths_B, rng):
  """Prompts and lengths split over ``data``; the rng replicated (every device draws the same bits)."""
  if mesh is None:
    return prompts_BxP, lengths_B, rng
  check_batch(prompts_BxP.shape[0], mesh)
  mesh = factored_mesh(mesh)
  return (put(prompts_BxP, batch_sharding(mesh, 2)), put(lengths_B, batch_sharding(mesh, 1)),
          put(rng, replicated(mesh)))


@contextlib.contextmanager
def decode_context(mesh: Mesh | None):
  """Runs jitted code with ``mesh`` in context (so :func:`constrain` is live); no-op for None."""
  if mesh is None:
    yield
    return
  with jax.set_mesh(factored_mesh(mesh)):  # the mesh shard() and place_inputs() use
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
