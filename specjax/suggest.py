"""Error-message help shared by every layer (a leaf module: it imports nothing of specjax)."""
from __future__ import annotations

import difflib


def did_you_mean(name, choices) -> str:
  """`` (did you mean 'x'?)`` for the closest of ``choices`` to a misspelt ``name``, else ''."""
  close = difflib.get_close_matches(str(name), list(choices), n=1)
  return f" (did you mean {close[0]!r}?)" if close else ""
