"""A GGUF file's tokenizer, rebuilt from its metadata with `tokenizers` (the file read with `gguf`).

    fields = gguf_tokenizer.load(path)   # HFTokenizer's fields: backend, bos_id, eos_ids, chat_template, ...
    tok = HFTokenizer(**fields)          # what HFTokenizer.from_gguf does

A GGUF holds no tokenizer.json, only llama.cpp's description of one under ``tokenizer.ggml.*``:
the vocabulary, BPE merges (or per-token scores), token types, special ids, the tokenizer model
(``gpt2``: byte-level BPE; ``llama``: SentencePiece-style BPE with byte fallback, as Llama 1/2 and
Gemma use) and a pre-tokenizer name (``smollm``, ``llama-bpe``, ``qwen2``, ...). From these we build
the `tokenizers.Tokenizer` that transformers' GGUF conversion (integrations/gguf) builds, except
where that conversion departs from llama.cpp and the model's own tokenizer; there we follow them:

* the ``smollm`` family (``starcoder``, ``refact``, ...) isolates every digit before the GPT-2
  split (transformers skips it, which changes how a run of 2+ blanks before a digit is cut);
* a SentencePiece (non-Gemma) vocabulary gets SentencePiece's dummy prefix on every stretch of
  text, also one that starts with a blank (" hi" -> "▁▁hi"), and after each special token.
"""
from __future__ import annotations

import pathlib
import warnings

from specjax.checkpoint import CheckpointError
from specjax.data.tokenizer import require_package as _require

_NORMAL, _UNKNOWN, _CONTROL, _USER_DEFINED = 1, 2, 3, 4   # gguf.TokenType
_SPECIAL_IDS = {"bos_token": "bos_token_id", "eos_token": "eos_token_id",
                "unk_token": "unknown_token_id", "pad_token": "padding_token_id"}

# llama.cpp (src/llama-vocab.cpp) marks these token texts as end-of-generation, whatever the file says
LLAMA_CPP_EOG_TEXTS = frozenset({
    "<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>", "<end_of_turn>", "<|endoftext|>",
    "<|eom_id|>", "<EOT>", "_<EOT>", "<|end_of_text|>", "<end_of_utterance>",
})

# Pre-tokenizer regexes by `tokenizer.ggml.pre` (those of llama.cpp's llama-vocab.cpp / the models' tokenizer.json)
_LLAMA3 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
           r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
_QWEN2 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
          r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
_QWEN35 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}"
           r"| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
_GPT4O = (r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?"
          r"|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?"
          r"|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+")
_TEKKEN = (r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+"
           r"|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*"
           r"|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+")
_SPLITS = {
    **dict.fromkeys(("llama3", "llama-v3", "llama-bpe", "falcon3", "falcon-h1", "pixtral", "midm-2.0", "lfm2",
                     "dbrx", "smaug-bpe"), _LLAMA3),
    **dict.fromkeys(("qwen2", "deepseek-r1-qwen", "megrez"), _QWEN2),
    "qwen35": _QWEN35,
    **dict.fromkeys(("gpt-4o", "llama4", "minimax-m2"), _GPT4O),
    "tekken": _TEKKEN,
}
_DIGITS_THEN_GPT2 = frozenset({"smollm", "starcoder", "refact", "command-r", "codeshell", "exaone", "minerva-7b"})
_GPT2 = frozenset({"default", "gpt2", "gpt-2", "mpt", "olmo", "jais", "trillion"})
_GEMMA_ARCHS = frozenset({"gemma", "gemma2", "gemma3"})


def read_metadata(path, reader=None) -> dict:
  """``general.architecture`` and every ``tokenizer.*`` key of a GGUF file, as Python values
  (``reader``: the file already parsed, e.g. by the model's import)."""
  gguf = _require("gguf", "gguf==0.19.0", "reading a GGUF tokenizer")
  path = pathlib.Path(path)
  if not path.is_file():
    raise CheckpointError(f"GGUF file not found: {path}")
  try:
    reader = reader or reader_class(gguf)(str(path))
    return {key: field.contents() for key, field in reader.fields.items()
            if key.startswith("tokenizer.") or key == "general.architecture"}
  except Exception as e:  # truncated/corrupt files raise Value, Index, struct or Unicode errors
    raise CheckpointError(f"cannot read the tokenizer metadata of GGUF file {path}: {e}") from e


def reader_class(gguf):
  """`gguf.GGUFReader` parsing from a plain-array view of its memory map: slicing an `np.memmap` costs
  about three times as much, and the reader slices once per token string (262k for Gemma 3).
  Tensor data stays memory-mapped."""
  import numpy as np  # pylint: disable=import-outside-toplevel

  class Reader(gguf.gguf_reader.GGUFReader):  # the class itself, even where gguf.GGUFReader is patched
    @property
    def data(self):
      return self._plain

    @data.setter
    def data(self, value):
      self._plain = value.view(np.ndarray)   # same bytes, still memory-mapped

  return Reader


