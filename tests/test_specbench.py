"""The Spec-Bench-format prompt set and the ``python -m specjax.bench specbench`` command."""
import hashlib
import json
import subprocess
import sys

import numpy as np
import pytest

import specjax
from specjax.bench import __main__ as bench_main
from specjax.bench import specbench
from specjax.data import specbench_prompts as sp


def _check_format(records, per_category=None):
  assert records, "no records"
  for r in records:
    assert list(r) == ["question_id", "category", "turns"], r
    assert isinstance(r["question_id"], int) and r["category"] in sp.CATEGORIES
    assert r["turns"] and all(isinstance(t, str) and t.strip() for t in r["turns"])
  assert len({r["question_id"] for r in records}) == len(records)
  if per_category is not None:
    counts = {c: sum(r["category"] == c for r in records) for c in {r["category"] for r in records}}
    assert set(counts.values()) == {per_category}, counts


def test_builder_is_deterministic_and_in_format(tmp_path):
  a, fa = sp.build(per_category=6, seed=3, categories=("math_reasoning",), download=False)
  b, fb = sp.build(per_category=6, seed=3, categories=("math_reasoning",), download=False)
  c, _ = sp.build(per_category=6, seed=4, categories=("math_reasoning",), download=False)
  assert sp.dumps(a) == sp.dumps(b) and fa == fb
  assert sp.dumps(a) != sp.dumps(c)
  _check_format(a, per_category=6)
  index = sp.CATEGORIES.index("math_reasoning")  # ids are the ones the full file gives this category
  assert [r["question_id"] for r in a] == list(range(index * 6 + 1, index * 6 + 7))
  assert len({r["turns"][0] for r in a}) == 6  # six different problems
  path = tmp_path / "q.jsonl"
  path.write_bytes(sp.dumps(a))
  assert sp.read(path) == a


def test_bad_files_and_arguments_are_named(tmp_path):
  bad = tmp_path / "bad.jsonl"
  bad.write_text('{"question_id": 1, "category": "qa", "turns": ["x"]}\n{"question_id": 2, "turns": []}\n')
  with pytest.raises(ValueError, match="bad.jsonl:2"):
    sp.read(bad)
  with pytest.raises(ValueError, match="poetry"):
    sp.build(per_category=2, categories=("poetry",))
  with pytest.raises(ValueError, match="per_category"):
    sp.build(per_category=0, categories=("math_reasoning",))


def test_shipped_file_parses_has_every_category_and_matches_its_checksum():
  assert sp.SHIPPED.stat().st_size < 1_000_000
  assert sp.sha256_of(sp.SHIPPED) == sp.SHIPPED_SHA256
  records = sp.read(sp.SHIPPED)
  _check_format(records, per_category=sp.SHIPPED_PER_CATEGORY)
  assert [r["category"] for r in sp.head(records, 1)] == list(sp.CATEGORIES)
  assert [r["question_id"] for r in records] == list(range(1, len(records) + 1))
  assert max(len(t) for r in records for t in r["turns"]) < sp.MAX_CHARS + 200  # leads trimmed
  tiny = sp.head(records, 2)
  assert len(tiny) == 2 * len(sp.CATEGORIES) and tiny[:2] == records[:2]


_SOURCES = (("conversation",), ("translation",), ("summarization", "qa", "rag"), ("math_reasoning",), ("code",))


def test_rebuild_from_cached_sources_matches_the_shipped_file():
  """Categories whose sources are on this machine (cached wheels, catalogues, this stdlib) rebuild
  byte for byte; with every source matching, the whole file's sha256 is the pinned one."""
  shipped = sp.read(sp.SHIPPED)
  rebuilt, checked = [], []
  for group in _SOURCES:
    try:
      records, prints = sp.build(sp.SHIPPED_PER_CATEGORY, sp.SHIPPED_SEED, categories=group, download=False)
    except (sp.SourceUnavailable, FileNotFoundError) as e:
      print(f"not rebuilt: {group}: {e}")
      continue
    for category in group:
      if prints[category] != sp.SHIPPED_FINGERPRINTS[category]:
        print(f"not compared: {category}: its source differs on this machine")
        continue
      mine = [r for r in records if r["category"] == category]
      assert mine == [r for r in shipped if r["category"] == category], category
      checked.append(category)
      rebuilt += mine
  if len(checked) == len(sp.CATEGORIES):
    rebuilt.sort(key=lambda r: r["question_id"])
    assert hashlib.sha256(sp.dumps(rebuilt)).hexdigest() == sp.SHIPPED_SHA256
  assert "math_reasoning" in checked  # generated: always comparable


