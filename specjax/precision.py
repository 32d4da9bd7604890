"""Storage precision of params: one rule for every loader, by platform unless chosen.

A model's params are held in a *storage* dtype and cast to the config's *compute* dtype
(``cfg.dtype``) where they are used; norms' scales and biases (1-D leaves) always stay float32, and
norms, softmax, logits and the accept rule compute in float32 whatever the storage.

``"auto"`` is float32 on CPU and bfloat16 on accelerators: the CPU's float32 kernels are its fast
path, so bfloat16 there only saves memory (``python -m specjax.bench precision`` times float32,
bfloat16 params cast to float32 each step, and bfloat16 throughout). (Those casts are
made layer by layer at each decode step, none kept for the whole loop: :func:`jit_for_weights`.)
"""
from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

DTYPES = ("auto", "float32", "bfloat16")


def resolve(name: str | None) -> str:
  """``"float32"`` or ``"bfloat16"`` for a dtype name (``"auto"``/None: by platform); ValueError naming it."""
  name = "auto" if name in (None, "") else str(name)
  if name not in DTYPES:
    raise ValueError(f"param_dtype={name!r}; expected one of {', '.join(DTYPES)}")
  if name == "auto":
    return "float32" if jax.default_backend() == "cpu" else "bfloat16"
  return name


def storage_dtype(name: str | None):
  return jnp.dtype(resolve(name))


def cast_leaf(x, dtype):
  """A float leaf with 2+ dims in ``dtype``; 1-D leaves (norm scales, biases) in float32."""
  if not jnp.issubdtype(x.dtype, jnp.floating):
    return x
  want = dtype if np.ndim(x) >= 2 else jnp.float32
  return x if x.dtype == want else x.astype(want)


def cast_params(params, name: str | None):
  """``params`` with every weight matrix stored in ``name``'s dtype (see :func:`cast_leaf`)."""
  dtype = storage_dtype(name)
  return jax.tree_util.tree_map(lambda x: cast_leaf(x, dtype), params)


def params_nbytes(params) -> int:
  return sum(x.size * x.dtype.itemsize for x in jax.tree_util.tree_leaves(params))


# XLA:CPU computes a bfloat16 weight's matmul through a float32 cast of it; while-loop invariant
# code motion hoists those casts out of the decode loop, so every weight stayed resident a second
# time in float32 (3x the bfloat16 checkpoint). With the casts tied to each layer's input
# (models.layers.compute_weight) and this pass off, each cast lives only for its layer.
NARROW_CPU_COMPILER_OPTIONS = {"xla_disable_hlo_passes": "while-loop-invariant-code-motion"}


def has_narrow_weights(*trees) -> bool:
  """Whether any weight matrix in ``trees`` is stored narrower than float32."""
  return any(jnp.issubdtype(x.dtype, jnp.floating) and x.dtype.itemsize < 4 and np.ndim(x) >= 2
             for x in jax.tree_util.tree_leaves(trees))


def jit_for_weights(jitted, static_argnames: tuple, *trees):
  """``jitted``, or where ``trees`` hold narrow weights on CPU its twin compiled with
  :data:`NARROW_CPU_COMPILER_OPTIONS` (float32 weights keep the program they always had)."""
  if jax.default_backend() != "cpu" or not has_narrow_weights(*trees):
    return jitted
  return _narrow_cpu_twin(jitted, tuple(static_argnames))


@functools.lru_cache(maxsize=None)
def _narrow_cpu_twin(jitted, static_argnames: tuple):
  return jax.jit(jitted.__wrapped__, static_argnames=static_argnames, compiler_options=NARROW_CPU_COMPILER_OPTIONS)
