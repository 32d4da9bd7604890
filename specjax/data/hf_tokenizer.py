"""A checkpoint's own tokenizer, through maintained libraries: `tokenizers` (or `sentencepiece`).

    tok = HFTokenizer.from_gguf(path)        # built from the GGUF's tokenizer metadata (gguf + tokenizers)
    tok.save("cache/smollm2")                # tokenizer.json + specjax_tokenizer.json
    tok = HFTokenizer.from_folder("cache/smollm2")   # needs only `tokenizers`: fast
    ids = tok.encode("def f(x):")            # BOS prepended when the model expects it (tok.add_bos)
    prompt = tok.apply_chat_template([{"role": "user", "content": "Hi"}])   # jinja2, as transformers

Nothing here tokenizes by hand. `from_gguf` reads the file's vocabulary, merges, token types and
special ids with `gguf` and builds the `tokenizers.Tokenizer` they describe
(`specjax.data.gguf_tokenizer`: the tokenizer transformers' GGUF conversion builds, without
transformers). Encoding and decoding need only `tokenizers`, chat templates only `jinja2`.

Stop tokens (`eos_ids`): the EOS id first, then what the source says ends a generation: an HF
folder's `generation_config.json` `eos_token_id`; for a GGUF, llama.cpp's end-of-generation rule
(its `eot`/`eom` ids, and the tokens it recognises by name such as `<end_of_turn>`, `<|im_end|>`,
`<|endoftext|>`), so SmolLM2 stops on <|im_end|> (2) and <|endoftext|> (0), Gemma 3 on <eos> (1)
and <end_of_turn> (106).
"""
from __future__ import annotations

import dataclasses
import json
import pathlib
from typing import Any

from specjax.checkpoint import CheckpointError
from specjax.data.tokenizer import require_package as _require

SPECJAX_FILE = "specjax_tokenizer.json"
FORMAT_VERSION = 1
_SPECIAL_NAMES = ("bos_token", "eos_token", "unk_token", "pad_token")


def _tokenizers():
  return _require("tokenizers", "tokenizers", "HFTokenizer")


