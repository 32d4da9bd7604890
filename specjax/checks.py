"""A run's inputs checked from the config alone, before anything loads or compiles.

Each check raises ``ValueError`` with one line that names the value and what would be accepted;
``python -m specjax.run`` prints it as ``error: ...`` with exit code 2 (so do
``python -m specjax.bench specbench`` and the tasks that share :func:`check_ranges`). Nothing here
reads weights: a model's context length comes from the registry's declaration
(:mod:`specjax.registry`) or a checkpoint's metadata (:mod:`specjax.preflight`).

* :func:`config_file`: the ``--config=PATH[:ARG]`` file exists (before the flags parse it), and
  :func:`config_error` one line for a config file that does not load;
* :func:`command_line`: ``--config.prompt=`` / ``--config.prompts_file=`` given empty;
* :func:`check_ranges`: every numeric run key in its range (a table, :data:`RANGES`);
* :func:`check_plan`: the ranges and gamma, for ``--dry_run``;
* :func:`check_run`: the ranges, gamma against :data:`GAMMA_MAX` and the models' context,
  max_new_tokens against the context, the prompts file, and prompts that fit the target (a chat
  template for ``chat``, a tokenizer for user prompts), the checkpoints named, the output file;
* :func:`output_file`: a file written at the end of a run can be written.
"""
from __future__ import annotations

import math
import os
import pathlib

# The largest gamma (drafts per round, a tree's depth) a run takes (documented in docs/cli.md): a
# round compiles gamma drafting steps and verify passes at widths 1, 2, 4, ... up to gamma, so a
# larger one costs minutes of compiling for drafts past the 32nd that are rarely all kept.
GAMMA_MAX = 32
# max_new_tokens past this is a mistake whatever the model (its cache would hold a million slots).
MAX_NEW_TOKENS_MAX = 1 << 20
SEED_MAX = 2**32 - 1  # jax.random.PRNGKey and numpy's RandomState take 32-bit seeds


def _in(lo, hi, lo_open=False):
  """A closed (or left-open) interval test and its text."""
  def test(v):
    return (v > lo if lo_open else v >= lo) and (hi is None or v <= hi)
  text = f"{'(' if lo_open else '['}{lo}, {hi if hi is not None else 'inf'}{']' if hi is not None else ')'}"
  return test, text


# key -> (int only, range test, range text, what the key means)
RANGES = {
    "max_new_tokens": (True, *_in(1, MAX_NEW_TOKENS_MAX), "tokens generated per row"),
    "batch_size": (True, *_in(1, None), "rows decoded at once"),
    "prompt_len": (True, *_in(1, None), "tokens of each built-in prompt"),
    "repeats": (True, *_in(1, None), "timed runs of each decoder"),
    "seed": (True, *_in(0, SEED_MAX), "the sampling seed"),
    "eos_id": (True, *_in(-1, None), "-1: the tokenizer's EOS"),
    "max_len": (True, *_in(0, None), "0: what the run needs"),
    "top_k": (True, *_in(0, None), "0: off"),
    "temperature": (False, *_in(0, None), "0: greedy"),
    "top_p": (False, *_in(0, 1, lo_open=True), "1: off"),
    "lenience": (False, *_in(0, 1), "1: exact"),
    "confidence": (False, *_in(0, 1), "the adaptive cut when greedy"),
    "sampled_confidence": (False, *_in(0, 1), "the adaptive cut when sampling; 0: none"),
}
# negative: the default; else in range (Adaptive names the range itself)
NEGATIVE_IS_DEFAULT = ("acceptance_memory", "verify_slope")


def check_ranges(values, prefix: str = "--config.") -> None:
  """Every key of :data:`RANGES` present in ``values`` (a mapping) is a number in its range; the
  message names the flag as ``prefix + key``."""
  for key, (integer, test, text, meaning) in RANGES.items():
    if key not in values:
      continue
    v = values[key]
    kind = "an integer" if integer else "a number"
    if isinstance(v, bool) or not isinstance(v, int if integer else (int, float)) or not math.isfinite(v) \
        or not test(v):
      raise ValueError(f"{prefix}{key}={v!r}: must be {kind} in {text} ({meaning})")
  for key in NEGATIVE_IS_DEFAULT:
    v = values.get(key, -1.0)
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
      raise ValueError(f"{prefix}{key}={v!r}: must be a number (negative: the default)")