def load(path, reader=None) -> dict:
  """The fields of `HFTokenizer` for the tokenizer the GGUF file at ``path`` describes."""
  meta = read_metadata(path, reader)
  tokens = meta.get("tokenizer.ggml.tokens")
  if not tokens:
    raise CheckpointError(f"GGUF file {path} has no tokenizer (no tokenizer.ggml.tokens)")
  ids = {name: meta.get(f"tokenizer.ggml.{key}") for name, key in _SPECIAL_IDS.items()}
  for name, i in ids.items():
    if i is not None and not 0 <= i < len(tokens):
      raise CheckpointError(f"GGUF file {path}: {name} id {i} is outside the {len(tokens)}-token vocabulary")
  if ids["bos_token"] is None or ids["eos_token"] is None:
    raise CheckpointError(f"GGUF file {path} gives no bos/eos token id")
  try:
    backend = build_backend(meta)
  except Exception as e:  # ValueError from here, plain Exception from `tokenizers` (a merge outside the vocabulary)
    raise CheckpointError(f"cannot build the tokenizer of GGUF file {path}: {e}") from e
  eos_id = ids["eos_token"]
  eog = [eos_id, meta.get("tokenizer.ggml.eot_token_id"), meta.get("tokenizer.ggml.eom_token_id")]
  eog += [i for i, t in enumerate(tokens) if t in LLAMA_CPP_EOG_TEXTS]
  # llama.cpp adds BOS to a SentencePiece vocabulary that does not say otherwise
  add_bos = meta.get("tokenizer.ggml.add_bos_token", meta.get("tokenizer.ggml.model") == "llama")
  return dict(backend=backend, bos_id=ids["bos_token"], eos_id=eos_id,
              pad_id=eos_id if ids["pad_token"] is None else ids["pad_token"],
              eos_ids=tuple(dict.fromkeys(i for i in eog if i is not None)), add_bos=bool(add_bos),
              add_eos=bool(meta.get("tokenizer.ggml.add_eos_token", False)),
              chat_template=meta.get("tokenizer.chat_template") or None,
              special_tokens={name: tokens[i] for name, i in ids.items() if i is not None},
              unk_id=ids["unk_token"])


def build_backend(meta: dict):
  """The `tokenizers.Tokenizer` (no post-processor: HFTokenizer sets BOS/EOS) for GGUF metadata."""
  tk = _require("tokenizers", "tokenizers", "HFTokenizer")
  tokens = list(meta["tokenizer.ggml.tokens"])
  kind = meta.get("tokenizer.ggml.model")
  if kind == "gpt2":
    tokenizer, spelled = _byte_level_bpe(tk, meta, tokens)
  elif kind == "llama":
    tokenizer, spelled = _sentencepiece_bpe(tk, meta, tokens)
  else:
    raise ValueError(f"tokenizer.ggml.model {kind!r} is not supported (supported: 'gpt2', 'llama')")
  _add_special_tokens(tk, tokenizer, meta, tokens, spelled)
  return tokenizer


def _byte_level_bpe(tk, meta, tokens):
  """GPT-2 style: every byte spelled as a printable character, merges from the file."""
  to_char = _bytes_to_unicode()
  alphabet = set(to_char.values())
  # a token written with characters outside the byte alphabet (rare) is spelled byte by byte
  spelled = [t if set(t) <= alphabet else "".join(to_char[b] for b in t.encode("utf-8")) for t in tokens]
  if "tokenizer.ggml.merges" not in meta:
    raise ValueError("a byte-level BPE vocabulary needs tokenizer.ggml.merges")
  merges = [tuple(m.split(" ", 1)) for m in meta["tokenizer.ggml.merges"]]
  tokenizer = tk.Tokenizer(tk.models.BPE(vocab={t: i for i, t in enumerate(spelled)}, merges=merges,
                                         continuing_subword_prefix="", end_of_word_suffix="", fuse_unk=False))
  pre = meta.get("tokenizer.ggml.pre", "default")
  byte_level = tk.pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=pre not in _SPLITS)
  if pre in _SPLITS:
    tokenizer.pre_tokenizer = tk.pre_tokenizers.Sequence(
        [tk.pre_tokenizers.Split(tk.Regex(_SPLITS[pre]), behavior="isolated"), byte_level])
  elif pre in _DIGITS_THEN_GPT2:
    tokenizer.pre_tokenizer = tk.pre_tokenizers.Sequence(
        [tk.pre_tokenizers.Digits(individual_digits=True), byte_level])
  else:
    if pre not in _GPT2:
      warnings.warn(f"GGUF pre-tokenizer {pre!r} is unknown here; splitting text with GPT-2's regex", stacklevel=3)
    tokenizer.pre_tokenizer = byte_level
  tokenizer.decoder = tk.decoders.ByteLevel()
  return tokenizer, spelled