def test_dispatcher_lists_tasks_and_rejects_unknown_ones(capsys):
  out = subprocess.run([sys.executable, "-m", "specjax.bench", "--help"], capture_output=True, text=True, check=True)
  assert "specbench" in out.stdout and "Spec-Bench" in out.stdout
  assert bench_main.main(["specjax.bench", "nope"]) == 2
  err = capsys.readouterr().err.strip()
  assert len(err.splitlines()) == 1 and "'nope'" in err and "specbench" in err


def test_importing_specbench_defines_no_global_flags():
  # A fresh interpreter: other tests load scripts that define flags of the same names.
  code = ("from absl import flags; import specjax.bench.specbench; "
          "assert 'questions' not in flags.FLAGS and 'drafters' not in flags.FLAGS")
  subprocess.run([sys.executable, "-c", code], check=True)


def test_make_calls_groups_pads_and_batches():
  records = [{"question_id": i, "category": c, "turns": ["x"]}
             for i, c in enumerate(["writing", "qa", "roleplay", "qa", "qa"], 1)]
  rows = [[1] * n for n in (3, 70, 5, 2, 9)]
  calls = specbench.make_calls(records, rows, batch_size=2, min_width=4)
  assert [(c.group, c.question_ids) for c in calls] == [("mt_bench", (1, 3)), ("qa", (2, 4)), ("qa", (5,))]
  assert [c.prompts_BxP.shape for c in calls] == [(2, 8), (2, 128), (1, 16)]
  assert calls[1].lengths_B.tolist() == [70, 2] and calls[1].prompts_BxP[1, 2:].sum() == 0


@pytest.fixture(scope="module")
def tiny_bundle(tmp_path_factory):
  """A random decoder over the byte tokenizer's 264 ids, saved as a bundle folder load_pretrained reads."""
  return specjax.checkpoint.save_model(specjax.testing.tiny_decoder(vocab_size=264),
                                       tmp_path_factory.mktemp("tiny") / "target")


def test_predicted_speedup_weighs_each_rounds_measured_cost():
  agg = {"tokens_per_iteration": 2.0, "verify_widths": [0, 2, 4], "width_histogram": [2, 1, 1]}
  costs = ((0, 1.0), (1, 1.2), (4, 2.0))  # width 2 interpolated: 1.2 + (2.0 - 1.2) / 3
  mean_cost = (2 * 1.0 + (1.2 + 0.8 / 3) + 2.0) / 4
  assert specbench.predicted_speedup(agg, costs) == pytest.approx(2.0 / mean_cost, abs=1e-4)
  assert specbench.predicted_speedup(agg, None) is None
  assert specbench.predicted_speedup(dict(agg, width_histogram=[0, 0, 0]), costs) is None


def test_make_drafter_specs(tmp_path, tiny_bundle):
  target = specjax.load_pretrained(tiny_bundle, verbose=False)[0]
  drafter, gamma = specbench.make_drafter("ngram", target)
  assert isinstance(drafter, specjax.drafters.NGram) and gamma == 4
  drafter, gamma = specbench.make_drafter(f"draft_model:{tiny_bundle}", target, 3)
  assert isinstance(drafter, specjax.drafters.DraftModel) and gamma == 3
  specjax.checkpoint.save_model(specjax.testing.tiny_decoder(vocab_size=64, num_layers=1), tmp_path / "small")
  with pytest.raises(ValueError, match="vocab_size"):
    specbench.make_drafter(f"draft_model:{tmp_path / 'small'}", target)
  with pytest.raises(ValueError, match="'ngarm'"):
    specbench.make_drafter("ngarm", target)


