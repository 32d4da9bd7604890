"""English -> German pairs from the gettext catalogues a Debian-like system ships.

``share/locale/de/LC_MESSAGES/*.mo`` hold (msgid, msgstr) pairs for installed programs: real,
if terse, EnDe translation data that needs no download. Used for T5 (Leviathan's EnDe setting).
"""
from __future__ import annotations

import gettext
import pathlib
import sys

DEFAULT_DIRS = (pathlib.Path(sys.prefix) / "share/locale/de/LC_MESSAGES", pathlib.Path("/usr/share/locale/de/LC_MESSAGES"),
                pathlib.Path("/usr/local/share/locale/de/LC_MESSAGES"))


def catalogue_files(dirs=DEFAULT_DIRS) -> list[pathlib.Path]:
  files = sorted({p for d in map(pathlib.Path, dirs) if d.is_dir() for p in d.glob("*.mo")})
  if not files:
    raise FileNotFoundError(
        "no German gettext catalogues found (looked for *.mo in " + ", ".join(map(str, dirs)) + "); "
        "install some localized packages (e.g. `apt-get install coreutils` with German locales) or pass dirs=")
  return files


def load_pairs(dirs=DEFAULT_DIRS, max_chars: int = 200) -> list[tuple[str, str]]:
  """Deduplicated (english, german) pairs; plural forms and empty/identical entries dropped."""
  pairs: dict[str, str] = {}
  for path in catalogue_files(dirs):
    try:
      with open(path, "rb") as f:
        catalog = gettext.GNUTranslations(f)._catalog  # pylint: disable=protected-access
    except (OSError, UnicodeDecodeError, ValueError):
      continue  # a broken catalogue is skipped, not fatal
    for key, value in catalog.items():
      if not isinstance(key, str) or not key or not value or key == value:
        continue
      if len(key) <= max_chars and len(value) <= max_chars:
        pairs.setdefault(key.strip(), value.strip())
  return sorted(pairs.items())
