"""Checks on user input, run on the host before anything compiles; errors name the bad value."""
from __future__ import annotations

import jax.numpy as jnp
import numpy as np


def inputs(model, prompts, prompt_lengths, max_new_tokens, *, extra: int, max_len: int | None):
  prompts = np.asarray(prompts)
  if prompts.ndim != 2:
    raise ValueError(f"prompts must be int [batch, max_prompt_len], got shape {prompts.shape}")
  if not np.issubdtype(prompts.dtype, np.integer):
    raise ValueError(f"prompts must hold integer token ids, got dtype {prompts.dtype}")
  lengths = np.asarray(prompt_lengths)
  b, p = prompts.shape
  if lengths.shape != (b,):
    raise ValueError(f"prompt_lengths must have shape ({b},), got {lengths.shape}")
  if b == 0 or p == 0:
    raise ValueError(f"empty prompt batch: prompts has shape {prompts.shape}")
  for row, n in enumerate(lengths):
    if n < 1:
      raise ValueError(f"empty prompt: prompt_lengths[{row}] = {n}; every row needs at least one token")
    if n > p:
      raise ValueError(f"prompt_lengths[{row}] = {n} exceeds the prompts' width {p}")
  vocab = model.vocab_size
  bad = (prompts < 0) | (prompts >= vocab)
  bad &= np.arange(p)[None] < lengths[:, None]
  if bad.any():
    row, col = map(int, np.argwhere(bad)[0])
    raise ValueError(f"prompt token {int(prompts[row, col])} at [{row}, {col}] is outside the vocabulary "
                     f"[0, {vocab})")
  if int(max_new_tokens) != max_new_tokens or max_new_tokens < 1:
    raise ValueError(f"max_new_tokens must be a positive integer, got {max_new_tokens}")
  decoder_prompt = 1 if model.is_encoder_decoder else p
  needed = decoder_prompt + max_new_tokens + extra
  if max_len is None:
    max_len = needed
  elif needed > max_len:
    raise ValueError(f"cache too small: max_len={max_len}, but the prompt ({decoder_prompt} tokens) + "
                     f"max_new_tokens ({max_new_tokens}) + {extra} verify slots need {needed}")
  return jnp.asarray(prompts, jnp.int32), jnp.asarray(lengths, jnp.int32), int(max_len)


def drafter(target, drafter_obj, gamma) -> None:
  from specjax.drafters.base import Drafter  # pylint: disable=import-outside-toplevel
  if not isinstance(drafter_obj, Drafter):
    raise TypeError(f"unknown drafter {drafter_obj!r}: expected a specjax.drafters.Drafter")
  if isinstance(gamma, bool) or int(gamma) != gamma or gamma < 1:
    raise ValueError(f"gamma must be an integer >= 1, got {gamma!r}")
  drafter_obj.check_compatible(target)
  models = [("target", target)] + [("drafter model", m) for m in drafter_obj.draft_models()]
  for what, model in models:
    window = getattr(model.config, "min_window", 0)  # T5 and head configs have no sliding windows
    if window and window <= gamma:  # tree nodes see ancestors up to gamma back (kv_cache.sliding_window_mask)
      raise ValueError(f"gamma={gamma} needs every sliding window deeper than the draft: the {what}'s "
                       f"smallest window is {window}; use gamma < {window}")
