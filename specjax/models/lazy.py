"""Tensors not read yet: a shape, a dtype and a reader of rectangular slices.

A loader hands :class:`Lazy` tensors to :class:`specjax.placement.PlacedParams`, which reads each
one whole for a single device, or only the slices its own devices hold on a mesh
(``jax.make_array_from_callback`` asks for one slice per addressable device). On a mesh that spans
processes a process then reads only the bytes of its own shards from the file.

The HF importers turn a tensor into its specjax layout with ``.T``, ``.reshape`` (splitting dims)
and a scalar ``*``; on a Lazy these build views that map a slice of the result back to a slice of
the file, so the layout change costs nothing until the slice is read. Anything else
(``np.asarray(x)``, ``np.array_equal``) reads the whole tensor.
"""
from __future__ import annotations

import math
from typing import Callable

import numpy as np

Index = tuple  # one (start, stop) per dim, step 1


def normalize(idx, shape) -> Index:
  """``idx`` (a tuple of slices / ints / Ellipsis as jax or numpy give it, or None for all) as one
  ``(start, stop)`` per dim."""
  if idx is None:
    return tuple((0, n) for n in shape)
  idx = idx if isinstance(idx, tuple) else (idx,)
  if any(i is Ellipsis for i in idx):
    at = idx.index(Ellipsis)
    idx = idx[:at] + (slice(None),) * (len(shape) - len(idx) + 1) + idx[at + 1:]
  idx = idx + (slice(None),) * (len(shape) - len(idx))
  out = []
  for i, n in zip(idx, shape):
    if isinstance(i, tuple):  # already (start, stop)
      out.append((int(i[0]), int(i[1])))
    elif isinstance(i, slice):
      start, stop, step = i.indices(n)
      if step != 1:
        raise ValueError(f"a lazy tensor reads slices of step 1, got {i}")
      out.append((start, max(start, stop)))
    else:
      i = int(i) + (n if int(i) < 0 else 0)
      out.append((i, i + 1))
  return tuple(out)


class Lazy:
  """A tensor of ``shape`` and ``dtype`` whose slices ``read_fn(index) -> np.ndarray`` reads."""

  def __init__(self, shape, dtype, read_fn: Callable[[Index], np.ndarray]):
    self.shape, self.dtype, self._read_fn = tuple(int(n) for n in shape), np.dtype(dtype), read_fn

  ndim = property(lambda self: len(self.shape))
  size = property(lambda self: math.prod(self.shape))
  nbytes = property(lambda self: self.size * self.dtype.itemsize)

  def read(self, idx=None) -> np.ndarray:
    """The slice ``idx`` (all of it when None) as a numpy array."""
    index = normalize(idx, self.shape)
    out = self._read_fn(index)
    want = tuple(b - a for a, b in index)
    assert out.shape == want and out.dtype == self.dtype, (out.shape, want, out.dtype, self.dtype)
    return out

  def __array__(self, dtype=None, copy=None):
    x = self.read()
    return x if dtype is None else x.astype(dtype)

  def __repr__(self):
    return f"Lazy({self.shape}, {self.dtype})"

  # ---------------------------------------------------------------- views
  def transpose(self, *perm) -> "Lazy":
    perm = tuple(perm[0]) if len(perm) == 1 and isinstance(perm[0], (tuple, list)) else perm
    perm = perm or tuple(reversed(range(self.ndim)))
    inverse = np.argsort(perm)

    def read(index):
      return self._read_fn(tuple(index[inverse[j]] for j in range(self.ndim))).transpose(perm)

    return Lazy(tuple(self.shape[p] for p in perm), self.dtype, read)

  T = property(transpose)

  def reshape(self, *shape) -> "Lazy":
    shape = tuple(shape[0]) if len(shape) == 1 and isinstance(shape[0], (tuple, list)) else shape
    if -1 in shape:
      known = math.prod(n for n in shape if n != -1)
      shape = tuple(self.size // known if n == -1 else n for n in shape)
    if math.prod(shape) != self.size:
      raise ValueError(f"cannot reshape {self.shape} to {shape}")
    groups = _split_groups(self.shape, shape)
    if groups is None:  # not a split of dims: read it all, then reshape
      return Lazy(shape, self.dtype, lambda index: np.asarray(self).reshape(shape)[tuple(slice(*i) for i in index)])

    def read(index):
      base, inner = [], []
      for group in groups:
        if not group:  # a size-1 base dim with no view dim of its own
          base.append((0, 1))
          continue
        a, b = index[group[0]]
        below = math.prod(shape[g] for g in group[1:])
        base.append((a * below, b * below))
        inner.append(((b - a),) + tuple(shape[g] for g in group[1:]))
      x = self._read_fn(tuple(base))
      x = x.reshape(tuple(n for part in inner for n in part))  # each base dim split into its group
      pick = tuple(slice(None) if j == 0 else slice(*index[g]) for group in groups if group
                   for j, g in enumerate(group))
      return x[pick].reshape(tuple(b - a for a, b in index))

    return Lazy(shape, self.dtype, read)

  def __getitem__(self, key):
    """Only ``x[None]``: a leading dim of 1 (the stacked-layer writes)."""
    if key is None:
      return self.reshape((1,) + self.shape)
    raise TypeError(f"a lazy tensor is sliced by read(idx), not x[{key!r}]")

  def astype(self, dtype) -> "Lazy":
    dtype = np.dtype(dtype)
    if dtype == self.dtype:
      return self
    # bfloat16 <-> float16 through float32, as numpy casts them
    return Lazy(self.shape, dtype, lambda index: self._read_fn(index).astype(np.float32).astype(dtype))

  def __mul__(self, factor):
    if not np.isscalar(factor):
      return NotImplemented
    return Lazy(self.shape, self.dtype, lambda index: (self._read_fn(index) * factor).astype(self.dtype))

  __rmul__ = __mul__


def _split_groups(base, view):
  """For each base dim, the view dims it splits into (consecutive, product equal; empty for a base
  dim of 1). View dims of 1 join no group: their slice is always (0, 1). None when ``view`` is not
  such a split of ``base``."""
  dims = [i for i, n in enumerate(view) if n != 1]
  groups, v = [], 0
  for n in base:
    group, prod = [], 1
    while n != 1 and v < len(dims) and prod < n:
      group.append(dims[v])
      prod *= view[dims[v]]
      v += 1
    if prod != n:
      return None
    groups.append(group)
  return groups if v == len(dims) else None
