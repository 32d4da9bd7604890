"""User prompts for specjax.run: text, prompt files with JSON strings and chats, one row per prompt,
every output printed and written as JSONL, refill past batch_size, errors."""
import importlib.util
import json
import os
import pathlib
import re
import subprocess
import sys

import ml_collections
import numpy as np
import pytest

from specjax import prompts, report


class _Tok:
  """A stand-in tokenizer: one id per character, a visible chat template."""
  chat_template = "<chat>"
  eos_id = 1

  def encode(self, text, add_special_tokens=True):
    return [ord(c) for c in text]

  def apply_chat_template(self, messages):
    return "".join(f"[{m['role']}]{m['content']}" for m in messages) + "[assistant]"


def _config(**kw):
  base = dict(prompt="", prompts_file="", chat=False, batch_size=1, prompt_len=8, seed=0)
  base.update(kw)
  return ml_collections.ConfigDict(base)


def test_one_prompt_is_one_row_whatever_the_batch_size():
  rows, lengths = prompts.from_config(_config(prompt="abc", batch_size=3), _Tok(), 300)
  np.testing.assert_array_equal(rows, [[97, 98, 99]])  # never repeated to fill the batch
  np.testing.assert_array_equal(lengths, [3])


def test_prompts_file_replaces_the_configs_prompt_and_is_never_padded(tmp_path):
  f = tmp_path / "p.txt"
  f.write_text("ab\nxyz\n")
  config = _config(prompt="DEFAULT", prompts_file=str(f), batch_size=8)
  assert prompts.user_prompts(config) == ["ab", "xyz"]
  rows, lengths, items = prompts.load(config, _Tok(), 300)
  assert items == ["ab", "xyz"] and lengths.tolist() == [2, 3] and rows.shape == (2, 3)


def test_builtin_prompts_fill_the_batch(tmp_path):
  rows, lengths = prompts.from_config(_config(batch_size=3, prompt_len=8), _Tok(), 300)
  assert rows.shape[0] == 3 and lengths.tolist() == [8, 8, 8]
  assert prompts.load(_config(batch_size=2), None, 300)[2] is None  # random ids: no items


def test_empty_prompts_file_is_an_error(tmp_path):
  f = tmp_path / "p.txt"
  f.write_text("\n  \n")
  with pytest.raises(ValueError, match="holds no prompts"):
    prompts.user_prompts(_config(prompts_file=str(f)))


def test_prompts_file_texts_json_strings_and_chats(tmp_path):
  f = tmp_path / "p.txt"
  chat = [{"role": "system", "content": "S"}, {"role": "user", "content": "U"}]
  f.write_text("plain text\n\n" + json.dumps("a\\nb") + "\n" + json.dumps(chat) + "\n")
  items = prompts.user_prompts(_config(prompts_file=str(f)))
  assert items == ["plain text", "a\\nb", chat]
  rows, lengths = prompts.from_config(_config(prompts_file=str(f)), _Tok(), 300)
  assert lengths.tolist() == [10, 4, len("[system]S[user]U[assistant]")]  # ragged, right-padded
  assert rows[1, 4:].tolist() == [0] * (rows.shape[1] - 4)


def test_chat_flag_templates_plain_prompts():
  rows, _ = prompts.from_config(_config(prompt="hi", chat=True), _Tok(), 300)
  assert "".join(map(chr, rows[0])) == "[user]hi[assistant]"


@pytest.mark.parametrize("line,match", [("[1, 2]", "list of"), ("[oops", "must be JSON")])
def test_bad_prompt_lines_name_file_and_line(tmp_path, line, match):
  f = tmp_path / "bad.txt"
  f.write_text("ok\n" + line + "\n")
  with pytest.raises(ValueError, match=f"bad.txt:2: .*{match}"):
    prompts.user_prompts(_config(prompts_file=str(f)))


def test_errors_missing_file_no_tokenizer_no_template(tmp_path):
  with pytest.raises(ValueError, match="prompts_file not found"):
    prompts.user_prompts(_config(prompts_file=str(tmp_path / "none.txt")))
  with pytest.raises(ValueError, match="need a model with a tokenizer"):
    prompts.from_config(_config(prompt="x"), None, 300)
  tok = _Tok()
  tok.chat_template = None
  with pytest.raises(ValueError, match="chat template"):
    prompts.from_config(_config(prompt="x", chat=True), tok, 300)


class _Out:
  """A decoder's output: generated ids, pad 0 past each row's length."""
  def __init__(self, rows):
    self.lengths = np.array([len(r) for r in rows], np.int32)
    self.tokens = np.zeros((len(rows), 6), np.int32)
    for i, r in enumerate(rows):
      self.tokens[i, :len(r)] = r


class _DecodingTok(_Tok):
  def decode(self, ids, skip_special_tokens=False):
    return "".join(("" if skip_special_tokens else "<eos>") if i == self.eos_id else chr(i) for i in ids)


def test_records_name_prompt_text_tokens_and_stop_reason(tmp_path):
  rows, lengths = prompts.pad_rows([[104, 105], [111]])
  out = _Out([[120, 121, 1], [122] * 6])  # row 0 stops at EOS (id 1), row 1 runs to max_new_tokens
  chat = [{"role": "user", "content": "o"}]
  recs = report.records(rows, lengths, out, _DecodingTok(), eos_id=1, items=["hi", chat])
  assert recs == [{"index": 0, "prompt": "hi", "text": "xy", "tokens": [120, 121, 1], "stop": "eos"},
                  {"index": 1, "prompt": chat, "text": "z" * 6, "tokens": [122] * 6, "stop": "length"}]
  path = tmp_path / "sub" / "out.jsonl"
  report.write_jsonl(path, recs)
  assert [json.loads(line) for line in path.read_text().splitlines()] == recs
  assert report.records(rows, lengths, out, _DecodingTok(), eos_id=None)[0]["stop"] == "length"


