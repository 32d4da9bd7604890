"""What the shipped kinds' builds share: a small model from a checkpoint, the truncated vocabulary
saved beside a head, and the tree-depth check.

A kind's ``checkpoint`` is a folder or a name under ``specjax/assets`` (trained heads, a ``draft_lm``
bundle), or, for ``draft_model``/``specinfer``, anything ``specjax.load_pretrained`` takes (a
registered name, a .gguf file, an HF folder).
"""
from __future__ import annotations

import jax.numpy as jnp

from specjax.drafters import vocab
from specjax.models import heads as heads_lib


def small_model(checkpoint: str, target):
  """``(model, subset_K)``: a draft_lm bundle over the target's embedding, or any loadable model."""
  from specjax import loading  # pylint: disable=import-outside-toplevel
  from specjax.models import draft_lm  # pylint: disable=import-outside-toplevel
  if not checkpoint:
    raise ValueError("this drafter kind needs drafter.checkpoint: a small model sharing the target's tokenizer "
                     "(a registered name, a .gguf file, an HF folder or a specjax bundle)")
  folder = draft_lm.resolve(checkpoint)
  if folder is not None:
    model, subset_K = draft_lm.load(folder, target)
    return model, jnp.asarray(subset_K, jnp.int32)
  return loading.load_pretrained(checkpoint)[0], None


def full_vocab_small_model(drafter, target):
  """The drafter over the whole vocabulary: a draft_lm's architecture with a full-vocabulary output,
  random (what truncation saves in draft cost; its drafts are not used); a full model as it is."""
  import dataclasses  # pylint: disable=import-outside-toplevel
  from specjax.models import draft_lm  # pylint: disable=import-outside-toplevel
  if not hasattr(drafter.model.config, "out_vocab"):  # a whole model: its head already spans the vocabulary
    return drafter.replace(subset_K=None)
  cfg = dataclasses.replace(drafter.model.config, out_vocab=0)
  return drafter.replace(model=draft_lm.init(cfg, target, seed=0), subset_K=None)


def subset_beside(checkpoint):
  """The truncated vocabulary saved beside a head's weights (None: none, or no such folder)."""
  folder = heads_lib.resolve(checkpoint)
  return None if folder is None else vocab.load_subset(folder)


def check_depth(gamma: int, depth: int, what: str) -> None:
  if gamma != depth:
    raise ValueError(f"drafter gamma={gamma} must equal the depth of {what} ({depth}); set drafter.gamma={depth}")
