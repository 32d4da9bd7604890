"""The GGUF tokenizer built from the file's metadata (`specjax.data.gguf_tokenizer`, no transformers)
against transformers' conversion of the same file: ids, decoding, special tokens, chat template;
SentencePiece itself for a Llama-style vocabulary; and a runtime path free of transformers and torch."""
import json
import random
import subprocess
import sys
import textwrap
import warnings

import numpy as np
import pytest

pytest.importorskip("tokenizers", reason="HFTokenizer needs `pip install tokenizers`")
gguf = pytest.importorskip("gguf", reason="reading GGUF files needs `pip install gguf`")

from specjax import gguf_import  # noqa: E402
from specjax.checkpoint import CheckpointError  # noqa: E402
from specjax.data import gguf_tokenizer  # noqa: E402
from specjax.data.hf_tokenizer import HFTokenizer  # noqa: E402
from specjax.data.tokenizer import Tokenizer  # noqa: E402

MODELS = ["smollm2-135m-instruct", "gemma3-270m", "qwen2.5-coder-0.5b-instruct"]

TEXTS = [
    "def fib(n: int) -> int:\n    if n < 2:\n        return n\n    return fib(n - 1) + fib(n - 2)  # slow\n",
    "#include <stdio.h>\nint main(void) {\n\tprintf(\"%d\\n\", 42);\n\treturn 0;\n}\n",
    "SELECT id, name FROM users WHERE age >= 18 ORDER BY name; -- ok",
    "Grüße aus Köln! Äpfel, Öl und Übermaß; die Straße ist naß.",
    "Der Überseedampfer fährt übermorgen nach Hamburg, schätze ich.",
    "emoji 🤗🎉👍🏽👨‍👩‍👧 and 中文, русский, العربية, हिन्दी, 日本語のテキスト",
    "   lots   of    spaces\n\n\n\n  \t\t x  ",
    "line\nline\r\nline\n\n\n",
    "\u00a0non-breaking\u2003em space\u200bzero width",
    "0123456789 3.14159 1e10 0xFF -7 +8 1,000,000.5",
    "x\u00bd, y\u00b2, z\u2167, a\u0663\u0664, b\uff11\uff12",
    "CamelCaseWord snake_case_word kebab-case-word ALLCAPS I'm you're they'll it's",
    "<|im_start|>user\nhi<|im_end|>\n<|endoftext|>",
    "<bos><eos><start_of_turn>model\nok<end_of_turn>\n<pad><unk><mask>",
    "<start_of_turn>user\nWer bist du?<end_of_turn>\n<start_of_turn>model\n",
    "",
    " ",
    "\n",
    "  leading and trailing  ",
]
# Where the "smollm" pre-tokenizer (every digit apart first, as llama.cpp and SmolLM2's own
# tokenizer.json) and transformers' GGUF conversion (GPT-2 split alone) disagree: a run of 2+ blanks
# before a digit, a blank before a numeral the vocabulary merges with it ("Ġ²").
DIGITS_FIRST = {"smollm2-135m-instruct"}   # its GGUF says tokenizer.ggml.pre = "smollm"
DIGIT_SPLIT_TEXTS = ["x = [\n    1,\n    22]", "a  1", "line1\n\n2", "\u00bd \u00b2 \u2167 \u0663\u0664 \uff11\uff12"]


def _gguf(name):
  from specjax import registry  # pylint: disable=import-outside-toplevel
  return registry.gguf_path(name)


@pytest.fixture(scope="module", params=MODELS)
def model(request):
  """(name, ours, transformers' AutoTokenizer from the same GGUF)."""
  transformers = pytest.importorskip("transformers", reason="the reference conversion needs transformers")
  try:
    path = _gguf(request.param)
  except CheckpointError as e:
    if request.param.startswith("qwen"):
      pytest.skip(f"no Qwen2.5 GGUF here: {e}")
    raise
  with gguf_import.fast_reader_everywhere():  # one parse for both, ~3x faster than gguf's own reader
    ours = HFTokenizer.from_gguf(path, gguf_import.open_reader(path))
    ref = transformers.AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
  return request.param, ours, ref


