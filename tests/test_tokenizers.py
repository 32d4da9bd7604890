"""HFTokenizer: the real models' tokenizers through `tokenizers`, checked against transformers'
AutoTokenizer loaded from the same GGUF file. Each model is converted once per module."""
import json
import sys
import time

import pytest

pytest.importorskip("tokenizers", reason="HFTokenizer needs `pip install tokenizers`")

from specjax import gguf_import  # noqa: E402
from specjax.checkpoint import CheckpointError  # noqa: E402
from specjax.data.hf_tokenizer import SPECJAX_FILE, HFTokenizer  # noqa: E402
from specjax.data.tokenizer import Tokenizer  # noqa: E402

TEXTS = [
    "def fib(n: int) -> int:\n    if n < 2:\n        return n\n    return fib(n - 1) + fib(n - 2)  # slow\n",
    "class A:\n\tdef __init__(self):\n\t\tself.x = {'a': [1, 2.5e-3, None]}\n",
    "Grüße aus Köln! Äpfel, Öl und Übermaß; die Straße ist naß.",
    "emoji 🤗🎉👍🏽👨‍👩‍👧 and 中文, русский, العربية",
    "   lots   of    spaces\n\n\n\n  \t\t x  ",
    "line1\nline2\r\nline3\n\n\n",
    "<|im_start|>user\nhi<|im_end|>\n<|endoftext|>",
    "<bos><eos><start_of_turn>model\nok<end_of_turn>\n<pad><unk><mask>",
    "",
    " ",
    "\n",
    "  leading and trailing  ",
    "0123456789 3.14159 1e10 0xFF",
]

MODELS = ["smollm2-135m-instruct", "gemma3-270m"]
TIMINGS = {}


def _gguf(name):
  from specjax import registry  # pylint: disable=import-outside-toplevel
  return registry.gguf_path(name)  # a missing package fails, naming its pip command


@pytest.fixture(scope="module", params=MODELS)
def pair(request, tmp_path_factory):
  """(name, HFTokenizer.from_gguf, transformers AutoTokenizer, folder the HFTokenizer was saved to)."""
  pytest.importorskip("transformers", reason="the reference tokenizer needs transformers")
  from transformers import AutoTokenizer  # pylint: disable=import-outside-toplevel
  path = _gguf(request.param)
  t0 = time.perf_counter()
  tok = HFTokenizer.from_gguf(path)
  t1 = time.perf_counter()
  folder = tok.save(tmp_path_factory.mktemp(request.param))
  t2 = time.perf_counter()
  cached = HFTokenizer.from_folder(folder)
  t3 = time.perf_counter()
  TIMINGS[request.param] = dict(convert_s=t1 - t0, save_s=t2 - t1, cached_load_s=t3 - t2)
  print(f"\n{request.param}: {TIMINGS[request.param]}")
  with gguf_import.fast_reader_everywhere():  # the same fields, parsed ~3x faster
    ref = AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
  return request.param, tok, ref, cached


@pytest.fixture(scope="module")
def smollm():
  """SmolLM2 only, for the checks one model is enough for: (name, tokenizer, reference, None)."""
  from transformers import AutoTokenizer  # pylint: disable=import-outside-toplevel
  path = _gguf("smollm2-135m-instruct")
  with gguf_import.fast_reader_everywhere():
    ref = AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
  return ("smollm2-135m-instruct", HFTokenizer.from_gguf(path), ref, None)


def test_protocol_and_specials(pair):
  name, tok, ref, _ = pair
  for attr in ("vocab_size", "pad_id", "bos_id", "eos_id", "encode", "decode"):   # specjax's Tokenizer protocol
    assert attr in dir(Tokenizer) or attr in Tokenizer.__annotations__
    assert isinstance(getattr(tok, attr), int) or callable(getattr(tok, attr)), attr
  assert tok.vocab_size == len(ref) == {"smollm2-135m-instruct": 49152, "gemma3-270m": 262144}[name]
  assert (tok.bos_id, tok.eos_id) == (ref.bos_token_id, ref.eos_token_id)
  assert tok.pad_id == ref.pad_token_id
  assert tok.add_bos == ref.add_bos_token == (name == "gemma3-270m")
  assert tok.eos_ids[0] == tok.eos_id
  for key, value in tok.special_tokens.items():
    assert ref.special_tokens_map[key] == value
  if name == "smollm2-135m-instruct":
    assert tok.eos_id == 2 and tok.id_to_token(2) == "<|im_end|>"
    assert set(tok.eos_ids) == {2, 0}          # <|im_end|>, <|endoftext|> (llama.cpp's stop set)
  else:
    assert tok.eos_ids == (1, 106)               # <eos>, <end_of_turn>, as Gemma 3's generation_config
    assert tok.id_to_token(106) == "<end_of_turn>"


