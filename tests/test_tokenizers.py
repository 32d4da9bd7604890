"""HFTokenizer's folders (an HF save_pretrained folder, SentencePiece, its own saved form) and its
errors. The real models' GGUF tokenizers against transformers' conversion of the same file (ids,
decoding, special tokens, chat templates, saving): tests/test_gguf_tokenizer.py."""
import json
import sys

import pytest

pytest.importorskip("tokenizers", reason="HFTokenizer needs `pip install tokenizers`")

from specjax import gguf_import  # noqa: E402
from specjax.checkpoint import CheckpointError  # noqa: E402
from specjax.data.hf_tokenizer import SPECJAX_FILE, HFTokenizer  # noqa: E402

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


def _gguf(name):
  from specjax import registry  # pylint: disable=import-outside-toplevel
  return registry.gguf_path(name)  # a missing package fails, naming its pip command


@pytest.fixture(scope="module")
def smollm():
  """SmolLM2 only, for the checks one model is enough for: (name, tokenizer, reference, None)."""
  from transformers import AutoTokenizer  # pylint: disable=import-outside-toplevel
  path = _gguf("smollm2-135m-instruct")
  with gguf_import.fast_reader_everywhere():
    ref = AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
  return ("smollm2-135m-instruct", HFTokenizer.from_gguf(path), ref, None)


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