def _added_texts(tok) -> list[str]:
  """The model's own added tokens (control and user-defined) between bits of text."""
  added = [t.content for _, t in sorted(tok.backend.get_added_tokens_decoder().items())]
  picks = added[:24] + added[-8:]
  return ["x" + "".join(f"{t} y{i}\n" for i, t in enumerate(picks[k:k + 8])) for k in range(0, len(picks), 8)]


def test_vocab_and_specials(model):
  name, ours, ref = model
  assert ours.vocab_size == len(ref)
  assert (ours.bos_id, ours.eos_id, ours.pad_id, ours.unk_id) == (
      ref.bos_token_id, ref.eos_token_id, ref.pad_token_id, ref.unk_token_id)
  assert ours.add_bos == ref.add_bos_token
  for key, value in ours.special_tokens.items():
    assert ref.special_tokens_map[key] == value
  assert ours.eos_ids[0] == ours.eos_id
  assert {t.content for t in ours.backend.get_added_tokens_decoder().values()} == set(ref.get_added_vocab())
  for attr in ("vocab_size", "pad_id", "bos_id", "eos_id", "encode", "decode"):   # specjax's Tokenizer protocol
    assert attr in dir(Tokenizer) or attr in Tokenizer.__annotations__
    assert isinstance(getattr(ours, attr), int) or callable(getattr(ours, attr)), attr
  if name == "smollm2-135m-instruct":
    assert ours.vocab_size == 49152 and not ours.add_bos
    assert ours.eos_id == 2 and ours.id_to_token(2) == "<|im_end|>"
    assert set(ours.eos_ids) == {2, 0}          # <|im_end|>, <|endoftext|> (llama.cpp's stop set)
  elif name == "gemma3-270m":
    assert ours.vocab_size == 262144 and ours.add_bos
    assert ours.eos_ids == (1, 106)             # <eos>, <end_of_turn>, as Gemma 3's generation_config
    assert ours.id_to_token(106) == "<end_of_turn>"


def test_bos_and_special_strings(model):
  _, ours, ref = model
  ids = ours.encode("hello")
  assert (ids[0] == ours.bos_id) == ours.add_bos
  special = ref.convert_ids_to_tokens(ours.eos_ids[-1])   # <|im_end|>, <end_of_turn>, <|endoftext|>
  body = ours.encode(special, add_special_tokens=False)
  assert body == [ours.token_to_id(special)] and body[0] in ours.eos_ids


def test_decode_round_trip(model):
  _, ours, _ = model
  for text in TEXTS:
    assert ours.decode(ours.encode(text, add_special_tokens=False)) == text
  ids = ours.encode("x = 1")
  assert ours.decode(ids, skip_special_tokens=True) == "x = 1"
  assert ours.decode(np.asarray(ids, np.int32)) == ours.decode(ids)     # jax/numpy arrays of ids decode


def test_ids_equal_transformers(model):
  name, ours, ref = model
  for text in TEXTS + _added_texts(ours):
    assert ours.encode(text) == ref.encode(text), (name, text)
    assert ours.encode(text, add_special_tokens=False) == ref.encode(text, add_special_tokens=False), (name, text)


def test_digit_split(model):
  """Where the pre-tokenizer isolates digits, the ids are transformers' ids of each digit-free stretch
  and each digit encoded apart, which is llama.cpp's sequential split; transformers' own conversion
  differs there, so this case is checked against that composition, not against it."""
  name, ours, ref = model
  if name not in DIGITS_FIRST:
    for text in DIGIT_SPLIT_TEXTS:
      assert ours.encode(text) == ref.encode(text), (name, text)
    return
  from tokenizers.pre_tokenizers import Digits  # pylint: disable=import-outside-toplevel
  differs = 0
  for text in DIGIT_SPLIT_TEXTS + TEXTS:
    pieces = [p for p, _ in Digits(individual_digits=True).pre_tokenize_str(text)]
    expected = [i for p in pieces for i in ref.encode(p, add_special_tokens=False)]
    assert ours.encode(text, add_special_tokens=False) == expected, (name, text)
    assert ours.decode(expected) == text
    differs += expected != ref.encode(text, add_special_tokens=False)
  assert differs == len(DIGIT_SPLIT_TEXTS)   # of all these texts, only those tell the two apart