@pytest.mark.parametrize("text", TEXTS)
def test_ids_equal_transformers(pair, text):
  _, tok, ref, cached = pair
  expected = ref.encode(text)
  assert tok.encode(text) == expected
  assert cached.encode(text) == expected
  assert tok.encode(text, add_special_tokens=False) == ref.encode(text, add_special_tokens=False)
  assert tok.decode(expected) == ref.decode(expected)
  assert tok.decode(expected, skip_special_tokens=True) == ref.decode(expected, skip_special_tokens=True)


def test_bos_and_special_strings(pair):
  name, tok, _, _ = pair
  ids = tok.encode("hello")
  assert (ids[0] == tok.bos_id) == tok.add_bos
  special = "<|im_end|>" if name == "smollm2-135m-instruct" else "<end_of_turn>"
  body = tok.encode(special, add_special_tokens=False)
  assert body == [tok.token_to_id(special)] and body[0] in tok.eos_ids


def test_decode_round_trip(pair):
  _, tok, _, cached = pair
  for text in TEXTS:
    ids = tok.encode(text, add_special_tokens=False)
    assert tok.decode(ids) == text
    assert cached.decode(ids) == text
  ids = tok.encode("x = 1")
  assert tok.decode(ids, skip_special_tokens=True) == "x = 1"
  import numpy as np  # pylint: disable=import-outside-toplevel
  assert tok.decode(np.asarray(ids, np.int32)) == tok.decode(ids)     # jax/numpy arrays of ids decode


def test_saved_folder_reads_back_identically(pair):
  _, tok, _, cached = pair
  for field in ("bos_id", "eos_id", "pad_id", "eos_ids", "add_bos", "add_eos", "chat_template",
                "special_tokens", "unk_id", "vocab_size"):
    assert getattr(cached, field) == getattr(tok, field), field