def check_gamma(gamma, context: int | None = None, source: str = "", prefix: str = "--config.drafter.") -> None:
  """gamma is an integer in [1, GAMMA_MAX] and a round (root + gamma drafts) fits the context
  with a prompt token before it."""
  if isinstance(gamma, bool) or not isinstance(gamma, int) or not 1 <= gamma <= GAMMA_MAX:
    raise ValueError(f"{prefix}gamma={gamma!r}: must be an integer in [1, {GAMMA_MAX}] (drafts per round, or a "
                     "tree's depth; docs/cli.md says why)")
  if context is not None and gamma + 2 > context:
    raise ValueError(f"{prefix}gamma={gamma}: a round of 1 + {gamma} tokens after a prompt token does not fit the "
                     f"model's context length {context} ({source}); use gamma <= {context - 2}")


def config_file(argv) -> None:
  """The ``--config=PATH[:ARG]`` (or ``--config PATH``) file exists and is a file."""
  args = list(argv)[1:]
  for i, a in enumerate(args):
    if a.startswith("--config="):
      value = a.split("=", 1)[1]
    elif a == "--config" and i + 1 < len(args):
      value = args[i + 1]
    else:
      continue
    path = pathlib.Path(value.split(":", 1)[0]).expanduser()
    if not path.is_file():
      why = "is a directory" if path.is_dir() else "does not exist"
      raise ValueError(f"--config={value}: the config file {path} {why} (configs/*.py lists the shipped ones)")


def _config_arg(argv) -> str:
  args = list(argv)[1:]
  for i, a in enumerate(args):
    if a.startswith("--config="):
      return a.split("=", 1)[1]
    if a == "--config" and i + 1 < len(args):
      return args[i + 1]
  return "configs/smollm2_135m.py"  # specjax.run's default


def config_error(e: BaseException, argv) -> str | None:
  """One line for a config file that does not load (a syntax error, no ``get_config``, or
  ``get_config`` raising: its own message); None when ``e`` is about something else."""
  where = f"--config={_config_arg(argv)}"
  if isinstance(e, SyntaxError):
    return f"{where}: {e.msg} at {e.filename} line {e.lineno}"
  text = str(e)
  if "has no attribute 'get_config'" in text:
    return f"{where}: the file defines no get_config(arg=None) returning the run's ConfigDict"
  if "Error whilst parsing config file" in text:
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return f"{where}: get_config failed: {lines[-1]}"
  return None


def command_line(argv) -> None:
  """``--config.prompt=`` and ``--config.prompts_file=`` given on the command line must say something
  (leave them out for the config's own prompts)."""
  args = list(argv)[1:]
  for i, a in enumerate(args):
    key, eq, value = a.partition("=")
    if not eq and i + 1 < len(args):  # --config.prompt VALUE
      eq, value = "=", args[i + 1]
    if key in ("--config.prompt", "--config.prompts_file") and eq and not value.strip():
      what = "prompt" if key.endswith("prompt") else "prompts file"
      raise ValueError(f"{key} is empty: give the {what} (or leave the flag out for the config's own prompt; "
                       "without any, built-in prompts fit to the model are used)")


def context_of(spec) -> tuple:
  """``(context length, where it comes from)`` of a model spec, from declarations and metadata
  only; ``(None, "")`` when none is known (a random init, a checkpoint not there yet)."""
  from specjax import preflight, registry  # pylint: disable=import-outside-toplevel
  from specjax.checkpoint import CheckpointError  # pylint: disable=import-outside-toplevel
  source = str(dict(spec).get("checkpoint") or "")
  if not source:
    return None, ""
  if source in registry.REGISTRY:
    return registry.CONTEXT_LENGTH.get(source), f"{source}'s registered context length"
  try:
    info = preflight.describe_checkpoint(source)
  except (CheckpointError, OSError, ValueError, KeyError, TypeError):
    return None, ""  # unreadable metadata: loading names what is wrong with it
  return (info.context, info.context_source) if info is not None and info.context else (None, "")


