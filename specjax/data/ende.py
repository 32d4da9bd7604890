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


# Catalogues held out for evaluation (T5 EnDe, python -m specjax.train t5_ende): command-line tools' messages,
# about 5% of the pairs. A string that any held-out catalogue contains is dropped from training too
# (gnulib messages recur across programs), so every evaluation source is unseen in training.
HELD_OUT_CATALOGUES = ("diffutils", "grep", "make", "psmisc", "sed", "tar", "wget", "xz")
T5_PREFIX = "translate English to German: "
CONTEXT_SEPARATOR = "\x04"


def load_pairs_by_file(dirs=DEFAULT_DIRS, max_chars: int = 200) -> dict[str, list[tuple[str, str]]]:
  """``{catalogue stem: sorted (english, german) pairs}``, each catalogue deduplicated on its own."""
  out = {}
  for path in catalogue_files(dirs):
    for en, de in _catalogue_pairs(path, max_chars):
      out.setdefault(path.stem, {}).setdefault(en, de)
  return {stem: sorted(p.items()) for stem, p in sorted(out.items())}


def _catalogue_pairs(path, max_chars: int) -> list[tuple[str, str]]:
  try:
    with open(path, "rb") as f:
      catalog = gettext.GNUTranslations(f)._catalog  # pylint: disable=protected-access
  except (OSError, UnicodeDecodeError, ValueError):
    return []  # a broken catalogue is skipped, not fatal
  pairs = []
  for key, value in catalog.items():
    if not isinstance(key, str) or not key or not value:
      continue
    # gettext keys a msgctxt entry as "context\x04msgid": the context is a note to translators
    # (GTK, KDE, LibreOffice), not English to translate.
    key, value = key.rpartition(CONTEXT_SEPARATOR)[2].strip(), value.strip()
    if key == value:
      continue
    if key and value and len(key) <= max_chars and len(value) <= max_chars:
      pairs.append((key, value))
  return pairs


def split_pairs(dirs=DEFAULT_DIRS, held_out=HELD_OUT_CATALOGUES, max_chars: int = 200) -> dict:
  """``{"train": pairs, "held_out": pairs}`` split by catalogue file; no held-out English in train."""
  by_file = load_pairs_by_file(dirs, max_chars)
  missing = sorted(set(held_out) - set(by_file))
  if missing:
    raise ValueError(f"held-out catalogues {missing} not found among {len(by_file)} catalogues ({sorted(by_file)[:8]}...)")
  held = {}
  for stem in held_out:
    for en, de in by_file[stem]:
      held.setdefault(en, de)
  train = {}
  for stem, pairs in by_file.items():
    if stem in held_out:
      continue
    for en, de in pairs:
      if en not in held:
        train.setdefault(en, de)
  return {"train": sorted(train.items()), "held_out": sorted(held.items())}
