"""The EnDe SentencePiece model shared by the trained T5 pair (``specjax/assets/t5_ende/spm``).

Trained here with the ``sentencepiece`` package's trainer (unigram, as T5's vocabulary) on the
English and German sides of the *training* split of :mod:`specjax.data.ende` (held-out catalogues
never seen), with T5's special ids: pad 0 (also the decoder start), EOS 1, UNK 2, no BOS. Byte
fallback keeps any character encodable. ``encode`` appends EOS, as T5's tokenizer does.

  python -c "from specjax.data import sentencepiece_tok as s; s.train_from_catalogues()"   # ~20 s
"""
from __future__ import annotations

import io
import pathlib

from specjax.models.store import ASSETS

ASSET = ASSETS / "t5_ende" / "spm"
VOCAB_SIZE = 4000
PAD_ID, EOS_ID, UNK_ID = 0, 1, 2


def _spm():
  try:
    import sentencepiece  # pylint: disable=import-outside-toplevel
  except ImportError as e:
    raise ImportError("the EnDe tokenizer needs `sentencepiece`: pip install -e '.[real]'") from e
  return sentencepiece


def train(texts, out_dir=ASSET, vocab_size: int = VOCAB_SIZE, seed: int = 0):
  """Trains a unigram model on ``texts`` and saves it as an HF-style tokenizer folder; returns it."""
  if vocab_size < 256 + 8:
    raise ValueError(f"vocab_size={vocab_size} is too small for byte fallback (needs >= 264)")
  spm = _spm()
  texts = [t for t in texts if t.strip()]
  if not texts:
    raise ValueError("no text to train the SentencePiece model on")
  proto = io.BytesIO()
  spm.set_random_generator_seed(seed)
  spm.SentencePieceTrainer.train(
      sentence_iterator=iter(texts), model_writer=proto, vocab_size=vocab_size, model_type="unigram",
      character_coverage=0.9995, byte_fallback=True, pad_id=PAD_ID, eos_id=EOS_ID, unk_id=UNK_ID, bos_id=-1,
      num_threads=1, input_sentence_size=0, shuffle_input_sentence=False, minloglevel=2)
  processor = spm.SentencePieceProcessor(model_proto=proto.getvalue())
  tok = _wrap(processor)
  tok.save(out_dir)
  return tok


def train_from_catalogues(out_dir=ASSET, vocab_size: int = VOCAB_SIZE, seed: int = 0):
  from specjax.data import ende  # pylint: disable=import-outside-toplevel
  pairs = ende.split_pairs()["train"]
  texts = [ende.T5_PREFIX.strip()] + [t for pair in pairs for t in pair]
  return train(texts, out_dir, vocab_size, seed)


def _wrap(processor):
  from specjax.data.hf_tokenizer import HFTokenizer  # pylint: disable=import-outside-toplevel
  return HFTokenizer(backend=processor, bos_id=EOS_ID, eos_id=EOS_ID, pad_id=PAD_ID, eos_ids=(EOS_ID,),
                     add_bos=False, add_eos=True, special_tokens={"eos_token": "</s>", "pad_token": "<pad>",
                                                                  "unk_token": "<unk>"}, unk_id=UNK_ID)


def load(folder=ASSET):
  """The shipped (or a given) EnDe tokenizer as an :class:`~specjax.data.hf_tokenizer.HFTokenizer`."""
  from specjax.data.hf_tokenizer import HFTokenizer  # pylint: disable=import-outside-toplevel
  folder = pathlib.Path(folder)
  if not (folder / "tokenizer.model").is_file():
    raise FileNotFoundError(f"no SentencePiece model at {folder / 'tokenizer.model'}; train it with "
                            "specjax.data.sentencepiece_tok.train_from_catalogues()")
  return HFTokenizer.from_folder(folder)
