"""``python -m specjax.run --config=configs/X.py``: generate, measure, compare with the formula.

Runs the autoregressive baseline and speculative decoding on the same prompts in one process,
times both after a compile run, prints generated text and statistics, and (``--json_out``) writes
a JSON summary. ``--dry_run`` plans a config with abstract shapes instead (specjax.dryrun). The
config layout and everything a run does: :mod:`specjax.experiment`. Errors in the config or the
inputs print as one line ``error: ...`` with exit code 2 (``--verbose`` for the traceback).
"""
from __future__ import annotations

import json
import pathlib
import sys

from absl import app, flags
from ml_collections import config_flags

_DEFAULT_CONFIG = pathlib.Path(__file__).parent.parent / "configs" / "demo.py"


def _one_line(e: BaseException) -> str:
  text = str(e).replace("\\n", " ").replace("\\'", "'")
  text = " ".join(text.split())
  return (text[1:-1] if len(text) > 1 and text[0] == text[-1] and text[0] in "'\"" else text) or type(e).__name__


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
          "file defines; a drafter kind's options are in configs whose drafter section is of that kind, "
          "e.g. configs/eagle_demo.py for drafter.tree)", file=sys.stderr)
  sys.exit(2)


try:  # config_flags applies the --config.KEY overrides while defining the flag
  _CONFIG = config_flags.DEFINE_config_file("config", str(_DEFAULT_CONFIG), "experiment config file")
except (AttributeError, KeyError, TypeError, ValueError) as _e:
  _bad_override(_e)
_JSON_OUT = flags.DEFINE_string("json_out", None, "write the summary JSON here")
_DRY_RUN = flags.DEFINE_bool("dry_run", False, "lower with abstract shapes on a fake mesh; no weights")
_VERBOSE = flags.DEFINE_bool("verbose", False, "print the full traceback of an error")


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments: {argv[1:]}")
  import specjax  # pylint: disable=import-outside-toplevel
  from specjax import experiment  # pylint: disable=import-outside-toplevel
  config = _CONFIG.value
  try:
    if _DRY_RUN.value:
      from specjax import dryrun  # pylint: disable=import-outside-toplevel
      result = dryrun.dry_run(config)
      print(dryrun.format_table(result))
    else:
      if config.get("distributed", False):
        specjax.sharding.initialize_distributed()
      result = experiment.run(config, report=experiment.print_report)
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
