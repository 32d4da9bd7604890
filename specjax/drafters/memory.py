"""A drafter's memory on disk: what it learned from the target's text (``Drafter.memory``), saved
beside the hashes of the tokenizer and the checkpoint it was learned with.

A memory holds token ids and continuations of one target under one tokenizer: under another it
would propose nonsense (exactness holds anyway, the drafts would just be rejected), so ``load``
refuses a file whose hashes differ from the ones given, naming both. The file is one ``.npz``:
the memory's leaves in ``tree_flatten`` order plus a JSON header (kind, hashes, leaf shapes).

    out = specjax.speculative_generate(target, drafter, ...)      # out.drafter carries the memory
    memory.save(path, out.drafter, tokenizer_hash=memory.tokenizer_hash(tok, V),
                checkpoint_hash=memory.params_hash(target))
    drafter = memory.load(path, drafter, tokenizer_hash=..., checkpoint_hash=...)
"""
from __future__ import annotations

import hashlib
import json
import pathlib

import jax
import numpy as np

FORMAT = "specjax.drafter_memory/1"


def params_hash(model) -> str:
  """sha256 over a model's parameters (paths, dtypes, shapes and bytes): the checkpoint's identity."""
  digest = hashlib.sha256()
  for path, leaf in jax.tree_util.tree_flatten_with_path(model.params)[0]:
    arr = np.asarray(jax.device_get(leaf))
    digest.update(f"{jax.tree_util.keystr(path)}:{arr.dtype}:{arr.shape};".encode())
    digest.update(np.ascontiguousarray(arr).tobytes())
  return digest.hexdigest()


def tokenizer_hash(tokenizer, vocab_size: int) -> str:
  """sha256 over the text of every token id below ``vocab_size`` (``tokenizer.decode([i])``)."""
  digest = hashlib.sha256()
  for i in range(int(vocab_size)):
    try:
      text = tokenizer.decode([i])
    except Exception as e:  # pylint: disable=broad-except  # an id the tokenizer cannot decode
      text = f"<undecodable {type(e).__name__}>"
    digest.update(repr(text).encode("utf-8", "surrogatepass") + b"\x00")
  return digest.hexdigest()


def save(path, drafter, *, tokenizer_hash: str, checkpoint_hash: str) -> pathlib.Path:
  """Writes ``drafter.memory`` with the two hashes; returns the path (``.npz`` added if missing)."""
  if drafter.memory is None:
    raise ValueError(f"{type(drafter).__name__} ({drafter.kind}) has no memory to save")
  for name, value in (("tokenizer_hash", tokenizer_hash), ("checkpoint_hash", checkpoint_hash)):
    if not isinstance(value, str) or not value:
      raise ValueError(f"{name} must be a non-empty string, got {value!r}")
  path = pathlib.Path(path)
  if path.suffix != ".npz":
    path = path.with_name(path.name + ".npz")
  leaves = [np.asarray(jax.device_get(x)) for x in jax.tree_util.tree_leaves(drafter.memory)]
  header = {"format": FORMAT, "kind": drafter.kind, "tokenizer_hash": tokenizer_hash,
            "checkpoint_hash": checkpoint_hash, "leaves": [[str(x.dtype), list(x.shape)] for x in leaves]}
  path.parent.mkdir(parents=True, exist_ok=True)
  np.savez(path, header=np.asarray(json.dumps(header)), **{f"leaf_{i}": x for i, x in enumerate(leaves)})
  return path


def load(path, drafter, *, tokenizer_hash: str, checkpoint_hash: str):
  """``drafter`` carrying the memory saved at ``path``; refused (ValueError) when the file's kind,
  tokenizer hash, checkpoint hash or leaf shapes differ from ``drafter`` and the given hashes."""
  if drafter.memory is None:
    raise ValueError(f"{type(drafter).__name__} ({drafter.kind}) has no memory to load into")
  path = pathlib.Path(path)
  with np.load(path, allow_pickle=False) as f:
    header = json.loads(str(f["header"]))
    leaves = [f[f"leaf_{i}"] for i in range(len(header.get("leaves", [])))]
  if header.get("format") != FORMAT:
    raise ValueError(f"{path}: not a drafter memory file (format {header.get('format')!r}, expected {FORMAT!r})")
  if header["kind"] != drafter.kind:
    raise ValueError(f"{path}: memory of drafter kind {header['kind']!r}, not {drafter.kind!r}")
  for name, want in (("tokenizer_hash", tokenizer_hash), ("checkpoint_hash", checkpoint_hash)):
    if header[name] != want:
      raise ValueError(f"{path}: saved with {name} {header[name][:16]}..., this run has {str(want)[:16]}...; "
                       "a memory learned with another tokenizer or checkpoint is refused")
  template, treedef = jax.tree_util.tree_flatten(drafter.memory)
  got = [(str(x.dtype), list(x.shape)) for x in leaves]
  want = [(str(np.dtype(x.dtype)), list(x.shape)) for x in template]
  if got != want:
    raise ValueError(f"{path}: memory leaves {got} do not fit this drafter's {want} (other options?)")
  return drafter.with_memory(jax.tree_util.tree_unflatten(treedef, [jax.numpy.asarray(x) for x in leaves]))
