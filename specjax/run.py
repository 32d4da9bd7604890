"""``python -m specjax.run --config=configs/X.py``: generate, measure, compare with the formula.

Runs the autoregressive baseline and speculative decoding on the same prompts in one process,
times both after a compile run, prints generated text and statistics, and (``--json_out``) writes
a JSON summary. ``--dry_run`` plans a config with abstract shapes instead (specjax.dryrun). The
config layout and everything a run does: :mod:`specjax.experiment`. Errors in the config or the
inputs (a run too big for this machine's memory, prompts past the model's context) print as one
line ``error: ...`` with exit code 2 (``--verbose`` for the traceback).

``--config.prompt`` and ``--config.prompts_file`` given together on the command line are an
error; either one given there replaces the other's value from the config file.

Compiled programs persist under ``$SPECJAX_CACHE/jax`` (``~/.cache/specjax/jax``), so a second run
of the same command skips most of XLA's work (``--nocompilation_cache``: off; a
``JAX_COMPILATION_CACHE_DIR`` already set is used as it is).
"""
from __future__ import annotations

import functools
import importlib.util
import json
import logging
import os
import pathlib
import sys

from absl import app, flags
from ml_collections import config_flags

from specjax.config_util import split_drafter_overrides

_DEFAULT_CONFIG = pathlib.Path(__file__).parent.parent / "configs" / "smollm2_135m.py"


def _one_line(e: BaseException) -> str:
  text = str(e).replace("\\n", " ").replace("\\'", "'")
  text = " ".join(text.split())
  while len(text) > 1 and text[0] == text[-1] and text[0] in "'\"":  # KeyError's repr, maybe quoted twice
    text = text[1:-1]
  return text or type(e).__name__


def _bad_override(e: BaseException):
  """A ``--config.KEY=`` override the config does not have: one line, exit code 2."""
  from specjax.experiment import MOVED  # pylint: disable=import-outside-toplevel
  text = _one_line(e)
  if " " in text:  # ml_collections' own message (a close key: "did you mean")
    print(f"error: bad config override: {text}", file=sys.stderr)
  elif text in MOVED:
    print(f"error: config key {text!r} is now --config.{MOVED[text]}", file=sys.stderr)
  else:
    print(f"error: the config has no key {text!r} to override (the command line sets only keys the config "
          "file defines; --config.drafter.kind=KIND brings KIND's options)", file=sys.stderr)
  sys.exit(2)


# the drafter's options are set once its kind is known (a user module may define it): experiment.apply_drafter_overrides
sys.argv[:], _DRAFTER_OVERRIDES = split_drafter_overrides(sys.argv)
try:  # config_flags applies the --config.KEY overrides while defining the flag
  _CONFIG = config_flags.DEFINE_config_file("config", str(_DEFAULT_CONFIG), "experiment config file")
except (AttributeError, KeyError, TypeError, ValueError) as _e:
  _bad_override(_e)
_JSON_OUT = flags.DEFINE_string("json_out", None, "write the summary JSON here")
_DRY_RUN = flags.DEFINE_bool("dry_run", False, "lower with abstract shapes on a fake mesh; no weights")
_VERBOSE = flags.DEFINE_bool("verbose", False, "print the full traceback of an error")
_COMPILATION_CACHE = flags.DEFINE_bool("compilation_cache", True, "keep compiled programs under $SPECJAX_CACHE/jax "
                                       "so the next run of the same command starts faster")


def _given(key: str) -> bool:
  """Whether ``--config.KEY`` is on the command line (not only the config file's value)."""
  return any(a.split("=", 1)[0] == f"--config.{key}" for a in sys.argv[1:])


def _choose_prompts(config) -> None:
  """The command line's prompt or prompts_file wins over the other's value from the config file."""
  if _given("prompt") and _given("prompts_file"):
    raise ValueError("give --config.prompt or --config.prompts_file, not both (a prompts file can hold the "
                     "prompt as one more line)")
  if _given("prompt") and "prompts_file" in config:
    config.prompts_file = ""
  if _given("prompts_file") and "prompt" in config:
    config.prompt = ""


def _setup_jax() -> None:
  """CLI-only JAX settings: the persistent compilation cache, and no backend-probe noise."""
  import jax  # pylint: disable=import-outside-toplevel
  if _COMPILATION_CACHE.value and not jax.config.jax_compilation_cache_dir:
    from specjax.paths import cache_dir  # pylint: disable=import-outside-toplevel
    jax.config.update("jax_compilation_cache_dir", str(cache_dir() / "jax"))
    # the default (1 s) skips most programs of a small model; on a few CPU cores they add up
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.1)
  if not os.environ.get("JAX_PLATFORMS") and importlib.util.find_spec("libtpu") is None:
    # without libtpu no TPU can be used: jax's failed probe for one is noise, not news
    logging.getLogger("jax._src.xla_bridge").addFilter(
        lambda record: not record.getMessage().startswith("Unable to initialize backend 'tpu'"))


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments: {argv[1:]}")
  import specjax  # pylint: disable=import-outside-toplevel
  from specjax import experiment  # pylint: disable=import-outside-toplevel
  config = _CONFIG.value
  _setup_jax()
  try:
    experiment.apply_drafter_overrides(config, _DRAFTER_OVERRIDES)
    _choose_prompts(config)
    if _DRY_RUN.value:
      from specjax import dryrun  # pylint: disable=import-outside-toplevel
      result = dryrun.dry_run(config)
      print(dryrun.format_table(result))
    else:
      if config.get("distributed", False):
        specjax.sharding.initialize_distributed()
      result = experiment.run(config, outputs=experiment.print_outputs,
                              report=functools.partial(experiment.print_report, text=False))
      result["config"] = pathlib.Path(sys.argv[0]).name
  except (ValueError, TypeError, FileNotFoundError, ImportError) as e:
    if _VERBOSE.value:
      raise
    print(f"error: {_one_line(e)}", file=sys.stderr)
    sys.exit(2)
  if _JSON_OUT.value:
    pathlib.Path(_JSON_OUT.value).write_text(json.dumps(result, indent=2, default=str) + "\n")
    print(f"wrote {_JSON_OUT.value}")


def _parse_flags(argv):
  """absl's parser, with a bad ``--config.X`` override (a misspelt key) as one line, exit code 2."""
  try:
    return flags.FLAGS(argv)
  except (flags.Error, AttributeError, KeyError, ValueError, TypeError) as e:
    _bad_override(e)


if __name__ == "__main__":
  app.run(main, flags_parser=_parse_flags)