def test_decode_equals_transformers(model):
  name, ours, ref = model
  for text in TEXTS + _added_texts(ours):
    ids = ref.encode(text)
    for skip in (False, True):
      assert ours.decode(ids, skip_special_tokens=skip) == ref.decode(ids, skip_special_tokens=skip), (name, text)
  rng = random.Random(0)   # arbitrary ids too: byte pieces, cut UTF-8, specials in the middle
  for _ in range(100):
    ids = [rng.randrange(ours.vocab_size) for _ in range(rng.randrange(1, 24))]
    for skip in (False, True):
      assert ours.decode(ids, skip_special_tokens=skip) == ref.decode(ids, skip_special_tokens=skip), (name, ids)


def test_chat_template_as_before(model):
  name, ours, ref = model
  if ref.chat_template is None:
    assert ours.chat_template is None                   # the base Gemma GGUF ships none
    with pytest.raises(ValueError, match="no chat template"):
      ours.apply_chat_template([{"role": "user", "content": "hi"}])
    return
  assert ours.chat_template == ref.chat_template
  conversations = [
      [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Was ist 2+2? 🤔"}],
      [{"role": "user", "content": "Write a haiku about JAX.\n\n```python\nx = 1\n```"}],
      [{"role": "system", "content": "S"}, {"role": "user", "content": "a"},
       {"role": "assistant", "content": "b"}, {"role": "user", "content": "c"}],
  ]
  for messages in conversations:
    for gen in (True, False):
      prompt = ref.apply_chat_template(messages, tokenize=False, add_generation_prompt=gen)
      assert ours.apply_chat_template(messages, add_generation_prompt=gen) == prompt
      assert ours.encode(prompt, add_special_tokens=False) == ref.encode(prompt, add_special_tokens=False)
    assert ours.encode(ours.apply_chat_template(messages), add_special_tokens=False) == ref.apply_chat_template(
        messages, tokenize=True, add_generation_prompt=True, return_dict=False)


def test_saved_and_reloaded(model, tmp_path):
  name, ours, _ = model
  again = HFTokenizer.from_folder(ours.save(tmp_path / name))
  for text in TEXTS + DIGIT_SPLIT_TEXTS:
    assert again.encode(text) == ours.encode(text)
    assert again.decode(ours.encode(text, add_special_tokens=False)) == text
  for field in ("bos_id", "eos_id", "pad_id", "eos_ids", "add_bos", "add_eos", "chat_template",
                "special_tokens", "unk_id", "vocab_size"):
    assert getattr(again, field) == getattr(ours, field), field


def test_folder_from_the_transformers_conversion_still_loads(tmp_path):
  """A conversion cache written when transformers built the tokenizer (format 1, its tokenizer.json)
  loads with `tokenizers` alone and keeps encoding as it did."""
  pytest.importorskip("transformers")
  from transformers.integrations.gguf import (  # pylint: disable=import-outside-toplevel
      convert_gguf_tokenizer, get_gguf_tokenizer)
  path = _gguf("smollm2-135m-instruct")
  fields = gguf_tokenizer.load(path)
  old_backend, _ = convert_gguf_tokenizer(*get_gguf_tokenizer(str(path))[:2])
  old = HFTokenizer(**{**fields, "backend": old_backend})
  folder = old.save(tmp_path / "old")
  assert json.loads((folder / "specjax_tokenizer.json").read_text())["format"] == 1
  loaded = HFTokenizer.from_folder(folder)
  for text in TEXTS + DIGIT_SPLIT_TEXTS:
    assert loaded.encode(text) == old.encode(text)


def test_runtime_path_imports_neither_transformers_nor_torch():
  script = textwrap.dedent("""
      import importlib.abc, sys
      class Block(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
          if name.split(".")[0] in ("transformers", "torch"):
            raise ImportError("blocked: " + name)
      sys.meta_path.insert(0, Block())
      from specjax import registry
      from specjax.data.hf_tokenizer import HFTokenizer
      tok = HFTokenizer.from_gguf(registry.gguf_path("smollm2-135m-instruct"))
      print(tok.encode("hi there"), tok.apply_chat_template([{"role": "user", "content": "hi"}]) != "")
      assert not [m for m in sys.modules if m.split(".")[0] in ("transformers", "torch")]
  """)
  out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300, check=False)
  assert out.returncode == 0, out.stderr[-3000:]
  assert out.stdout.strip().endswith("True")