def chat_template_of(spec) -> bool | None:
  """Whether a registered target's tokenizer has a chat template (None: not declared)."""
  from specjax import registry  # pylint: disable=import-outside-toplevel
  return registry.CHAT_TEMPLATE.get(str(dict(spec).get("checkpoint") or ""))


def output_file(path, flag: str) -> None:
  """A file the run will write at its end (``--json_out``, ``--config.output``) can be written: not a
  folder, and its nearest existing parent a folder this process may write in."""
  if not path:
    return
  path = pathlib.Path(str(path)).expanduser()
  if path.is_dir():
    raise ValueError(f"{flag}={path}: is a folder; give a file name")
  parent = path.parent
  while not parent.exists() and parent != parent.parent:
    parent = parent.parent
  if not parent.is_dir():
    raise ValueError(f"{flag}={path}: {parent} is a file, not a folder")
  if not os.access(parent, os.W_OK | os.X_OK) or (path.exists() and not os.access(path, os.W_OK)):
    raise ValueError(f"{flag}={path}: no permission to write there")


def checkpoint_source(source, flag: str) -> None:
  """A checkpoint named in the config is there to load: a registered name, a file or folder, a
  name under specjax/assets, or a Hugging Face hub id (``org/name``, fetched before loading)."""
  from specjax import hub, loading, registry  # pylint: disable=import-outside-toplevel
  source = str(source or "")
  if not source or source in registry.REGISTRY or pathlib.Path(source).expanduser().exists():
    return
  if (loading.ASSETS / source).exists() or hub.parse(source):
    return
  raise ValueError(f"{flag}={source!r}: checkpoint not found: not a registered name ({', '.join(registry.REGISTRY)}), "
                   "a file or folder, a name under specjax/assets, or a hub id (org/name)")


def check_plan(config) -> None:
  """The numeric keys and gamma of a config the dry run plans (no models, no prompts)."""
  check_ranges(config)
  check_gamma((config.get("drafter") or {}).get("gamma", 4))


def check_run(config, gamma: int) -> None:
  """Everything about a normalized run config that can be known before loading: raises one line.
  The context is the smallest of the target's and the drafter checkpoint's (when they state one)."""
  from specjax import prompts as prompts_lib  # pylint: disable=import-outside-toplevel
  check_ranges(config)
  limits = [context_of(config.target), context_of({"checkpoint": config.drafter.get("checkpoint")})]
  limits = [(c, s) for c, s in limits if c]
  context, source = min(limits) if limits else (None, "")
  check_gamma(gamma, context, source)
  checkpoint_source(config.target.get("checkpoint"), "--config.target.checkpoint")
  checkpoint_source(config.drafter.get("checkpoint"), "--config.drafter.checkpoint")
  output_file(config.get("output"), "--config.output")
  items = prompts_lib.user_prompts(config)  # a missing, unreadable, empty or malformed file: an error now
  if context is not None:
    shortest = 1 if items else int(config.prompt_len)
    if shortest + config.max_new_tokens + gamma + 1 > context:
      what = "a 1-token prompt" if items else f"the built-in prompt (prompt_len {shortest})"
      raise ValueError(f"--config.max_new_tokens={config.max_new_tokens}: {what} + max_new_tokens + {gamma + 1} "
                       f"verify slots exceeds the model's context length {context} ({source}); use "
                       f"max_new_tokens <= {context - shortest - gamma - 1}")
  if items and not config.target.get("checkpoint"):
    raise ValueError("--config.prompt / prompts_file need a model with a tokenizer (a checkpoint), not a random "
                     "init; leave them out for random prompt ids")
  if config.get("chat") and chat_template_of(config.target) is False:
    raise ValueError(f"--config.chat=True but {config.target.checkpoint} has no chat template (a base model); "
                     "set --config.chat=False and give a text to continue")
