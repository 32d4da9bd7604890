"""Prompts for a run, from the user or built in, as right-padded token rows.

Config keys (``specjax.run``):
* ``prompt``: one text (``--config.prompt="def fibonacci(n):"``);
* ``prompts_file``: one prompt per line; a line that is a JSON list of ``{"role", "content"}``
  messages is a chat and goes through the tokenizer's chat template; a line that is a JSON string
  is a text with escapes (``"def f():\\n"``);
* ``chat``: apply the chat template to plain-text prompts too (instruct models);
* neither: held-out Python stdlib snippets of ``prompt_len`` tokens (the demo's prompts), or
  random ids when there is no tokenizer (random-init models).
``batch_size`` larger than the number of prompts repeats them to fill the batch.
"""
from __future__ import annotations

import json
import pathlib

import numpy as np


def user_prompts(config) -> list:
  """The texts or chats the config asks for (empty: none given)."""
  items = [config.prompt] if config.get("prompt") else []
  if config.get("prompts_file"):
    path = pathlib.Path(config.prompts_file)
    if not path.is_file():
      raise ValueError(f"prompts_file not found: {path}")
    for n, line in enumerate(path.read_text().splitlines(), 1):
      if not line.strip():
        continue
      items.append(_parse_line(line, path, n))
  return items


def _parse_line(line: str, path, n: int):
  if line.lstrip()[:1] not in ("[", '"'):
    return line
  try:
    value = json.loads(line)
  except json.JSONDecodeError as e:
    raise ValueError(f"{path}:{n}: a line starting with [ or \" must be JSON ({e})") from e
  if isinstance(value, str):
    return value
  if not (isinstance(value, list) and all(isinstance(m, dict) and {"role", "content"} <= set(m) for m in value)):
    raise ValueError(f"{path}:{n}: a JSON line must be a string or a list of {{\"role\", \"content\"}} messages")
  return value


def encode(tokenizer, item, chat: bool) -> list[int]:
  """Token ids of one prompt; chats (and texts with ``chat``) through the chat template."""
  if isinstance(item, list) or chat:
    messages = item if isinstance(item, list) else [{"role": "user", "content": item}]
    if not getattr(tokenizer, "chat_template", None):
      raise ValueError(f"a chat prompt needs a tokenizer with a chat template; {type(tokenizer).__name__} has none")
    return tokenizer.encode(tokenizer.apply_chat_template(messages), add_special_tokens=False)
  return tokenizer.encode(item)


def pad_rows(rows: list[list[int]], batch_size: int):
  """``(prompts_BxP int32, lengths_B)``: rows repeated up to ``batch_size``, right-padded with 0."""
  if any(len(r) == 0 for r in rows):
    raise ValueError("a prompt encodes to no tokens; give it some text")
  rows = [rows[i % len(rows)] for i in range(max(batch_size, len(rows)))]
  width = max(map(len, rows))
  out = np.zeros((len(rows), width), np.int32)
  for r, ids in enumerate(rows):
    out[r, :len(ids)] = ids
  return out, np.array([len(r) for r in rows], np.int32)


def from_config(config, tokenizer, vocab_size: int):
  """``(prompts_BxP, lengths_B)`` for a run."""
  items = user_prompts(config)
  if items:
    if tokenizer is None:
      raise ValueError("--config.prompt needs a model with a tokenizer (a checkpoint), not a random init")
    return pad_rows([encode(tokenizer, item, bool(config.get("chat"))) for item in items], config.batch_size)
  b, p = config.batch_size, config.prompt_len
  if tokenizer is None:
    rs = np.random.RandomState(config.seed)
    return rs.randint(3, vocab_size, size=(b, p)).astype(np.int32), np.full((b,), p, np.int32)
  from specjax.data import code_corpus  # pylint: disable=import-outside-toplevel
  from specjax.data.tokenizer import ByteTokenizer  # pylint: disable=import-outside-toplevel
  snippets = code_corpus.held_out_prompts(b, p, seed=config.seed)  # bytes: p characters each
  if isinstance(tokenizer, ByteTokenizer):
    return np.stack(snippets).astype(np.int32), np.full((b,), p, np.int32)
  texts = [bytes(s.tolist()).decode("utf-8", errors="ignore") for s in snippets]
  return pad_rows([encode(tokenizer, t, bool(config.get("chat")))[:p] for t in texts], b)
