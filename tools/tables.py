"""Rewrite the measured tables in README.md and docs/*.md from the benchmark JSON files they cite.

  python tools/tables.py            # rewrite every table region in place
  python tools/tables.py --check    # exit 1 if a file differs from what this would write
  python tools/tables.py --list     # the table names and the files each one reads

A table region is the text between ``<!-- table:NAME -->`` and ``<!-- /table:NAME -->`` in README.md
or a docs/*.md page; everything between the two markers is replaced by table NAME, rendered from
its JSON files (``benchmarks/**/*.json`` and the ``training.json`` records beside shipped weights)
and followed by links to those files. Text outside the markers is never touched, so the prose
around a table says what to read in it and the numbers themselves only ever come from here.
``benchmarks/runs/*.json`` (written by ``python -m specjax.run --json_out=...``) each add a row
to the README's summary table. Reads JSON only: no JAX, no models.
"""
from __future__ import annotations

import argparse
import difflib
import os
import pathlib
import re
import sys

sys.path.insert(1, str(pathlib.Path(__file__).resolve().parent.parent))  # this repository's specjax (labels)

import table_defs  # noqa: F401  (registers its tables)
import table_defs_owntext  # noqa: F401  (registers its tables)
import table_defs_reproductions  # noqa: F401  (registers its tables)
from table_kit import TABLES, Sources, TableError

ROOT = pathlib.Path(__file__).resolve().parent.parent  # the repository (this file: tools/tables.py)
REGION = re.compile(r"<!-- table:([A-Za-z0-9_-]+) -->\n(.*?)<!-- /table:\1 -->", re.S)
OPEN = re.compile(r"<!-- table:([A-Za-z0-9_-]+) -->")
CLOSE = re.compile(r"<!-- /table:([A-Za-z0-9_-]+) -->")


# ---------------------------------------------------------------------------------------------- rendering

def render(name: str, root: pathlib.Path, page_dir: pathlib.Path) -> str:
  """Table ``name`` as markdown, its links relative to ``page_dir`` (the folder of the page it goes in)."""
  if name not in TABLES:
    raise TableError(f"unknown table {name!r}; known: {', '.join(sorted(TABLES))}")
  src = Sources(root)
  tab = TABLES[name][0](src)
  rel = lambda p: pathlib.Path(os.path.relpath(root / p, page_dir)).as_posix()  # noqa: E731
  links = lambda text: re.sub(r"\]\(@/(.*?)\)", lambda m: f"]({rel(m.group(1))})", str(text))  # noqa: E731
  cells = lambda row: "| " + " | ".join(links(c).replace("|", "\\|") for c in row) + " |"  # noqa: E731
  lines = [cells(tab.header), "|" + "---|" * len(tab.header), *map(cells, tab.rows)]
  data = ", ".join(f"[{p}]({rel(p)})" for p in src.used)
  lines += ["", " ".join(filter(None, [links(tab.note), f"Data: {data}." if tab.data_line else ""]))]
  return "\n".join(lines) + "\n\n"


def rewrite(text: str, root: pathlib.Path, page_dir: pathlib.Path, where: str = "") -> str:
  opened, closed = OPEN.findall(text), CLOSE.findall(text)
  if opened != closed:
    raise TableError(f"{where}: table markers do not pair up (opened {opened}, closed {closed})")
  return REGION.sub(lambda m: f"<!-- table:{m.group(1)} -->\n{render(m.group(1), root, page_dir)}"
                              f"<!-- /table:{m.group(1)} -->", text)


def pages(root: pathlib.Path) -> list[pathlib.Path]:
  return [p for p in [root / "README.md", *sorted((root / "docs").glob("*.md"))] if p.is_file()]


def main(argv) -> int:
  parser = argparse.ArgumentParser(prog=argv[0] if argv else "tables", description=__doc__.split("\n")[0])
  parser.add_argument("--check", action="store_true", help="exit 1 if a file differs from what would be written")
  parser.add_argument("--list", action="store_true", help="list the tables and the files they read")
  parser.add_argument("--root", default=str(ROOT), help="repository root (README.md, docs/, benchmarks/)")
  args = parser.parse_args(argv[1:])
  root = pathlib.Path(args.root).resolve()
  if args.list:
    for name, (fn, about) in sorted(TABLES.items()):
      src = Sources(root)
      try:
        fn(src)
        used = ", ".join(src.used)
      except TableError as e:
        used = f"cannot render: {e}"
      print(f"{name}: {about}\n    reads {used}")
    return 0
  stale, seen = [], set()
  try:
    for page in pages(root):
      text = page.read_text(encoding="utf-8")
      seen.update(OPEN.findall(text))
      new = rewrite(text, root, page.parent, where=str(page.relative_to(root)))
      if new == text:
        continue
      stale.append(page)
      if args.check:
        diff = difflib.unified_diff(text.splitlines(), new.splitlines(), str(page.relative_to(root)), "generated",
                                    lineterm="", n=0)
        print("\n".join(list(diff)[:40]))
      else:
        page.write_text(new, encoding="utf-8")
  except TableError as e:
    print(f"tables: {e}", file=sys.stderr)
    return 2
  names = ", ".join(p.relative_to(root).as_posix() for p in stale)
  if args.check:
    if stale:
      print(f"tables: out of date in {names}; run python tools/tables.py", file=sys.stderr)
      return 1
    print(f"tables: {len(seen)} tables up to date")
    return 0
  print(f"tables: rewrote {names}" if stale else f"tables: {len(seen)} tables already up to date")
  return 0


if __name__ == "__main__":
  sys.exit(main(sys.argv))
