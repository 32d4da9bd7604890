"""User prompts for specjax.run: text, prompt files with JSON strings and chats, padding, errors."""
import json

import ml_collections
import numpy as np
import pytest

from specjax import prompts


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


def test_one_prompt_is_encoded_and_repeated_to_the_batch():
  rows, lengths = prompts.from_config(_config(prompt="abc", batch_size=3), _Tok(), 300)
  np.testing.assert_array_equal(rows, [[97, 98, 99]] * 3)
  np.testing.assert_array_equal(lengths, [3, 3, 3])


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
  with pytest.raises(ValueError, match="needs a model with a tokenizer"):
    prompts.from_config(_config(prompt="x"), None, 300)
  tok = _Tok()
  tok.chat_template = None
  with pytest.raises(ValueError, match="chat template"):
    prompts.from_config(_config(prompt="x", chat=True), tok, 300)