def _sentencepiece_bpe(tk, meta, tokens):
  """SentencePiece BPE ("▁" for a blank, <0xNN> byte fallback). Merges come from the file if it has them,
  else from the vocabulary: every split of a token into two tokens, best token first."""
  arch = meta.get("general.architecture")
  gemma = arch in _GEMMA_ARCHS
  # Gemma files store blank-run tokens with real spaces where the vocabulary means "▁"
  spelled = [t.replace(" ", "\u2581") if gemma and " " in t and not t.strip() else t for t in tokens]
  vocab = {t: i for i, t in enumerate(spelled)}
  if "tokenizer.ggml.merges" in meta:
    merges = [tuple(m.split(" ", 1)) for m in meta["tokenizer.ggml.merges"]]
  elif gemma:  # Gemma's scores do not follow its merge order; its token order does
    merges = _merges_from_vocab(vocab, {t: -i for i, t in enumerate(spelled)})
  elif "tokenizer.ggml.scores" in meta:
    merges = _merges_from_vocab(vocab, dict(zip(spelled, meta["tokenizer.ggml.scores"])))
  else:
    raise ValueError("a SentencePiece vocabulary needs tokenizer.ggml.merges or tokenizer.ggml.scores")
  unk = meta.get("tokenizer.ggml.unknown_token_id")
  tokenizer = tk.Tokenizer(tk.models.BPE(vocab=vocab, merges=merges, fuse_unk=True, byte_fallback=True,
                                         unk_token=None if unk is None else spelled[unk]))
  decode = [tk.decoders.Replace("\u2581", " "), tk.decoders.ByteFallback(), tk.decoders.Fuse()]
  if gemma:  # no dummy prefix: every blank becomes "▁", words keep their leading blank
    tokenizer.normalizer = tk.normalizers.Replace(" ", "\u2581")
    tokenizer.pre_tokenizer = tk.pre_tokenizers.Split(" ", behavior="merged_with_previous")
  else:  # SentencePiece's dummy prefix, on every stretch of text between added tokens, as llama.cpp does
    prefix = bool(meta.get("tokenizer.ggml.add_space_prefix", True))
    tokenizer.normalizer = tk.normalizers.Sequence(
        [tk.normalizers.Prepend("\u2581")] * prefix + [tk.normalizers.Replace(" ", "\u2581")])
    if prefix:
      decode.append(tk.decoders.Strip(content=" ", left=1))
  tokenizer.decoder = tk.decoders.Sequence(decode)
  return tokenizer, spelled


def _add_special_tokens(tk, tokenizer, meta, tokens, spelled):
  """Control/unknown tokens and the named bos/eos/unk/pad become special added tokens, user-defined ones
  (like Gemma's "\\n\\n") plain added tokens, so the text's copies of them stay whole, as llama.cpp keeps
  them. A token whose text is not its vocabulary spelling (a byte-level "control" token written with
  characters outside the byte alphabet, a llama.cpp mislabel) is left out: adding it would grow the vocabulary."""
  types = meta.get("tokenizer.ggml.token_type") or [_NORMAL] * len(tokens)
  named = {meta.get(f"tokenizer.ggml.{key}") for key in _SPECIAL_IDS.values()} - {None}
  special, user = [], []
  for i, (token, kind) in enumerate(zip(tokens, types)):
    if token != spelled[i]:
      continue
    if kind in (_CONTROL, _UNKNOWN) or i in named:
      special.append(tk.AddedToken(token, normalized=False, special=True))
    elif kind == _USER_DEFINED:
      user.append(tk.AddedToken(token, normalized=False, special=False))
  tokenizer.add_special_tokens(special)
  tokenizer.add_tokens(user)


def _merges_from_vocab(vocab: dict, score: dict) -> list[tuple[str, str]]:
  """BPE merges a vocabulary implies: each token's splits into two vocabulary tokens, ordered by the
  token's score (highest first), then longer left part first (the order transformers' generate_merges uses)."""
  merges = []
  for token, s in score.items():
    pairs = [(token[:k], token[k:]) for k in range(1, len(token)) if token[:k] in vocab and token[k:] in vocab]
    pairs.sort(key=lambda p: (vocab[p[0]], vocab[p[1]]))
    merges += [(left, right, s) for left, right in pairs]
  merges.sort(key=lambda m: (m[2], len(m[0]), len(m[1])), reverse=True)
  return [(left, right) for left, right, _ in merges]


def _bytes_to_unicode() -> dict[int, str]:
  """GPT-2's byte -> printable character table: printable Latin-1 bytes map to themselves, the rest
  to code points from 256 up."""
  keep = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
  extra = [b for b in range(256) if b not in keep]
  return {**{b: chr(b) for b in keep}, **{b: chr(256 + n) for n, b in enumerate(extra)}}