@dataclasses.dataclass(frozen=True, eq=False)
class HFTokenizer:
  """A pretrained model's tokenizer; satisfies `specjax.data.tokenizer.Tokenizer`.

  `backend` is a `tokenizers.Tokenizer` (or, for a folder with only `tokenizer.model`, a
  `sentencepiece.SentencePieceProcessor`). `encode` adds BOS/EOS exactly when `add_bos`/`add_eos`
  say so, as transformers' `tokenizer.encode(text)` does; special-token strings in the text
  (`<|im_end|>`) become their ids. `decode` keeps special tokens unless told otherwise, as
  transformers' `decode` does.
  """
  backend: Any
  bos_id: int
  eos_id: int
  pad_id: int
  eos_ids: tuple[int, ...]
  add_bos: bool
  add_eos: bool = False
  chat_template: str | None = None
  special_tokens: dict = dataclasses.field(default_factory=dict)   # bos_token/eos_token/... -> str, for templates
  unk_id: int | None = None

  # ------------------------------------------------------------------ protocol

  @property
  def kind(self) -> str:
    return "sentencepiece" if _is_sentencepiece(self.backend) else "tokenizers"

  @property
  def vocab_size(self) -> int:
    if self.kind == "sentencepiece":
      return int(self.backend.get_piece_size())
    return int(self.backend.get_vocab_size(with_added_tokens=True))

  def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
    if self.kind == "sentencepiece":
      ids = list(self.backend.encode(text))
      if add_special_tokens:
        ids = [self.bos_id] * self.add_bos + ids + [self.eos_id] * self.add_eos
      return ids
    # the post-processor (set in __post_init__ from add_bos/add_eos) adds BOS/EOS
    return list(self.backend.encode(text, add_special_tokens=add_special_tokens).ids)

  def decode(self, ids, skip_special_tokens: bool = False) -> str:
    ids = [int(i) for i in ids]
    if self.kind == "sentencepiece":
      if skip_special_tokens:
        ids = [i for i in ids if not self.backend.is_control(i)]
      return self.backend.decode(ids)
    return self.backend.decode(ids, skip_special_tokens=skip_special_tokens)

  def token_to_id(self, token: str) -> int | None:
    if self.kind == "sentencepiece":
      i = self.backend.piece_to_id(token)
      return None if i == self.backend.unk_id() and token != self.backend.id_to_piece(i) else int(i)
    return self.backend.token_to_id(token)

  def id_to_token(self, i: int) -> str | None:
    if self.kind == "sentencepiece":
      return self.backend.id_to_piece(int(i))
    return self.backend.id_to_token(int(i))

  def __post_init__(self):
    object.__setattr__(self, "eos_ids", tuple(int(i) for i in self.eos_ids))
    if self.kind == "tokenizers":
      _set_post_processor(self.backend, self.add_bos, self.add_eos, self.bos_id, self.eos_id)

  # ------------------------------------------------------------------ chat

  def apply_chat_template(self, messages: list[dict], add_generation_prompt: bool = True,
                          chat_template: str | None = None, **kwargs) -> str:
    """The prompt string the chat template renders, exactly as transformers'
    `apply_chat_template(messages, tokenize=False, add_generation_prompt=...)`. Tokenize it with
    `encode(prompt, add_special_tokens=False)` (the template writes any BOS itself)."""
    template = chat_template or self.chat_template
    if not template:
      raise ValueError("this tokenizer has no chat template (a base model?); pass chat_template=...")
    if not messages:
      raise ValueError("apply_chat_template needs at least one message")
    messages = [{k: v for k, v in dict(m).items() if v is not None} for m in messages]
    context = {**self.special_tokens, **kwargs}
    return _compile_template(template).render(messages=messages, tools=None, documents=None,
                                              add_generation_prompt=add_generation_prompt, **context)

  # ------------------------------------------------------------------ constructors

  @classmethod
  def from_gguf(cls, path, reader=None) -> "HFTokenizer":
    """Builds the tokenizer a GGUF file describes from its metadata (needs `gguf` and `tokenizers`;
    save() the result to load it later with `tokenizers` alone). ``reader``: the file already
    parsed (``specjax.gguf_import.open_reader``), so a conversion parses it once."""
    from specjax.data import gguf_tokenizer  # pylint: disable=import-outside-toplevel
    _tokenizers()
    return cls(**gguf_tokenizer.load(path, reader))

  @classmethod
  def from_folder(cls, folder) -> "HFTokenizer":
    """A folder written by `save`, or an HF model folder (tokenizer.json + tokenizer_config.json,
    or tokenizer.model for sentencepiece; generation_config.json adds stop ids)."""
    folder = pathlib.Path(folder)
    if not folder.is_dir():
      raise CheckpointError(f"tokenizer folder not found: {folder}")
    tok_json, sp_model = folder / "tokenizer.json", folder / "tokenizer.model"
    if tok_json.is_file():
      tk = _tokenizers()
      try:
        backend = tk.Tokenizer.from_file(str(tok_json))
      except Exception as e:
        raise CheckpointError(f"cannot load {tok_json}: {e}") from e
    elif sp_model.is_file():
      spm = _require("sentencepiece", "sentencepiece", f"HFTokenizer.from_folder ({sp_model})")
      backend = spm.SentencePieceProcessor()
      try:
        backend.load(str(sp_model))
      except Exception as e:
        raise CheckpointError(f"cannot load sentencepiece model {sp_model}: {e}") from e
    else:
      raise CheckpointError(f"{folder} has neither tokenizer.json nor tokenizer.model")

    ours = folder / SPECJAX_FILE
    if ours.is_file():
      meta = _read_json(ours)
      try:
        if meta.get("format") != FORMAT_VERSION:
          raise KeyError(f"format {meta.get('format')!r}, expected {FORMAT_VERSION}")
        return cls(backend=backend, bos_id=meta["bos_id"], eos_id=meta["eos_id"], pad_id=meta["pad_id"],
                   eos_ids=tuple(meta["eos_ids"]), add_bos=meta["add_bos"], add_eos=meta["add_eos"],
                   chat_template=meta.get("chat_template"), special_tokens=dict(meta.get("special_tokens", {})),
                   unk_id=meta.get("unk_id"))
      except (KeyError, TypeError) as e:
        raise CheckpointError(f"{ours} is not a valid specjax tokenizer file: {e}") from e
    return cls._from_hf_config(backend, folder)

  @classmethod
  def _from_hf_config(cls, backend, folder: pathlib.Path) -> "HFTokenizer":
    config = _read_json(folder / "tokenizer_config.json") if (folder / "tokenizer_config.json").is_file() else {}
    smap = _read_json(folder / "special_tokens_map.json") if (folder / "special_tokens_map.json").is_file() else {}
    gen = _read_json(folder / "generation_config.json") if (folder / "generation_config.json").is_file() else {}
    sp = _is_sentencepiece(backend)

    def lookup(token):
      if token is None:
        return None
      if sp:
        i = backend.piece_to_id(token)
        return int(i) if backend.id_to_piece(i) == token else None
      return backend.token_to_id(token)

    specials, ids = {}, {}
    for name in _SPECIAL_NAMES:
      token = _token_content(config.get(name, smap.get(name)))
      if token is not None:
        specials[name], ids[name] = token, lookup(token)
    if sp:   # the model file names its own specials
      for name, fn in (("bos_token", backend.bos_id), ("eos_token", backend.eos_id),
                       ("unk_token", backend.unk_id), ("pad_token", backend.pad_id)):
        if ids.get(name) is None and fn() >= 0:
          specials[name], ids[name] = backend.id_to_piece(fn()), int(fn())
    gen_eos = gen.get("eos_token_id")
    gen_eos = [gen_eos] if isinstance(gen_eos, int) else list(gen_eos or [])
    eos_id = ids.get("eos_token") if ids.get("eos_token") is not None else (gen_eos[0] if gen_eos else None)
    bos_id = ids.get("bos_token") if ids.get("bos_token") is not None else gen.get("bos_token_id")
    if eos_id is None:
      raise CheckpointError(f"{folder}: no eos token in tokenizer_config.json / special_tokens_map.json / "
                            "generation_config.json")
    if "add_bos_token" in config:
      add_bos = bool(config["add_bos_token"]) and bos_id is not None
    elif sp:
      add_bos = bos_id is not None   # transformers' sentencepiece (Llama/Gemma) tokenizers default to BOS
    else:  # keep what tokenizer.json's post-processor does
      with_sp, without = (backend.encode("a", add_special_tokens=f).ids for f in (True, False))
      add_bos = bos_id is not None and len(with_sp) > len(without) and with_sp[0] == bos_id
    add_eos = bool(config.get("add_eos_token", False))
    if not sp and "add_bos_token" not in config and "add_eos_token" not in config:
      with_sp, without = (backend.encode("a", add_special_tokens=f).ids for f in (True, False))
      add_eos = len(with_sp) > len(without) and with_sp[-1] == eos_id
    pad_id = ids.get("pad_token")
    return cls(backend=backend, bos_id=-1 if bos_id is None else int(bos_id), eos_id=int(eos_id),
               pad_id=int(eos_id) if pad_id is None else int(pad_id), eos_ids=_unique([eos_id, *gen_eos]),
               add_bos=add_bos, add_eos=add_eos, chat_template=_chat_template(config, folder),
               special_tokens=specials, unk_id=ids.get("unk_token"))

  def save(self, folder) -> pathlib.Path:
    """Writes tokenizer.json (tokenizer.model for a sentencepiece backend) + specjax_tokenizer.json."""
    folder = pathlib.Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    if self.kind == "sentencepiece":
      (folder / "tokenizer.model").write_bytes(self.backend.serialized_model_proto())
    else:
      self.backend.save(str(folder / "tokenizer.json"))
    meta = {"format": FORMAT_VERSION, "bos_id": self.bos_id, "eos_id": self.eos_id, "pad_id": self.pad_id,
            "unk_id": self.unk_id, "eos_ids": list(self.eos_ids), "add_bos": self.add_bos,
            "add_eos": self.add_eos, "special_tokens": self.special_tokens, "chat_template": self.chat_template}
    (folder / SPECJAX_FILE).write_text(json.dumps(meta, indent=1, ensure_ascii=False), encoding="utf-8")
    return folder


