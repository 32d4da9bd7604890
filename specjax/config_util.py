"""Configs that extend another config file beside them (config files are loaded by path, not import)."""
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
