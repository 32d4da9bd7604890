"""Every letter of a shape-suffixed name in the package (``logits_BxTxV``) is in the legend of
docs/design.md ("Shape letters"), and the legend gives each letter one line."""
import ast
import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parents[1]
# a name whose part before the last "_" has a lowercase letter (not a CONSTANT), ending in axes of
# capital letters and digits joined by "x": tokens_BxS, seq_len_B, new_BxG1, logits_Bx1xV
SUFFIXED = re.compile(r"^(?P<stem>.*[a-z].*)_(?P<axes>[A-Z0-9]+(?:x[A-Z0-9]+)*)$")
LEGEND_ROW = re.compile(r"^\| `(?P<letter>[A-Z])` \| (?P<meaning>.+) \|$")


def legend() -> dict:
  """``{letter: meaning}`` from the table under ``## Shape letters`` in docs/design.md."""
  text = (ROOT / "docs" / "design.md").read_text()
  section = text.split("## Shape letters", 1)[1].split("\n## ", 1)[0]
  rows = [LEGEND_ROW.match(line.strip()) for line in section.splitlines()]
  letters = [m["letter"] for m in rows if m]
  assert len(letters) == len(set(letters)), f"a letter has more than one line: {sorted(letters)}"
  return {m["letter"]: m["meaning"] for m in rows if m}


def _names(tree):
  for node in ast.walk(tree):
    if isinstance(node, ast.Name):
      yield node.id, node.lineno
    elif isinstance(node, ast.Attribute):
      yield node.attr, node.lineno
    elif isinstance(node, ast.arg):
      yield node.arg, node.lineno
    elif isinstance(node, ast.keyword) and node.arg:
      yield node.arg, node.value.lineno
    elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
      yield node.name, node.lineno


def letters_of(name: str) -> set:
  """The axis letters of a shape-suffixed name (empty for any other name)."""
  m = SUFFIXED.match(name)
  return set(re.findall(r"[A-Z]", m["axes"])) if m else set()


def unknown_letters(source: str, known, where: str = "<source>") -> list:
  """``["where:line name (letters)"]`` for each name whose suffix uses a letter not in ``known``."""
  out = []
  for name, line in _names(ast.parse(source)):
    missing = letters_of(name) - set(known)
    if missing:
      out.append(f"{where}:{line} {name} ({''.join(sorted(missing))})")
  return sorted(set(out))


def test_the_checker_reads_suffixes_and_flags_unknown_letters():
  assert letters_of("logits_BxTxV") == {"B", "T", "V"} and letters_of("seq_len_B") == {"B"}
  assert letters_of("new_BxG1") == {"B", "G"} and letters_of("logits_Bx1xV") == {"B", "V"}
  assert letters_of("SAMPLE_BLOCK") == set() and letters_of("DEMO_K") == set() and letters_of("tokens") == set()
  source = "def f(x_BxO, seq_len_B):\n  y_BxS = x_BxO\n  return y_BxS.rows_QxO\n"
  assert unknown_letters(source, "BS") == ["<source>:1 x_BxO (O)", "<source>:2 x_BxO (O)",
                                           "<source>:3 rows_QxO (OQ)"]


def test_the_legend_has_one_line_per_letter():
  known = legend()
  assert {"B", "S", "T", "V"} <= set(known)
  assert all(meaning.strip() for meaning in known.values())


def test_every_shape_letter_in_the_package_is_in_the_legend():
  known = legend()
  unknown = []
  for path in sorted((ROOT / "specjax").rglob("*.py")):
    unknown += unknown_letters(path.read_text(), known, str(path.relative_to(ROOT)))
  assert not unknown, ("shape letters missing from the legend in docs/design.md (## Shape letters): add the "
                       "letter there, or use the letter that already means that axis:\n" + "\n".join(unknown))
