"""What the training tasks share: flag parsing with one-line errors and defaults that follow ``--data``.

A task's ``main(argv)`` builds its flags on a private ``flags.FlagValues()`` and hands them to
``run_task`` (:mod:`specjax.cli`) with the function that does the work. A family that trains on
the demo target or on a real one (``--data=real``) leaves the flags whose defaults differ at None
and fills them with :func:`resolve`.
"""
from __future__ import annotations

import types

from absl import flags

from specjax.cli import HELP, UsageError, run_task  # noqa: F401  (the commands use them through common)

flags.disclaim_key_flags()  # flags defined through define() belong to the task module that calls it


def define(fv, kind: str, name: str, default, help_text: str, **kw) -> None:
  """``flags.DEFINE_<kind>(name, default, help_text)`` on ``fv``."""
  getattr(flags, f"DEFINE_{kind}")(name, default, help=help_text, flag_values=fv, **kw)


def define_by_data(fv, defaults: dict, helps: dict) -> None:
  """Flags whose default depends on ``--data``: ``defaults[name] = (kind, demo default, real default)``;
  the help text names both (a real default of None is worked out from ``--target``, see its help)."""
  for name, (kind, demo, real) in defaults.items():
    real_text = "from --target" if real is None else _show(real)
    define(fv, kind, name, None, f"{helps[name]} (default {_show(demo)}; --data=real: {real_text})")


def _show(value) -> str:
  return ",".join(map(str, value)) if isinstance(value, (list, tuple)) else str(value)


def resolve(fv, defaults: dict, real: bool) -> types.SimpleNamespace:
  """Every flag's value, a flag of ``defaults`` left unset taking the demo or the real default."""
  values = fv.flag_values_dict()
  for name, (_, demo, real_default) in defaults.items():
    if values[name] is None:
      values[name] = real_default if real else demo
  return types.SimpleNamespace(**values)


def run_by_data(fv, defaults: dict, demo_flags, real_flags, train_demo, train_real) -> int:
  """``--data=real``: ``train_real(opt)``, else ``train_demo(opt)``; a flag of the other mode is refused."""
  real = fv.data == "real"
  refuse(fv, demo_flags if real else real_flags, f"with --data={fv.data}")
  opt = resolve(fv, defaults, real)
  return train_real(opt) if real else train_demo(opt)


def save_demo_head(head, out, workdir, title: str, report: dict, acceptance) -> int:
  """Saves a head trained on the demo target (bf16), its loss plot, and ``training.json`` with
  ``report`` plus ``acceptance()`` (greedy acceptance of the saved head), which it also prints."""
  import json  # pylint: disable=import-outside-toplevel
  from specjax.models import heads  # pylint: disable=import-outside-toplevel
  from specjax.train import loop  # pylint: disable=import-outside-toplevel
  heads.save_head(head, out, dtype="bfloat16")
  loop.plot_loss(workdir, title=title)
  report["acceptance_greedy"] = acceptance()
  (out / "training.json").write_text(json.dumps(report, indent=2) + "\n")
  print(json.dumps(report, indent=2))
  return 0


def refuse(fv, names, why: str) -> None:
  """A UsageError naming the first of ``names`` given on the command line (a flag that does nothing here)."""
  for name in names:
    if fv[name].present:
      raise UsageError(f"--{name}: not used {why}")
