"""Hugging Face hub ids as ``load_pretrained`` sources, through ``huggingface_hub``'s own cache.

    "org/name"                  # the main branch
    "org/name@rev"              # a branch, tag or commit hash
    "org/name/file.gguf"        # one GGUF file of the repo ("org/name@rev/file.gguf"), as HfFileSystem spells it

``resolve`` calls ``huggingface_hub.snapshot_download`` for the files specjax reads (config,
safetensors weights, tokenizer, generation config; a GGUF file only when one is named), so a
checkpoint already in the cache (``hf download org/name``, transformers' ``from_pretrained``) is
read in place and never downloaded twice. The cache folder and offline mode are read from the
environment at each call, with huggingface_hub's precedence (``HF_HUB_CACHE``, else
``HF_HOME/hub``; ``HF_HUB_OFFLINE``): huggingface_hub itself reads them once, when imported.
"""
from __future__ import annotations

import os
import pathlib
import re

from specjax.checkpoint import CheckpointError

# What hf_import, HFTokenizer and checkpoint.load_model read; `model*.safetensors` (not `*`) leaves out
# the duplicate copies some repos carry (Mistral's consolidated.safetensors).
FILES = ("config.json", "model*.safetensors", "model.safetensors.index.json", "tokenizer.json", "tokenizer.model",
         "tokenizer_config.json", "special_tokens_map.json", "generation_config.json", "chat_template.jinja",
         "chat_template.json", "specjax_tokenizer.json", "vocab_subset.npy")

class HubUnavailable(CheckpointError):
  """A hub id that is not in the cache while the hub cannot be asked (offline, or unreachable)."""

  def __init__(self, message: str, source: str, cache: pathlib.Path, local_only: bool):
    super().__init__(message)
    self.source, self.cache, self.local_only = source, cache, local_only


_PART = re.compile(r"[A-Za-z0-9_][\w.-]*")  # a hub owner or repo name (huggingface_hub's validate_repo_id)


def parse(source: str):
  """``(repo_id, revision or None, gguf filename or None)`` when ``source`` reads as a hub id, else None."""
  parts = source.split("/")
  if len(parts) < 2:
    return None
  owner, (name, _, revision) = parts[0], parts[1].partition("@")
  rest = "/".join(parts[2:])
  if rest and not rest.endswith(".gguf"):
    if not revision:
      return None
    revision, rest = f"{revision}/{rest}", ""  # "org/name@refs/pr/3"
  for part in (owner, name):
    if not _PART.fullmatch(part) or ".." in part or "--" in part or len(part) > 96:
      return None
  if not rest and name.endswith(".gguf"):
    return None  # "models/x.gguf" is a local file that is missing, not a repo
  return f"{owner}/{name}", revision or None, rest or None


def cache_folder() -> pathlib.Path:
  """The hub cache huggingface_hub uses, from the environment as it is now."""
  env = os.environ
  folder = env.get("HF_HUB_CACHE") or env.get("HUGGINGFACE_HUB_CACHE")
  if not folder:
    home = env.get("HF_HOME") or os.path.join(env.get("XDG_CACHE_HOME") or os.path.join("~", ".cache"), "huggingface")
    folder = os.path.join(home, "hub")
  return pathlib.Path(os.path.expandvars(os.path.expanduser(folder)))


def offline() -> bool:
  flags = (os.environ.get("HF_HUB_OFFLINE"), os.environ.get("TRANSFORMERS_OFFLINE"))
  return any((f or "").strip().upper() in ("1", "ON", "YES", "TRUE") for f in flags)


