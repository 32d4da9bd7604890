"""README.md and docs/: the front page's commands, its Python blocks run as written, the measured
tables match their JSON files, every relative link resolves, and the prose speaks of the project."""
import os
import pathlib
import re
import shutil
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))  # the table renderer is a repository tool, not part of the package
import tables  # noqa: E402  pylint: disable=wrong-import-position
README = ROOT / "README.md"
PAGES = [README, *sorted((ROOT / "docs").glob("*.md"))]
FIRST_SCREEN = 30  # lines


def _ci_command() -> str:
  lines = [l.strip() for l in (ROOT / ".ci" / "run").read_text().splitlines()]
  commands = [l for l in lines if l.startswith("python3 -m venv")]
  assert len(commands) == 1, f".ci/run should run one setup-and-test command, found {commands}"
  return commands[0]


def test_readme_is_a_front_page_with_the_two_commands_first():
  lines = README.read_text().splitlines()
  assert len(lines) <= 300, f"README.md has {len(lines)} lines; the front page keeps to 300 (details go to docs/)"
  screen = [l.strip() for l in lines[:FIRST_SCREEN]]
  run = "python3 -m venv .venv && . .venv/bin/activate && pip install -e . && python -m specjax.run"
  assert run in screen, "the first screen lost the install-and-run command"
  assert _ci_command() in screen, "the first screen's test command differs from the one .ci/run runs"
  assert screen.index(run) < screen.index(_ci_command())


def _python_blocks(text: str) -> list[str]:
  return re.findall(r"^```python\n(.*?)^```", text, re.S | re.M)


@pytest.mark.slow  # loads the demo pair and compiles three decoders: under a minute on 2 CPU cores
def test_readme_python_blocks_run_as_written():
  blocks = _python_blocks(README.read_text())
  assert blocks, "README.md has no Python example"
  program = "\n\n".join(blocks)
  env = dict(os.environ, JAX_DISABLE_MOST_OPTIMIZATIONS="1")  # small programs: compile fast, as the suite does
  proc = subprocess.run([sys.executable, "-c", program], cwd=ROOT, env=env, capture_output=True, text=True,
                        timeout=900)
  assert proc.returncode == 0, f"README Python blocks failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"


def test_tables_are_generated_from_the_benchmark_files():
  proc = subprocess.run([sys.executable, "tools/tables.py", "--check"], cwd=ROOT, capture_output=True,
                        text=True, timeout=300)
  assert proc.returncode == 0, ("tables out of date (run python tools/tables.py):\n"
                                f"{proc.stdout[-3000:]}\n{proc.stderr[-2000:]}")
  used = set()
  for page in PAGES:
    used.update(tables.OPEN.findall(page.read_text()))
  assert "summary" in tables.OPEN.findall(README.read_text()), "README lost its generated results table"
  assert used <= set(tables.TABLES)


def _slug(heading: str) -> str:
  """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
  text = re.sub(r"[`*]", "", heading.strip().lower())
  return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def _anchors(page: pathlib.Path) -> set[str]:
  text = re.sub(r"^```.*?^```", "", page.read_text(), flags=re.S | re.M)
  return {_slug(m) for m in re.findall(r"^#+ (.*)$", text, re.M)}


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_relative_links_resolve(page):
  text = re.sub(r"^```.*?^```", "", page.read_text(), flags=re.S | re.M)  # links, not code
  broken = []
  for target in re.findall(r"\]\(([^)\s]+)\)", text):
    if re.match(r"[a-z]+:", target):
      continue  # http(s), mailto: not checked here
    path, _, anchor = target.partition("#")
    dest = (page.parent / path).resolve() if path else page
    if not dest.exists():
      broken.append(target)
    elif anchor and dest.suffix == ".md" and anchor not in _anchors(dest):
      broken.append(f"{target} (no such heading)")
  assert not broken, f"{page.relative_to(ROOT)}: broken links {broken}"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_prose_speaks_of_the_project(page):
  words = re.findall(r"\b(issues?|sessions?|goals?|seeds?|seeded|tasks?)\b", page.read_text(), re.I)
  assert not words, f"{page.relative_to(ROOT)}: process wording {sorted(set(w.lower() for w in words))}"


# --------------------------------------------------------------------------------- the table generator itself

def _fake_root(tmp_path, page_text: str) -> pathlib.Path:
  (tmp_path / "benchmarks" / "walltime").mkdir(parents=True)
  shutil.copy(ROOT / "benchmarks" / "walltime" / "reproduce.json", tmp_path / "benchmarks" / "walltime")
  (tmp_path / "docs").mkdir()
  (tmp_path / "docs" / "page.md").write_text(page_text)
  return tmp_path


def test_tables_rewrite_only_between_markers_and_check_reports_stale(tmp_path, capsys):
  page = "intro\n<!-- table:walltime -->\nstale numbers\n<!-- /table:walltime -->\noutro\n"
  root = _fake_root(tmp_path, page)
  assert tables.main(["tables", "--root", str(root), "--check"]) == 1
  assert tables.main(["tables", "--root", str(root)]) == 0
  text = (root / "docs" / "page.md").read_text()
  assert text.startswith("intro\n<!-- table:walltime -->\n| drafter |") and text.endswith("<!-- /table:walltime -->\noutro\n")
  assert "stale numbers" not in text and "](../benchmarks/walltime/reproduce.json)" in text
  assert tables.main(["tables", "--root", str(root), "--check"]) == 0
  capsys.readouterr()


@pytest.mark.parametrize("page, message", [
    ("<!-- table:nope -->\n<!-- /table:nope -->\n", "unknown table 'nope'"),
    ("<!-- table:walltime -->\nno end marker\n", "do not pair up"),
    ("<!-- table:summary -->\n<!-- /table:summary -->\n", "not found"),  # its JSON files are missing here
])
def test_tables_errors_name_the_problem(tmp_path, capsys, page, message):
  root = _fake_root(tmp_path, page)
  assert tables.main(["tables", "--root", str(root), "--check"]) == 2
  assert message in capsys.readouterr().err


def test_specbench_row_names_read_as_words():
  import table_defs  # pylint: disable=import-outside-toplevel
  assert table_defs.drafter_label("ngram adaptive") == "n-gram, adaptive draft length"
  assert table_defs.drafter_label("draft_model:qwen2.5-coder-0.5b-instruct fixed") == (
      "draft model qwen2.5-coder-0.5b-instruct, fixed draft length")
  assert table_defs.drafter_label("mtp:smollm2/mtp") == "MTP head smollm2/mtp"
  assert table_defs.drafter_label("eagle:my/head") == "eagle my/head"  # a kind without words: its name
