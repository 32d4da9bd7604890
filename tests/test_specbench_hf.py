"""``python -m specjax.bench specbench_hf`` on a tiny Llama GGUF with a vocabulary, registered for the
test as target and assistant: the rows it writes, transformers' tokens against its own generate,
the target-call count, and one-line errors. Timings are not checked. Needs the `hf` extra."""
import json

import pytest
from test_loading import register_tiny_gguf  # tests/ is on sys.path under pytest

from specjax.bench import __main__ as bench_main
from specjax.data import specbench_prompts as sp

pytestmark = pytest.mark.slow


def test_prompt_lookup_and_assisted_rows_on_a_tiny_gguf(tmp_path, capsys, monkeypatch):
  pytest.importorskip("torch", reason="needs torch (pip install .[hf])")
  pytest.importorskip("transformers", reason="needs transformers (pip install .[hf])")
  register_tiny_gguf(tmp_path, monkeypatch, "tiny-test")
  questions = tmp_path / "q.jsonl"
  questions.write_bytes(sp.dumps([dict(r, turns=[r["turns"][0][:120]]) for r in sp.head(sp.read(sp.SHIPPED), 1)]))
  out = tmp_path / "out" / "hf.json"
  flags = ["specjax.bench", "specbench_hf", "--target=tiny-test", f"--questions={questions}", "--chat=false",
           "--max_new_tokens=6", "--torch_threads=1"]
  assert bench_main.main([*flags, "--lookup_tokens=3", "--assistant=tiny-test", f"--json_out={out}"]) == 0
  result = json.loads(out.read_text())
  assert result["categories"] == list(sp.CATEGORIES)
  assert list(result["methods"]) == ["transformers prompt lookup (3 tokens)",
                                     "transformers assisted generation, tiny-test (its defaults)"]
  assert result["config"]["torch_threads"] == 1 and result["config"]["num_questions"] == len(sp.CATEGORIES)
  for name, r in result["methods"].items():
    assert r["overall"]["identical_to_generate"] is True, name
    assert r["overall"]["num_questions"] == len(sp.CATEGORIES)
    assert all(c["num_questions"] == 1 and c["speedup"] > 0 for c in r["categories"].values())
  calls = result["calls"]
  assert len(calls) == 2 * len(sp.CATEGORIES)
  for c in calls:  # generate calls the target once per token (the prompt's pass gives the first)
    assert c["baseline_target_calls"] == c["baseline_tokens"] and 1 <= c["baseline_tokens"] <= 6
    assert 1 <= c["target_calls"] <= c["tokens"]
  assisted = [c for c in calls if c["method"].startswith("transformers assisted")]
  assert sum(c["target_calls"] for c in assisted) < sum(c["tokens"] for c in assisted)  # itself as drafter: all kept
  text = capsys.readouterr().out
  assert "| transformers prompt lookup (3 tokens) |" in text and "wrote" in text
  # bad input: one line naming the value, before any model loads
  assert bench_main.main([*flags, "--lookup_tokens="]) == 2
  assert "--lookup_tokens and/or --assistant" in capsys.readouterr().err
  assert bench_main.main([*flags, "--assistant=no-such-model"]) == 2
  assert "'no-such-model'" in capsys.readouterr().err