def test_command_end_to_end_on_a_tiny_target(tmp_path, tiny_bundle, capsys):
  questions = tmp_path / "q.jsonl"
  # each category's first question, cut to 200 characters: one padded width (256 byte tokens) keeps this to one
  # compile per loop, and a short prompt keeps each call cheap
  shipped = sp.head(sp.read(sp.SHIPPED), 1)
  questions.write_bytes(sp.dumps([dict(r, turns=[r["turns"][0][:200]]) for r in shipped]))
  out = tmp_path / "out.json"
  flags = [f"--target={tiny_bundle}", f"--questions={questions}", "--max_new_tokens=8"]
  rc = specbench.main(["specbench", *flags, "--min_prompt_width=256", "--acceptance_memory=0.05", f"--json_out={out}"])
  assert rc == 0
  result = json.loads(out.read_text())
  assert result["categories"] == list(sp.CATEGORIES)
  assert set(result["drafters"]) == {"ngram adaptive", "ngram fixed"}
  assert result["drafters"]["ngram adaptive"]["adaptive"]["confidence"] == 0.4
  assert result["drafters"]["ngram adaptive"]["adaptive"]["memory"] == 0.05
  assert result["drafters"]["ngram fixed"]["adaptive"] is None
  ngram = result["drafters"]["ngram adaptive"]
  assert set(ngram["categories"]) == set(sp.CATEGORIES)
  assert ngram["overall"]["mean_submitted"] <= 4
  for stats in [*ngram["categories"].values(), ngram["overall"]]:
    assert stats["identical_to_autoregressive"] is True
    assert stats["speedup"] > 0 and stats["tokens_per_iteration"] >= 1.0 and 0 <= stats["alpha"] <= 1
  assert all(s["num_questions"] == 1 for s in ngram["categories"].values())
  assert ngram["overall"]["num_questions"] == len(sp.CATEGORIES)
  assert result["config"]["chat"] is False and result["config"]["max_new_tokens"] == 8
  assert np.isclose(ngram["overall"]["speedup"],
                    ngram["overall"]["tokens_per_s"] / ngram["overall"]["baseline_tokens_per_s"], rtol=1e-3)
  table = capsys.readouterr().out
  assert "accepted/call" in table and "ngram adaptive (γ=4)" in table and "translation" in table
  assert specbench.main(["specbench", f"--table={out}"]) == 0  # the same table, from the JSON alone
  assert capsys.readouterr().out.strip() in table
  # --stop_at_eos=false: every row writes max_new_tokens on both sides (sampled runs time the same length);
  # sampling, the adaptive rows cut at --sampled_confidence, not --confidence
  assert specbench.main(["specbench", *flags, "--min_prompt_width=256", "--adaptive=on", "--temperature=1",
                         "--verify_slope=0.2", "--sampled_confidence=0.3", "--limit=1", f"--json_out={out}",
                         "--stop_at_eos=false"]) == 0
  result = json.loads(out.read_text())
  assert result["config"]["stop_at_eos"] is False and result["config"]["eos_id"] is None
  assert result["drafters"]["ngram"]["adaptive"]["confidence"] == 0.3
  assert all(m["tokens"] == m["baseline_tokens"] == 8 for m in result["calls"])
  capsys.readouterr()
  # bad input: one line naming the value, before anything compiles
  assert specbench.main(["specbench", *flags, "--drafters=ngram,bogus"]) == 2
  assert "'bogus'" in capsys.readouterr().err
  assert specbench.main(["specbench", *flags, "--limit=-1"]) == 2
  assert "--limit" in capsys.readouterr().err
  assert specbench.main(["specbench", *flags, "--acceptance_memory=1.5"]) == 2
  assert "--acceptance_memory" in capsys.readouterr().err


def test_recycling_runs_by_name_with_its_budgets_and_memory(tmp_path, tiny_bundle):
  questions = tmp_path / "q.jsonl"
  shipped = sp.head(sp.read(sp.SHIPPED), 1)[:2]
  questions.write_bytes(sp.dumps([dict(r, turns=[r["turns"][0][:200]]) for r in shipped]))
  out = tmp_path / "out.json"
  assert specbench.main(["specbench", f"--target={tiny_bundle}", f"--questions={questions}", "--max_new_tokens=8",
                         "--min_prompt_width=256", "--drafters=recycling", "--adaptive=on", f"--json_out={out}"]) == 0
  result = json.loads(out.read_text())
  r = result["drafters"]["recycling"]
  target = specjax.load_pretrained(tiny_bundle, verbose=False)[0]
  assert r["memory_bytes"] == target.vocab_size * 8 * 4
  assert r["overall"]["verify_widths"] == [0, 2, 4, 8] and sum(r["overall"]["width_histogram"]) > 0
  assert [w for w, _ in r["adaptive"]["verify_costs"]] == [0, 2, 4, 8]  # each budget's round timed in the loop
  assert r["overall"]["identical_to_autoregressive"] is True