def test_every_user_prompt_is_printed_in_order(capsys):
  texts = [f"p{i}" for i in range(5)]
  rows, lengths = prompts.pad_rows([[ord(c) for c in t] for t in texts])
  out = _Out([[ord("a") + i] for i in range(5)])
  report.print_outputs(rows, lengths, out, _DecodingTok(), eos_id=1)
  printed = capsys.readouterr().out
  positions = [printed.index(f"p{i}{chr(ord('a') + i)}") for i in range(5)]
  assert positions == sorted(positions) and "\033[" not in printed  # not a terminal: no escape codes
  report.print_outputs(rows, lengths, out, _DecodingTok(), eos_id=1, builtin=True)  # benchmarks' rows: a few
  printed = capsys.readouterr().out
  assert "p1" in printed and "p2" not in printed and "3 more built-in prompt rows" in printed


def test_user_prompts_print_as_written_and_answers_without_special_tokens(capsys, monkeypatch):
  """A chat row shows the user's message, then the answer on its own line with EOS left out; a
  completion prompt is followed by its continuation; the chat template's ids are never printed.
  On a terminal the answer is bold."""
  monkeypatch.setattr(report.sys.stdout, "isatty", lambda: True)
  rows, lengths = prompts.pad_rows([[2, 2, 104, 105, 2], [111]])  # id 2: stands for a template marker
  out = _Out([[120, 121, 1], [122, 1]])  # both rows stop at EOS (id 1)
  chat = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hello?"}]
  report.print_outputs(rows, lengths, out, _DecodingTok(), eos_id=1, items=[chat, "o"])
  printed = capsys.readouterr().out
  assert "hello?\n\033[1mxy\033[0m" in printed and "be brief" not in printed
  assert "o\033[1mz\033[0m" in printed and "<eos>" not in printed and chr(2) not in printed
  report.print_outputs(rows, lengths, out, _DecodingTok(), eos_id=1, items=["hi", "o"], chat=True)
  assert "hi\n\033[1mxy\033[0m" in capsys.readouterr().out


REPO = pathlib.Path(__file__).resolve().parent.parent
# the demo pair (a byte tokenizer) with a config-file prompt that a prompts_file must replace
_CONFIG = """
from specjax.config_util import sibling_config
from specjax.experiment import drafter_section


def get_config(arg=None):
  c = sibling_config({demo!r}, "demo", None)
  c.drafter = drafter_section("ngram", gamma=2)
  c.prompt = "DEFAULT PROMPT"
  c.batch_size, c.max_new_tokens, c.repeats = 2, 6, 1
  return c
"""


def test_cli_prompts_file_refill_outputs_jsonl_and_compilation_cache(tmp_path):
  config, prompts_file, out = tmp_path / "cfg.py", tmp_path / "p.txt", tmp_path / "out.jsonl"
  config.write_text(_CONFIG.format(demo=str(REPO / "configs" / "demo.py")))
  texts = ["def add(a, b):", "class Point:", "import os"]
  prompts_file.write_text("\n".join(texts) + "\n")
  env = dict(os.environ, SPECJAX_CACHE=str(tmp_path / "cache"))
  env.pop("JAX_COMPILATION_CACHE_DIR", None)  # the CLI's own cache, under SPECJAX_CACHE
  env.pop("JAX_PLATFORMS", None)
  env["JAX_DISABLE_MOST_OPTIMIZATIONS"] = "1"  # small programs: compile fast, as the suite does
  env["XLA_FLAGS"] = re.sub(r"--xla_force_host_platform_device_count=\d+", "", env.get("XLA_FLAGS", "")).strip()
  proc = subprocess.run([sys.executable, "-m", "specjax.run", f"--config={config}",
                         f"--config.prompts_file={prompts_file}", f"--config.output={out}",
                         f"--json_out={tmp_path / 'summary.json'}"],
                        cwd=REPO, env=env, capture_output=True, text=True, timeout=900, check=False)
  assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
  stdout = proc.stdout
  assert "DEFAULT PROMPT" not in stdout
  heads = [stdout.index(f"--- prompt {i} ") for i in range(3)]
  assert heads == sorted(heads) and "--- prompt 3 " not in stdout
  for i, text in enumerate(texts):  # each prompt right under its own header
    assert stdout.index(text, heads[i]) < (heads[i + 1] if i < 2 else len(stdout))
  # the text comes as soon as the first speculative run is done, before the baseline and the timing
  assert stdout.index("compiling speculative") < heads[0] < stdout.index("compiling the autoregressive") \
      < stdout.index("timing both") < stdout.index("speedup")
  rows = [json.loads(line) for line in out.read_text().splitlines()]
  assert [r["prompt"] for r in rows] == texts and [r["index"] for r in rows] == [0, 1, 2]
  assert all(len(r["tokens"]) == 6 and r["stop"] == "length" and r["text"] == bytes(
      i for i in r["tokens"] if i < 256).decode("utf-8", errors="replace") for r in rows)  # the byte-level demo has no EOS: rows run to max_new_tokens
  summary = json.loads((tmp_path / "summary.json").read_text())
  assert summary["num_prompts"] == 3 and summary["batch_size"] == 2 and summary["refill"]
  assert summary["identical_to_autoregressive"]
  assert any((tmp_path / "cache" / "jax").iterdir())  # compiled programs kept for the next run
  if importlib.util.find_spec("libtpu") is None:  # no TPU possible: jax's probe for one is not printed
    assert "Unable to initialize backend 'tpu'" not in proc.stderr