def resolve(source: str) -> pathlib.Path:
  """The local snapshot folder (or GGUF file) of hub id ``source``, downloaded unless cached."""
  parsed = parse(source)
  if parsed is None:
    raise CheckpointError(f"{source!r} is not a Hugging Face hub id ('org/name', 'org/name@rev', 'org/name/file.gguf')")
  repo, revision, gguf = parsed
  try:
    from huggingface_hub import constants, snapshot_download  # pylint: disable=import-outside-toplevel
  except ImportError as e:
    raise ImportError(f"hub id {source!r} needs the `huggingface_hub` package: pip install huggingface_hub "
                      "(or pass a local folder)") from e
  cache = cache_folder()
  # an import-time HF_HUB_OFFLINE (or one set on the constants) counts too
  local_only = offline() or bool(getattr(constants, "HF_HUB_OFFLINE", False))
  try:
    folder = pathlib.Path(snapshot_download(
        repo, revision=revision, cache_dir=cache, local_files_only=local_only,
        allow_patterns=[gguf] if gguf else list(FILES)))
  except Exception as e:  # pylint: disable=broad-except  (each huggingface_hub error becomes one line)
    folder = _partial_snapshot(e)
    if folder is None:
      message = _explain(e, source, repo, revision, gguf, cache, local_only)
      if _is(e, *_UNREACHABLE):
        raise HubUnavailable(message, source, cache, local_only) from e
      raise CheckpointError(message) from e
  if gguf:
    if not (folder / gguf).is_file():
      raise CheckpointError(f"hub id {source!r}: {repo} has no file {gguf!r} (snapshot {folder})")
    return folder / gguf
  if not (folder / "config.json").is_file():
    raise CheckpointError(f"hub id {source!r}: no config.json in {repo} (snapshot {folder}); specjax reads HF "
                          f"folders with safetensors weights, or name a GGUF file of the repo: '{repo}/<file>.gguf'")
  return folder


def cached(source: str) -> pathlib.Path | None:
  """The cached snapshot folder of hub id ``source`` (a repo, not a GGUF file), read from the cache's
  layout alone: no network, no download; None when it is not there."""
  parsed = parse(source)
  if parsed is None or parsed[2]:
    return None
  repo, revision = parsed[0], parsed[1] or "main"
  storage = cache_folder() / ("models--" + repo.replace("/", "--"))
  ref = storage / "refs" / revision
  commit = ref.read_text().strip() if ref.is_file() else revision
  folder = storage / "snapshots" / commit
  return folder if (folder / "config.json").is_file() else None


# huggingface_hub's errors (by class name) for a file neither cached nor fetchable right now
_UNREACHABLE = ("LocalEntryNotFoundError", "OfflineModeIsEnabled", "ConnectionError", "TimeoutError",
                "TimeoutException", "ConnectError")


def _partial_snapshot(e: Exception) -> pathlib.Path | None:
  """A cached snapshot huggingface_hub calls incomplete (an optional file such as special_tokens_map.json
  never fetched) is still read: the loaders name any file they need and do not find."""
  path = getattr(e, "snapshot_path", None)
  if _is(e, "IncompleteSnapshotError") and path and pathlib.Path(path).is_dir():
    return pathlib.Path(path)
  return None


def _is(e: Exception, *names: str) -> bool:
  # by name: huggingface_hub has moved its error classes between modules across versions
  return any(c.__name__ in names for c in type(e).__mro__)


def _explain(e, source, repo, revision, gguf, cache, local_only) -> str:
  rev = f" --revision {revision}" if revision else ""
  get = f"`hf download {repo}{' ' + gguf if gguf else ''}{rev}`"
  first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
  if _is(e, "GatedRepoError"):
    return (f"hub id {source!r}: {repo} is gated; accept its terms on huggingface.co, then log in "
            "(`hf auth login` or HF_TOKEN) and load it again")
  if _is(e, "RepositoryNotFoundError"):
    return (f"hub id {source!r}: no repository {repo} on the Hugging Face hub (a typo, or private: log in with "
            "`hf auth login` or set HF_TOKEN), and no local folder of that name")
  if _is(e, "RevisionNotFoundError"):
    return f"hub id {source!r}: {repo} has no revision {revision!r}"
  if _is(e, "HFValidationError"):
    return f"hub id {source!r}: not a valid repository id ({first})"
  if _is(e, *_UNREACHABLE):
    why = "HF_HUB_OFFLINE is set" if local_only else "the hub is unreachable"
    return (f"checkpoint not found: {source!r} is not a local path, and as a Hugging Face hub id it is not in the "
            f"cache {cache} and {why}; download it on a machine with internet ({get}) and copy that cache here "
            "(or point HF_HUB_CACHE at it), or pass a local folder")
  return f"hub id {source!r}: fetching {repo} into {cache} failed: {type(e).__name__}: {first}"
