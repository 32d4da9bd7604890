"""``python -m specjax.bench hf --real``, shortened: batch 1, 4 new tokens, 8-token prompts, one round,
on a tiny Llama GGUF with a vocabulary registered for the test (the real files take the same path,
and their parity with transformers is tests/test_real_models.py's). Checks what it writes (rows,
exactness flags), not timings. Needs the `hf` extra."""
import json

import pytest
from test_loading import register_tiny_gguf  # tests/ is on sys.path under pytest

from specjax.bench import __main__ as bench_main
from specjax.bench import hf_real

pytestmark = pytest.mark.slow


def test_compare_hf_real_smoke(tmp_path, capsys, monkeypatch):
  pytest.importorskip("torch", reason="needs torch (pip install .[hf])")
  pytest.importorskip("transformers", reason="needs transformers (pip install .[hf])")
  register_tiny_gguf(tmp_path, monkeypatch, "tiny-test")
  monkeypatch.setattr(hf_real, "MODELS", (*hf_real.MODELS, "tiny-test"))
  out_dir = tmp_path / "out"
  rc = bench_main.main(["specjax.bench", "hf", "--real", "--models=tiny-test", "--batch_sizes=1",
                        "--max_new_tokens=4", "--prompt_len=8", "--repeats=1", "--torch_threads=1",
                        f"--out_dir={out_dir}"])
  assert rc == 0
  md, js = out_dir / "compare_hf_real.md", out_dir / "compare_hf_real.json"
  assert md.is_file() and js.is_file()
  data = json.loads(js.read_text())
  rows = data["rows"]
  assert [r["method"].split(" (")[0] for r in rows] == [
      "transformers generate", "specjax generate", "specjax speculative_generate"]
  for r in rows:
    assert r["model"] == "tiny-test" and r["batch_size"] == 1
    assert r["identical_to_hf_greedy"] is True and r["tokens_per_s"] > 0
  assert data["meta"]["all_identical"] and data["meta"]["torch_threads_tried"] == [1]
  assert data["meta"]["command"].startswith("python -m specjax.bench hf --real ")
  assert "--prompt_len=8" in data["meta"]["command"]
  text = md.read_text()
  assert text.count("| tiny-test | 1 |") == 3 and "**NO**" not in text
  assert "All methods produced transformers' greedy tokens: yes" in text
  assert text in capsys.readouterr().out