# ---------------------------------------------------------------------- helpers

def _is_sentencepiece(backend) -> bool:
  return type(backend).__name__ == "SentencePieceProcessor"


def _set_post_processor(backend, add_bos: bool, add_eos: bool, bos_id: int, eos_id: int):
  """BOS/EOS around the text, the template transformers' `update_post_processor` writes."""
  from tokenizers import processors  # pylint: disable=import-outside-toplevel
  bos, eos = backend.id_to_token(bos_id) if add_bos else None, backend.id_to_token(eos_id) if add_eos else None
  if add_bos and bos is None or add_eos and eos is None:
    raise CheckpointError(f"bos id {bos_id} / eos id {eos_id} is not in the vocabulary")
  single = f"{(bos + ':0 ') if add_bos else ''}$A:0{(' ' + eos + ':0') if add_eos else ''}"
  pair = f"{single}{(' ' + bos + ':1') if add_bos else ''} $B:1{(' ' + eos + ':1') if add_eos else ''}"
  specials = ([(bos, bos_id)] if add_bos else []) + ([(eos, eos_id)] if add_eos else [])
  backend.post_processor = processors.TemplateProcessing(single=single, pair=pair, special_tokens=specials)


def _read_json(path: pathlib.Path) -> dict:
  try:
    value = json.loads(path.read_text(encoding="utf-8"))
  except (OSError, ValueError) as e:
    raise CheckpointError(f"cannot read {path}: {e}") from e
  if not isinstance(value, dict):
    raise CheckpointError(f"{path} does not hold a JSON object")
  return value


