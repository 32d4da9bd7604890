"""Where specjax keeps what it fetches or converts: one cache folder (``$SPECJAX_CACHE``, default
``~/.cache/specjax``), below every module that reads or writes there."""
from __future__ import annotations

import os
import pathlib


def cache_dir() -> pathlib.Path:
  return pathlib.Path(os.environ.get("SPECJAX_CACHE", pathlib.Path.home() / ".cache" / "specjax"))