# ---------------------------------------------------------------------- files written here

def _write(path, kv, arch="llama", scores=None, types=None):
  """A tensor-free GGUF holding `kv` (bool/int/str/list values) and optional token scores/types."""
  writer = gguf.GGUFWriter(str(path), arch)
  for key, value in kv.items():
    if isinstance(value, bool):
      writer.add_bool(key, value)
    elif isinstance(value, int):
      writer.add_uint32(key, value)
    elif isinstance(value, str):
      writer.add_string(key, value)
    else:
      writer.add_array(key, list(value))
  if scores is not None:
    writer.add_token_scores(scores)
  if types is not None:
    writer.add_token_types(types)
  writer.write_header_to_file()
  writer.write_kv_data_to_file()
  writer.write_tensors_to_file()
  writer.close()
  return path


SP_TEXTS = ["the lazy fox", " leading blank", "  two  blanks  ", "Grüße 😀 unseen ✓ 中文", "x+1 = 12345\n\nnext",
            "\ttab", "", " "]


@pytest.mark.parametrize("add_space_prefix", [True, False])
def test_sentencepiece_vocabulary_matches_sentencepiece(tmp_path, add_space_prefix):
  """A Llama-style file (scores, no merges, <0xNN> byte pieces), written from a SentencePiece BPE
  model trained here: the same ids and text as SentencePiece itself."""
  spm = pytest.importorskip("sentencepiece")
  corpus = tmp_path / "corpus.txt"
  corpus.write_text("\n".join(["the quick brown fox jumps over the lazy dog", "Grüße aus Köln, Übermaß",
                               "def f(x): return x + 1", "  indented   text\twith tabs", "numbers 12345 and 3.14",
                               "speculative decoding drafts tokens"] * 40))
  spm.SentencePieceTrainer.train(input=str(corpus), model_prefix=str(tmp_path / "sp"), vocab_size=400,
                                 model_type="bpe", byte_fallback=True, character_coverage=1.0, minloglevel=2,
                                 normalization_rule_name="identity", remove_extra_whitespaces=False,
                                 add_dummy_prefix=add_space_prefix)
  sp = spm.SentencePieceProcessor(model_file=str(tmp_path / "sp.model"))
  n = sp.get_piece_size()
  path = _write(tmp_path / "sp.gguf", {
      "tokenizer.ggml.model": "llama", "tokenizer.ggml.tokens": [sp.id_to_piece(i) for i in range(n)],
      "tokenizer.ggml.bos_token_id": sp.bos_id(), "tokenizer.ggml.eos_token_id": sp.eos_id(),
      "tokenizer.ggml.unknown_token_id": sp.unk_id(), "tokenizer.ggml.add_space_prefix": add_space_prefix},
      scores=[sp.get_score(i) for i in range(n)],
      types=[2 if sp.is_unknown(i) else 3 if sp.is_control(i) else 6 if sp.is_byte(i) else 1 for i in range(n)])
  tok = HFTokenizer.from_gguf(path)
  assert tok.vocab_size == n and tok.add_bos and tok.bos_id == sp.bos_id()
  for text in SP_TEXTS:
    assert tok.encode(text, add_special_tokens=False) == sp.encode(text), text
    assert tok.encode(text) == [sp.bos_id()] + sp.encode(text)
    assert tok.decode(sp.encode(text)) == sp.decode(sp.encode(text)), text
  assert tok.encode("</s>", add_special_tokens=False) == [sp.eos_id()]   # control tokens stay whole


