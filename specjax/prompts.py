"""Prompts for a run, from the user or built in, as right-padded token rows.

Config keys (``specjax.run``):
* ``prompt``: one text (``--config.prompt="def fibonacci(n):"``);
* ``prompts_file``: one prompt per line; a line that is a JSON list of ``{"role", "content"}``
  messages is a chat and goes through the tokenizer's chat template; a line that is a JSON string
  is a text with escapes (``"def f():\\n"``). A file replaces ``prompt`` (configs set a default
  prompt; the CLI refuses both given on its command line);
* ``chat``: apply the chat template to plain-text prompts too (instruct models);
* neither: ``batch_size`` held-out Python stdlib snippets of ``prompt_len`` tokens (the demo's and
  the benchmarks' prompts), or random ids when there is no tokenizer (random-init models); with
  ``chat`` (a chat model), ``batch_size`` questions of the shipped Spec-Bench-format set, one
  category after another, each through the chat template (:func:`builtin_questions`).

User prompts are decoded exactly as given: one row each, never repeated to fill ``batch_size``
(more prompts than ``batch_size`` rows run with continuous refill, :mod:`specjax.refill`).
"""
from __future__ import annotations

import json
import pathlib

import numpy as np


def user_prompts(config) -> list:
  """The texts or chats the config asks for (empty: none given); a prompts_file replaces prompt."""
  if not config.get("prompts_file"):
    return [config.prompt] if config.get("prompt") else []
  path = pathlib.Path(config.prompts_file).expanduser()
  if not path.is_file():
    raise ValueError(f"prompts_file {'is a directory' if path.is_dir() else 'not found'}: {path}")
  try:
    text = path.read_text(encoding="utf-8")
  except OSError as e:
    raise ValueError(f"prompts_file {path} cannot be read ({e.strerror or e})") from e
  except UnicodeDecodeError as e:
    raise ValueError(f"prompts_file {path} is not UTF-8 text (byte {e.start}: {e.reason}); one prompt per line") from e
  items = [_parse_line(line, path, n) for n, line in enumerate(text.splitlines(), 1) if line.strip()]
  if not items:
    raise ValueError(f"prompts_file {path} holds no prompts (one per line; blank lines are skipped)")
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


def pad_rows(rows: list[list[int]]):
  """``(prompts_BxP int32, lengths_B)``: one row per prompt, right-padded with 0."""
  if any(len(r) == 0 for r in rows):
    raise ValueError(f"prompt {[len(r) for r in rows].index(0)} encodes to no tokens; give it some text")
  width = max(map(len, rows))
  out = np.zeros((len(rows), width), np.int32)
  for r, ids in enumerate(rows):
    out[r, :len(ids)] = ids
  return out, np.array([len(r) for r in rows], np.int32)


def load(config, tokenizer, vocab_size: int):
  """``(prompts_BxP, lengths_B, items)``: ``items`` the user's prompts in row order (texts or
  chats), or None for the built-in ones."""
  items = user_prompts(config)
  if items:
    if tokenizer is None:
      raise ValueError("--config.prompt / prompts_file need a model with a tokenizer (a checkpoint), not a "
                       "random init")
    return (*pad_rows([encode(tokenizer, item, bool(config.get("chat"))) for item in items]), items)
  b, p = config.batch_size, config.prompt_len
  if getattr(tokenizer, "chat_template", None) and config.get("chat"):  # a chat model: questions, not code
    return (*pad_rows([encode(tokenizer, q, True) for q in builtin_questions(b, p, config.seed)]), None)
  if tokenizer is None:
    rs = np.random.RandomState(config.seed)
    return rs.randint(3, vocab_size, size=(b, p)).astype(np.int32), np.full((b,), p, np.int32), None
  from specjax.data import code_corpus  # pylint: disable=import-outside-toplevel
  from specjax.data.tokenizer import ByteTokenizer  # pylint: disable=import-outside-toplevel
  snippets = code_corpus.held_out_prompts(b, p, seed=config.seed)  # bytes: p characters each
  if isinstance(tokenizer, ByteTokenizer):
    return np.stack(snippets).astype(np.int32), np.full((b,), p, np.int32), None
  texts = [bytes(s.tolist()).decode("utf-8", errors="ignore") for s in snippets]
  return (*pad_rows([encode(tokenizer, t, bool(config.get("chat")))[:p] for t in texts]), None)


def builtin_questions(count: int, prompt_len: int, seed: int) -> list[str]:
  """``count`` first turns of the shipped Spec-Bench-format questions (chat models' built-in
  prompts): the categories in turn, each's questions of at most ``4 * prompt_len`` characters in an
  order drawn from ``seed``."""
  from specjax.data.specbench_prompts import SHIPPED  # pylint: disable=import-outside-toplevel
  by_category = {}
  for line in SHIPPED.read_text(encoding="utf-8").splitlines():
    q = json.loads(line)
    by_category.setdefault(q["category"], []).append(q["turns"][0])
  rs = np.random.RandomState(seed)
  pools = []
  for turns in by_category.values():
    short = [t for t in turns if len(t) <= 4 * prompt_len] or sorted(turns, key=len)[:1]
    pools.append([short[i] for i in rs.permutation(len(short))])
  return [pools[i % len(pools)][(i // len(pools)) % len(pools[i % len(pools)])] for i in range(count)]


def from_config(config, tokenizer, vocab_size: int):
  """``(prompts_BxP, lengths_B)`` for a run (:func:`load` without the items)."""
  return load(config, tokenizer, vocab_size)[:2]