def _token_content(value):
  if isinstance(value, dict):   # {"content": ...} or {"__type": "AddedToken", "content": ...}
    value = value.get("content")
  return value if isinstance(value, str) else None


def _chat_template(config: dict, folder: pathlib.Path) -> str | None:
  jinja_file = folder / "chat_template.jinja"
  if jinja_file.is_file():
    return jinja_file.read_text(encoding="utf-8")
  template = config.get("chat_template")
  if template is None and (folder / "chat_template.json").is_file():
    template = _read_json(folder / "chat_template.json").get("chat_template")
  if isinstance(template, list):   # named templates: [{"name": "default", "template": ...}, ...]
    named = {t.get("name"): t.get("template") for t in template if isinstance(t, dict)}
    template = named.get("default")
  return template if isinstance(template, str) else None


def _unique(ids) -> tuple[int, ...]:
  return tuple(dict.fromkeys(int(i) for i in ids if i is not None))


_TEMPLATES: dict = {}


def _compile_template(template: str):
  """The jinja2 environment transformers renders chat templates in (utils/chat_template_utils.py):
  sandboxed, trim_blocks + lstrip_blocks, loopcontrols, its tojson / raise_exception / strftime_now."""
  if template in _TEMPLATES:
    return _TEMPLATES[template]
  jinja2 = _require("jinja2", "jinja2", "HFTokenizer.apply_chat_template")
  import datetime  # pylint: disable=import-outside-toplevel
  import jinja2.ext  # pylint: disable=import-outside-toplevel,redefined-outer-name
  import jinja2.nodes  # pylint: disable=import-outside-toplevel
  from jinja2.sandbox import ImmutableSandboxedEnvironment  # pylint: disable=import-outside-toplevel

  class Generation(jinja2.ext.Extension):
    """`{% generation %}...{% endgeneration %}` (assistant-mask markers) renders its body."""
    tags = {"generation"}

    def parse(self, parser):
      lineno = next(parser.stream).lineno
      body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
      return jinja2.nodes.CallBlock(self.call_method("_body"), [], [], body).set_lineno(lineno)

    def _body(self, caller):
      return caller()

  def raise_exception(message):
    raise jinja2.exceptions.TemplateError(message)

  def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

  env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                      extensions=[Generation, jinja2.ext.loopcontrols])
  env.filters["tojson"] = tojson
  env.globals["raise_exception"] = raise_exception
  env.globals["strftime_now"] = lambda fmt: datetime.datetime.now().strftime(fmt)
  compiled = _TEMPLATES[template] = env.from_string(template)
  return compiled