@pytest.mark.parametrize("pre", ["qwen2", "llama-bpe", "gpt-4o", "gpt2"])
def test_byte_level_pre_tokenizers_match_transformers(tmp_path, pre):
  """SmolLM2's vocabulary re-labelled with other pre-tokenizers: each name splits text the way
  transformers' conversion splits it."""
  pytest.importorskip("transformers")
  from transformers.integrations.gguf import (  # pylint: disable=import-outside-toplevel
      convert_gguf_tokenizer, get_gguf_tokenizer)
  meta = gguf_tokenizer.read_metadata(_gguf("smollm2-135m-instruct"))
  path = _write(tmp_path / f"{pre}.gguf", {
      "tokenizer.ggml.model": "gpt2", "tokenizer.ggml.pre": pre, "tokenizer.ggml.tokens": meta["tokenizer.ggml.tokens"],
      "tokenizer.ggml.merges": meta["tokenizer.ggml.merges"], "tokenizer.ggml.bos_token_id": 1,
      "tokenizer.ggml.eos_token_id": 2}, arch="qwen2", types=meta["tokenizer.ggml.token_type"])
  ours = HFTokenizer.from_gguf(path)
  ref, _ = convert_gguf_tokenizer(*get_gguf_tokenizer(str(path))[:2])
  for text in TEXTS + DIGIT_SPLIT_TEXTS:
    assert ours.encode(text, add_special_tokens=False) == ref.encode(text, add_special_tokens=False).ids, text


# ---------------------------------------------------------------------- errors

def test_bad_files_name_the_value(tmp_path):
  tokens = {"tokenizer.ggml.tokens": ["<s>", "</s>", "a", "b", "ab"]}
  ids = {"tokenizer.ggml.bos_token_id": 0, "tokenizer.ggml.eos_token_id": 1}
  bpe = {"tokenizer.ggml.model": "gpt2", **tokens, "tokenizer.ggml.merges": ["a b"]}
  with pytest.raises(CheckpointError, match="no tokenizer"):
    HFTokenizer.from_gguf(_write(tmp_path / "bare.gguf", {}))
  with pytest.raises(CheckpointError, match="'bert'"):
    HFTokenizer.from_gguf(_write(tmp_path / "bert.gguf", {"tokenizer.ggml.model": "bert", **tokens, **ids}))
  with pytest.raises(CheckpointError, match="eos_token id 9 is outside the 5-token"):
    HFTokenizer.from_gguf(_write(tmp_path / "far.gguf", {**bpe, **ids, "tokenizer.ggml.eos_token_id": 9}))
  with pytest.raises(CheckpointError, match="no bos/eos"):
    HFTokenizer.from_gguf(_write(tmp_path / "nobos.gguf", bpe))
  with pytest.raises(CheckpointError, match="bad.gguf"):
    HFTokenizer.from_gguf(_write(tmp_path / "bad.gguf", {**bpe, **ids, "tokenizer.ggml.merges": ["a x"]}))
  with pytest.raises(CheckpointError, match="needs tokenizer.ggml.merges"):
    HFTokenizer.from_gguf(_write(tmp_path / "nomerges.gguf", {"tokenizer.ggml.model": "gpt2", **tokens, **ids}))
  with pytest.warns(UserWarning, match="'mystery'"):
    tok = HFTokenizer.from_gguf(_write(tmp_path / "mystery.gguf", {**bpe, **ids, "tokenizer.ggml.pre": "mystery"}))
  assert tok.encode("ab") == [4]
  with warnings.catch_warnings():
    warnings.simplefilter("error")
    tok = HFTokenizer.from_gguf(_write(tmp_path / "known.gguf", {**bpe, **ids, "tokenizer.ggml.pre": "smollm"}))
  assert tok.encode("ab<s>") == [4, 0]
