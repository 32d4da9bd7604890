"""``python -m specjax.conformance [flags]``: the exactness matrix (:mod:`specjax.conformance.command`)."""
from __future__ import annotations

import sys

from specjax.conformance import command

if __name__ == "__main__":
  sys.exit(command.main(sys.argv))
