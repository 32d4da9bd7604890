"""The exactness matrix: every drafter kind and option x sampling x batch shape, exact or refused.

  python -m specjax.conformance --json_out=exactness.json
  python -m specjax.conformance --wrong_rule=no_q_update      # power: touched cells must fail
  python -m specjax.conformance --configs=eagle --samplings=t1 --rows=5000
  python -m specjax.conformance --imports=my_drafters --kind=mine   # a kind of your own: its declared cases

``python -m specjax.bench exactness`` is the same command: same flags, output and JSON.
"""
from __future__ import annotations

import json
import pathlib

from specjax import cli
from specjax.conformance import matrix


def help_text() -> str:
  """This docstring, then what a cell checks (the matrix's docstring past its first paragraph)."""
  return __doc__.rstrip() + "\n\n" + matrix.__doc__.split("\n\n", 2)[2]


def main(argv) -> int:
  from absl import flags  # pylint: disable=import-outside-toplevel
  fv = flags.FlagValues()
  flags.DEFINE_integer("rows", matrix.ROWS, "samples per sampled cell (one call)", flag_values=fv)
  flags.DEFINE_list("configs", [], "only configurations whose name contains one of these", flag_values=fv)
  flags.DEFINE_list("kind", [], "only these registered drafter kinds (their declared cases)", flag_values=fv)
  flags.DEFINE_list("imports", [], "modules imported first: a user's kinds register there (as run's "
                    "config.imports)", flag_values=fv)
  flags.DEFINE_list("samplings", [], f"only these samplings ({', '.join(matrix.samplings())})", flag_values=fv)
  flags.DEFINE_list("shapes", [], f"only these batch shapes ({', '.join(matrix.SHAPES)})", flag_values=fv)
  flags.DEFINE_enum("wrong_rule", None, matrix.WRONG_RULES, "replace an accept rule: touched exact cells must fail",
                    flag_values=fv)
  flags.DEFINE_boolean("run_lossy", False, "also run lossy cells (allowed) and print their p-values", flag_values=fv)
  flags.DEFINE_float("alpha", matrix.ALPHA, "a sampled cell fails when its p-value is <= this", flag_values=fv)
  flags.DEFINE_boolean("fast_compile", False, "compile with most XLA optimizations off (faster on CPU)",
                       flag_values=fv)
  flags.DEFINE_boolean("list", False, "print the cells and exit", flag_values=fv)
  flags.DEFINE_string("json_out", "", "write the result here", flag_values=fv)
  return cli.run_task(fv, argv, help_text(), "exactness", lambda: _run(fv))


def _run(fv) -> int:
  try:
    for name, known in (("samplings", matrix.samplings()), ("shapes", matrix.SHAPES)):
      bad = [x for x in getattr(fv, name) if x not in known]
      if bad:
        raise ValueError(f"--{name}: unknown {bad}; expected some of {', '.join(known)}")
    import specjax  # pylint: disable=import-outside-toplevel
    specjax.drafters.import_modules(fv.imports)
    cells = matrix.select(fv.configs, fv.samplings, fv.shapes, fv.kind)
    if not cells:
      raise ValueError(f"--configs={','.join(fv.configs)} matches no configuration")
  except (ValueError, ImportError) as e:
    raise cli.UsageError(str(e)) from e
  if fv.list:
    for config, s, shape in cells:
      print(f"{config.name:<40} {s:<11} {shape}")
    return 0
  import jax  # pylint: disable=import-outside-toplevel
  if fv.fast_compile:
    jax.config.update("jax_disable_most_optimizations", True)
  result = matrix.run_matrix(cells, fv.rows, fv.run_lossy, fv.alpha, fv.wrong_rule)
  print(matrix.summary(result))
  for r in result["failed"]:
    print("FAILED:", matrix.format_line(r))
  if fv.json_out:
    pathlib.Path(fv.json_out).write_text(json.dumps(result, indent=2, default=str) + "\n")
    print(f"wrote {fv.json_out}")
  return 1 if result["failed"] else 0
