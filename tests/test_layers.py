"""The package reads only downwards: every module is parsed (no import of specjax runs), and its
imports of specjax modules, at the top or inside functions, must form no circle between files and
no circle between rooms (a top-level module, or a subpackage folder as a whole), which is what an
import up a layer makes. The package's own ``__init__.py`` only hands names on and is left out."""
import ast
import pathlib

import pytest

import specjax

PACKAGE = pathlib.Path(specjax.__file__).parent
FACE = PACKAGE / "__init__.py"


def _modules():
  return sorted(p for p in PACKAGE.rglob("*.py") if p != FACE and "assets" not in p.relative_to(PACKAGE).parts)


def _file_of(dotted: str):
  """The file a dotted specjax name lives in: a module, else its package's __init__.py (None: the face)."""
  parts = dotted.split(".")[1:]
  while parts:
    base = PACKAGE.joinpath(*parts)
    if base.with_suffix(".py").is_file():
      return base.with_suffix(".py")
    if (base / "__init__.py").is_file():
      return base / "__init__.py"
    parts = parts[:-1]
  return None


def imports(path: pathlib.Path) -> set:
  """The files of specjax that ``path`` imports (an ``from X import name`` counts name's module if it is one)."""
  package = ".".join(("specjax", *path.relative_to(PACKAGE).with_suffix("").parts))
  if path.name == "__init__.py":
    package = package[:-len(".__init__")]
  out = set()
  for node in ast.walk(ast.parse(path.read_text(), str(path))):
    names = []
    if isinstance(node, ast.Import):
      names = [a.name for a in node.names]
    elif isinstance(node, ast.ImportFrom):
      base = node.module or ""
      if node.level:  # relative: from the module's own package
        anchor = package.split(".")[:len(package.split(".")) - node.level + (path.name == "__init__.py")]
        base = ".".join(anchor + ([base] if base else []))
      names = [f"{base}.{a.name}" for a in node.names] or [base]
    for name in names:
      if name == "specjax" or name.startswith("specjax."):
        target = _file_of(name)
        if target is not None and target != path:
          out.add(target)
  return out


def room(path: pathlib.Path) -> str:
  rel = path.relative_to(PACKAGE)
  return rel.parts[0] if len(rel.parts) > 1 else rel.stem


def _cycle(graph: dict):
  """One circle of ``graph`` (node -> set of nodes) as a list, or None."""
  state, stack = {}, []

  def visit(node):
    state[node] = "open"
    stack.append(node)
    for nxt in sorted(graph.get(node, ())):
      if state.get(nxt) == "open":
        return stack[stack.index(nxt):] + [nxt]
      if nxt not in state:
        found = visit(nxt)
        if found:
          return found
    stack.pop()
    state[node] = "done"
    return None

  for node in sorted(graph):
    if node not in state:
      found = visit(node)
      if found:
        return found
  return None


@pytest.fixture(scope="module")
def graph():
  return {p: imports(p) for p in _modules()}


def test_no_circle_between_files(graph):
  circle = _cycle(graph)
  assert circle is None, "import circle: " + " -> ".join(str(p.relative_to(PACKAGE)) for p in circle)


def test_no_import_up_a_layer(graph):
  rooms = {}
  for path, targets in graph.items():
    rooms.setdefault(room(path), set()).update(room(t) for t in targets if room(t) != room(path))
  circle = _cycle(rooms)
  assert circle is None, ("rooms that import each other (one of these imports runs up a layer): "
                          + " -> ".join(circle))


def test_the_checker_sees_a_planted_circle_and_an_import_up(tmp_path):
  """The checks can fail: a planted circle between two files and between two rooms is found."""
  a, b, c = tmp_path / "a.py", tmp_path / "b.py", tmp_path / "c.py"
  assert _cycle({a: {b}, b: {a}}) == [a, b, a]
  assert _cycle({"data": {"loading"}, "loading": {"data"}, "models": set()}) == ["data", "loading", "data"]
  assert _cycle({a: {b}, b: {c}, c: set()}) is None
