"""``python -m specjax.bench hf --real``, shortened: SmolLM2-135M-Instruct, batch 1, 4 new tokens, 8-token
prompts, one round. Checks what it writes (rows, exactness flags), not timings. Needs the smollm2 model
package and the `hf` extra, as tests/test_real_models.py does."""
import json

import pytest

from specjax.bench import __main__ as bench_main

pytestmark = pytest.mark.slow


def test_compare_hf_real_smoke_smollm2(tmp_path, capsys, monkeypatch):
  monkeypatch.setenv("SPECJAX_SCAN_LAYERS", "on")  # 30 layers as one scan: compiles 2-3x faster
  pytest.importorskip("torch", reason="needs torch (pip install .[hf])")
  pytest.importorskip("transformers", reason="needs transformers (pip install .[hf])")
  rc = bench_main.main(["specjax.bench", "hf", "--real", "--models=smollm2-135m-instruct", "--batch_sizes=1",
                        "--max_new_tokens=4", "--prompt_len=8", "--repeats=1", "--torch_threads=1",
                        f"--out_dir={tmp_path}"])
  assert rc == 0
  md, js = tmp_path / "compare_hf_real.md", tmp_path / "compare_hf_real.json"
  assert md.is_file() and js.is_file()
  data = json.loads(js.read_text())
  rows = data["rows"]
  assert [r["method"].split(" (")[0] for r in rows] == [
      "transformers generate", "specjax generate", "specjax speculative_generate"]
  for r in rows:
    assert r["model"] == "smollm2-135m-instruct" and r["batch_size"] == 1
    assert r["identical_to_hf_greedy"] is True and r["tokens_per_s"] > 0
  assert data["meta"]["all_identical"] and data["meta"]["torch_threads_tried"] == [1]
  assert data["meta"]["command"].startswith("python -m specjax.bench hf --real ")
  assert "--prompt_len=8" in data["meta"]["command"]
  text = md.read_text()
  assert text.count("| smollm2-135m-instruct | 1 |") == 3 and "**NO**" not in text
  assert "All methods produced transformers' greedy tokens: yes" in text
  assert text in capsys.readouterr().out