def test_chat_template(pair):
  name, tok, ref, cached = pair
  if name != "smollm2-135m-instruct":
    assert tok.chat_template is None                   # the base Gemma GGUF ships none
    with pytest.raises(ValueError, match="no chat template"):
      tok.apply_chat_template([{"role": "user", "content": "hi"}])
    return
  conversations = [
      [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Was ist 2+2? 🤔"}],
      [{"role": "user", "content": "Write a haiku about JAX."}],             # the template's default system
      [{"role": "system", "content": "S"}, {"role": "user", "content": "a"},
       {"role": "assistant", "content": "b"}, {"role": "user", "content": "c"}],
  ]
  for messages in conversations:
    for gen in (True, False):
      expected = ref.apply_chat_template(messages, tokenize=False, add_generation_prompt=gen)
      assert tok.apply_chat_template(messages, add_generation_prompt=gen) == expected
      assert cached.apply_chat_template(messages, add_generation_prompt=gen) == expected
    prompt = tok.apply_chat_template(messages)
    assert prompt.endswith("<|im_start|>assistant\n")
    assert tok.encode(prompt, add_special_tokens=False) == ref.apply_chat_template(
        messages, tokenize=True, add_generation_prompt=True, return_dict=False)


def test_hf_folder_from_save_pretrained(smollm, tmp_path):
  """An HF folder (tokenizer.json + tokenizer_config.json, as save_pretrained writes) loads with
  `tokenizers` alone; generation_config.json's eos ids join the stop set."""
  name, tok, ref, _ = smollm
  ref.save_pretrained(tmp_path)
  (tmp_path / "generation_config.json").write_text(json.dumps({"eos_token_id": [2, 0], "bos_token_id": 1}))
  hf = HFTokenizer.from_folder(tmp_path)
  assert (hf.bos_id, hf.eos_id, hf.pad_id, hf.add_bos) == (tok.bos_id, tok.eos_id, tok.pad_id, tok.add_bos)
  assert hf.eos_ids == (2, 0)
  assert hf.chat_template == tok.chat_template
  for text in TEXTS:
    assert hf.encode(text) == ref.encode(text)


def test_sentencepiece_folder(tmp_path):
  spm = pytest.importorskip("sentencepiece")
  corpus = tmp_path / "corpus.txt"
  corpus.write_text("\n".join(["the quick brown fox jumps over the lazy dog", "Grüße aus Köln",
                               "def f(x): return x + 1", "speculative decoding drafts tokens"] * 50))
  model = tmp_path / "sp"
  spm.SentencePieceTrainer.train(input=str(corpus), model_prefix=str(model), vocab_size=40,
                                 character_coverage=1.0, minloglevel=2)
  folder = tmp_path / "hf"
  folder.mkdir()
  (folder / "tokenizer.model").write_bytes((tmp_path / "sp.model").read_bytes())
  tok = HFTokenizer.from_folder(folder)
  sp = spm.SentencePieceProcessor(model_file=str(folder / "tokenizer.model"))
  assert tok.kind == "sentencepiece" and tok.vocab_size == 40
  assert (tok.bos_id, tok.eos_id, tok.add_bos) == (sp.bos_id(), sp.eos_id(), True)
  text = "the lazy fox decodes"
  assert tok.encode(text) == [sp.bos_id()] + sp.encode(text)
  assert tok.decode(tok.encode(text), skip_special_tokens=True) == text
  again = HFTokenizer.from_folder(tok.save(tmp_path / "saved"))
  assert again.encode(text) == tok.encode(text) and again.eos_ids == tok.eos_ids


# ---------------------------------------------------------------------- errors

def test_missing_and_corrupt_files(tmp_path):
  with pytest.raises(CheckpointError, match="nope.gguf"):
    HFTokenizer.from_gguf(tmp_path / "nope.gguf")
  bad = tmp_path / "bad.gguf"
  bad.write_bytes(b"not a gguf file at all" * 10)
  with pytest.raises(CheckpointError, match="bad.gguf"):
    HFTokenizer.from_gguf(bad)
  with pytest.raises(CheckpointError, match="missing_folder"):
    HFTokenizer.from_folder(tmp_path / "missing_folder")
  empty = tmp_path / "empty"
  empty.mkdir()
  with pytest.raises(CheckpointError, match="neither tokenizer.json nor tokenizer.model"):
    HFTokenizer.from_folder(empty)
  corrupt = tmp_path / "corrupt"
  corrupt.mkdir()
  (corrupt / "tokenizer.json").write_text('{"version": "1.0", "model": ')
  with pytest.raises(CheckpointError, match="tokenizer.json"):
    HFTokenizer.from_folder(corrupt)


def test_truncated_gguf(tmp_path):
  src = _gguf("smollm2-135m-instruct")
  cut = tmp_path / "cut.gguf"
  with open(src, "rb") as f:
    cut.write_bytes(f.read(200_000))      # the header and part of the vocabulary
  with pytest.raises(CheckpointError, match="cut.gguf"):
    HFTokenizer.from_gguf(cut)


def test_corrupt_specjax_file(smollm, tmp_path):
  name, tok, _, _ = smollm
  folder = tok.save(tmp_path / "t")
  (folder / SPECJAX_FILE).write_text("{ not json")
  with pytest.raises(CheckpointError, match=SPECJAX_FILE):
    HFTokenizer.from_folder(folder)
  (folder / SPECJAX_FILE).write_text(json.dumps({"format": 1, "bos_id": 1}))
  with pytest.raises(CheckpointError, match="not a valid specjax tokenizer"):
    HFTokenizer.from_folder(folder)
  (folder / SPECJAX_FILE).write_text(json.dumps({"format": 99}))
  with pytest.raises(CheckpointError, match="format 99"):
    HFTokenizer.from_folder(folder)


def test_missing_packages_name_pip(monkeypatch, tmp_path):
  src = _gguf("smollm2-135m-instruct")
  monkeypatch.setitem(sys.modules, "gguf", None)      # `import gguf` -> ImportError
  with pytest.raises(ImportError, match="pip install gguf"):
    HFTokenizer.from_gguf(src)
  monkeypatch.setitem(sys.modules, "tokenizers", None)
  folder = tmp_path / "f"
  folder.mkdir()
  (folder / "tokenizer.json").write_text("{}")
  with pytest.raises(ImportError, match="pip install tokenizers"):
    HFTokenizer.from_folder(folder)
  folder2 = tmp_path / "g"
  folder2.mkdir()
  (folder2 / "tokenizer.model").write_bytes(b"x")
  monkeypatch.setitem(sys.modules, "sentencepiece", None)
  with pytest.raises(ImportError, match="pip install sentencepiece"):
    HFTokenizer.from_folder(folder2)


def test_missing_jinja2_names_pip(smollm, monkeypatch):
  name, tok, _, _ = smollm
  from specjax.data import hf_tokenizer  # pylint: disable=import-outside-toplevel
  monkeypatch.setattr(hf_tokenizer, "_TEMPLATES", {})
  monkeypatch.setitem(sys.modules, "jinja2", None)
  with pytest.raises(ImportError, match="pip install jinja2"):
    tok.apply_chat_template([{"role": "user", "content": "hi"}])
