"""Config helpers: configs that extend another config file beside them (config files are loaded by path,
not import), and the command line's drafter options set aside until the drafter kind is known."""
from __future__ import annotations

import importlib.util
import pathlib


def sibling_config(config_file: str, name: str = "demo", arg: str | None = None):
  """``get_config(arg)`` of ``<name>.py`` in the folder of ``config_file``."""
  path = pathlib.Path(config_file).with_name(f"{name}.py")
  spec = importlib.util.spec_from_file_location(f"specjax_config_{name}", path)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module.get_config(arg)


def split_drafter_overrides(argv) -> tuple[list, dict]:
  """``(argv without them, {option: text})``: the ``--config.drafter.OPTION=VALUE`` arguments, which
  :func:`specjax.experiment.apply_drafter_overrides` applies once the kind (and a user module defining it) is known."""
  rest, overrides = [], {}
  for arg in argv:
    key, sep, value = arg.partition("=")
    if key.startswith("--config.drafter.") and key.count(".") == 2 and sep:
      overrides[key[len("--config.drafter."):]] = value
    else:
      rest.append(arg)
  return rest, overrides
