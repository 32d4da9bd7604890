"""scripts/compare_hf_real.py, shortened: SmolLM2-135M-Instruct, batch 1, 4 new tokens, 8-token prompts,
one round. Checks what it writes (rows, exactness flags), not timings. Needs the smollm2 model package
and the `hf` extra, as tests/test_real_models.py does."""
import json
import pathlib
import sys

import pytest

REPO = pathlib.Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.slow


def test_compare_hf_real_smoke_smollm2(tmp_path):
  pytest.importorskip("torch", reason="needs torch (pip install .[hf])")
  pytest.importorskip("transformers", reason="needs transformers (pip install .[hf])")
  sys.path.insert(0, str(REPO / "scripts"))
  import compare_hf_real  # pylint: disable=import-outside-toplevel
  result = compare_hf_real.main(["compare_hf_real.py", "--models=smollm2-135m-instruct", "--batch_sizes=1",
                                 "--max_new_tokens=4", "--prompt_len=8", "--repeats=1", "--torch_threads=1",
                                 f"--out_dir={tmp_path}"])
  md, js = tmp_path / "compare_hf_real.md", tmp_path / "compare_hf_real.json"
  assert md.is_file() and js.is_file()
  data = json.loads(js.read_text())
  assert data == json.loads(json.dumps(result))
  rows = data["rows"]
  assert [r["method"].split(" (")[0] for r in rows] == [
      "transformers generate", "specjax generate", "specjax speculative_generate"]
  for r in rows:
    assert r["model"] == "smollm2-135m-instruct" and r["batch_size"] == 1
    assert r["identical_to_hf_greedy"] is True and r["tokens_per_s"] > 0
  assert data["meta"]["all_identical"] and "--prompt_len=8" in data["meta"]["command"]
  text = md.read_text()
  assert text.count("| smollm2-135m-instruct | 1 |") == 3 and "**NO**" not in text
  assert "All methods produced transformers' greedy tokens: yes" in text
