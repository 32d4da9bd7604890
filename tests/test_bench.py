"""The measurement commands of ``python -m specjax.bench`` on tiny settings, run in-process.

The fast tests check the dispatcher, every command's ``--help`` and its one-line errors. The slow
ones run each command end to end on the tiny random pair (or the demo pair, a few tokens, batch 1)
and check what it writes (columns, plots, exactness flags), not timings, which are noise at this
size.
"""
import csv
import json
import pathlib
import subprocess
import sys

import pytest

from specjax.bench import __main__ as bench_main
from specjax.checkpoint import CheckpointError

REPO = pathlib.Path(__file__).resolve().parent.parent
TINY_CONFIG = f"--config={REPO / 'configs' / 'tiny_random.py'}"
TINY = [TINY_CONFIG, "--max_new_tokens=8", "--repeats=1", "--batch_sizes=1"]
MEASUREMENTS = ("gamma", "families", "batch", "large_vocab", "profile", "walltime", "hf", "peers", "specbench_hf")


def bench(*args) -> int:
  return bench_main.main(["specjax.bench", *map(str, args)])


def help_exit_code(name) -> int:
  try:
    return bench(name, "--help")
  except SystemExit as e:  # an argparse command (tables) exits from --help
    return e.code


# --------------------------------------------------------------------------------------------- fast
def test_help_lists_every_command_and_each_help_exits_0(capsys):
  out = subprocess.run([sys.executable, "-m", "specjax.bench", "--help"], cwd=REPO, capture_output=True, text=True,
                       check=True).stdout
  listed = [line.split()[0] for line in out.split("tasks:\n")[1].splitlines() if line.strip()]
  assert listed == list(bench_main.TASKS) and set(MEASUREMENTS) <= set(listed)
  assert "(module not found)" not in out
  for name in bench_main.TASKS:
    assert help_exit_code(name) == 0, name
    text = " ".join(capsys.readouterr().out.split())  # argparse re-wraps its description
    assert bench_main.summary(bench_main.TASKS[name]) in text, name  # pylint: disable=protected-access
  for name in MEASUREMENTS:
    assert bench(name, "--help") == 0
    assert "flags:" in capsys.readouterr().out, name


@pytest.mark.parametrize("args, message", [
    (["gamma", "--gammas=0"], "--gammas"),
    (["gamma", "--drafters=bogus"], "--drafters"),
    (["gamma", "stray"], "unexpected arguments"),
    (["families", "--variant=x:nope"], "unknown family 'nope'"),
    (["families", "--families=nope"], "--families"),
    (["families", "--target=smollm2-135m-instruct", "--pair=configs/tiny_random.py"], "--pair: not used"),
    (["families", "--variant=x:medusa:allow_lossy=maybe"], "allow_lossy"),
    (["batch", "--drafters=bogus"], "--drafters"),
    (["batch", "--stop=ab"], "--stop"),
    (["large_vocab", "--samplings=nope"], "--samplings"),
    (["large_vocab", "--vocabs=a"], "--vocabs"),
    (["profile", "--batch_sizes=0"], "--batch_sizes"),
    (["profile", "--no_such_flag=1"], "no_such_flag"),
    (["walltime", "--t5_ende", "--benchmark_json=x.json"], "--benchmark_json: not used with --t5_ende"),
    (["walltime", "--prompts=3"], "--prompts: not used"),
    (["hf", "--real", "--gamma=3"], "--gamma: not used with --real"),
    (["hf", "--torch_threads=1,2"], "--torch_threads"),
    (["hf", "--real", "--batch_sizes=9"], "at most 8"),
    (["peers", "--data=/no/such/folder"], "prompts_held_out.json not found"),
    (["peers", "--prompts=0"], "--prompts"),
])
def test_bad_flags_and_inputs_are_one_line_and_exit_2(capsys, args, message):
  assert bench(*args) == 2
  err = capsys.readouterr().err.strip()
  assert len(err.splitlines()) == 1 and err.startswith(f"{args[0]}: ") and message in err, err


def test_families_variant_values_parse_booleans_numbers_and_lists():
  from specjax.bench import families  # pylint: disable=import-outside-toplevel
  name, config_file, overrides = families.parse_variant(
      "typical:medusa:drafter.acceptance=typical:allow_lossy=True:lenience=0.5:drafter.gamma=3")
  assert (name, config_file) == ("typical", "medusa_demo.py")
  assert overrides == {"drafter.acceptance": "typical", "allow_lossy": True, "lenience": 0.5, "drafter.gamma": 3}
  assert families.parse_value("False") is False and families.parse_value("2,1,1") == (2, 1, 1)
  assert families.parse_value("chain3+1x1") == "chain3+1x1" and families.parse_value("a,b") == "a,b"
  config = families.family_config(name, config_file, overrides, 1, 1.0, pair="", max_new_tokens=8, repeats=1)
  assert config.allow_lossy is True and config.drafter.acceptance == "typical" and config.lenience == 0.5


def test_importing_the_commands_defines_no_global_flags():
  code = ("from absl import flags; from specjax.bench import __main__ as m; import importlib; "
          "[importlib.import_module(v) for v in m.TASKS.values()]; "
          "import specjax.bench.families_real, specjax.bench.hf_real; "
          "assert not {'gammas', 'drafters', 'families', 'config', 'out_dir', 'target'} & set(flags.FLAGS)")
  subprocess.run([sys.executable, "-c", code], cwd=REPO, check=True)


# --------------------------------------------------------------------------------------------- slow
@pytest.fixture(scope="module")
def gamma_run(tmp_path_factory):
  out = tmp_path_factory.mktemp("gamma")
  rc = bench("gamma", *TINY, "--gammas=1,2", "--drafters=draft_model,ngram", "--temperatures=0", f"--out_dir={out}")
  assert rc == 0
  return out


@pytest.mark.slow
def test_gamma_writes_csv_json_markdown_and_plots(gamma_run):
  from specjax.bench import gamma  # pylint: disable=import-outside-toplevel
  out = gamma_run
  with open(out / "results.csv") as fh:
    rows = list(csv.DictReader(fh))
  assert tuple(rows[0]) == gamma.CSV_COLUMNS
  assert {(r["drafter"], int(r["gamma"])) for r in rows} == {(d, g) for d in ("draft_model", "ngram") for g in (1, 2)}
  data = json.loads((out / "results.json").read_text())
  assert data["meta"]["demo_weights"] is False and data["meta"]["max_new_tokens"] == 8
  for r in data["rows"]:
    assert r["identical_to_autoregressive"] is True  # greedy: speculative == autoregressive
    assert r["speedup"] > 0 and r["tokens_per_s"] > 0 and r["baseline_tokens_per_s"] > 0 and r["v"] > 0
    assert 0 <= r["alpha"] <= 1 and len(r["acceptance_per_position"]) == r["gamma"]
    assert r["efficiency"] == pytest.approx(r["speedup"] / r["predicted_speedup"])
    assert (r["c"] == 0) == (r["drafter"] == "ngram") and r["drafter_params"] >= 0
  for png in ("speedup_vs_gamma.png", "acceptance_per_position.png"):
    assert (out / png).read_bytes()[:4] == b"\x89PNG"
  md = (out / "results.md").read_text()
  assert md.startswith("| drafter | B | T | γ |") and md.count("\n") == 2 + len(rows)


@pytest.mark.slow
def test_demo_config_without_weights_falls_back_to_tiny(capsys):
  import ml_collections  # pylint: disable=import-outside-toplevel
  from specjax.bench import gamma  # pylint: disable=import-outside-toplevel
  config = gamma.tiny_random_config()
  config.target = ml_collections.ConfigDict({"checkpoint": "demo/no_such_target"})
  config.drafter = ml_collections.ConfigDict({"checkpoint": "demo/no_such_drafter"})
  config, target, drafter_model, is_demo = gamma.load_pair(config)
  assert not is_demo and "NOTE: demo weights not found" in capsys.readouterr().out
  assert target.config.d_model == 64 and drafter_model.config.d_model == 32
  # only the shipped demo names fall back; a user's missing checkpoint is an error naming it
  config.target = ml_collections.ConfigDict({"checkpoint": "no/such/target"})
  with pytest.raises(CheckpointError, match="checkpoint not found: 'no/such/target'"):
    gamma.load_pair(config)


@pytest.mark.slow
def test_walltime_table_and_curves(gamma_run, tmp_path, capsys):
  capsys.readouterr()
  assert bench("walltime", *TINY, "--gammas=2", "--drafters=draft_model,ngram,self", "--temperatures=0",
               f"--benchmark_json={gamma_run / 'results.json'}", f"--out_dir={tmp_path}") == 0
  stdout = capsys.readouterr().out
  assert (tmp_path / "walltime_curves.png").read_bytes()[:4] == b"\x89PNG"
  table = (tmp_path / "table2.md").read_text()
  assert table in stdout + "\n"
  for needle in ("| Leviathan et al. | T5-XXL 11B (EnDe) | T5-small | 77M | 0 | 7 | 0.75 | 0.02 | 3.2X | 3.4X |",
                 "| T5-large | 800M | 0 | 7 | 0.82 | 0.11 | 2.5X | 1.7X |", "config drafter", "| ngram |",
                 "target itself", "arXiv 2211.17192"):
    assert needle in table, needle
  data = json.loads((tmp_path / "reproduce.json").read_text())
  assert data["meta"]["points_from"] == str(gamma_run / "results.json")
  rows = data["rows"]
  assert {r["drafter"] for r in rows} == {"draft_model", "ngram", "self"}
  me = next(r for r in rows if r["drafter"] == "self")
  assert me["alpha"] > 0.9 and me["c"] == 1.0  # the target drafting for itself: (nearly) all accepted, c = 1


@pytest.mark.slow
def test_hf_tokens_identical_and_batch_refusal(tmp_path, capsys):
  pytest.importorskip("torch")
  pytest.importorskip("transformers")
  args = [a for a in TINY if not a.startswith("--batch_sizes")]
  assert bench("hf", *args, "--batch_sizes=1,2", "--gamma=3", "--torch_threads=1", f"--out_dir={tmp_path}") == 0
  stdout = capsys.readouterr().out
  data = json.loads((tmp_path / "compare_hf.json").read_text())
  assert data["meta"]["all_identical"] is True and data["meta"]["torch_threads"] == 1
  by = {(r["batch_size"], r["method"].split(" (")[0]): r for r in data["rows"]}
  for b in (1, 2):
    for method in ("transformers generate", "specjax generate", "specjax speculative_generate"):
      assert by[(b, method)]["identical_to_hf_greedy"] is True, (b, method)
  assert by[(1, "transformers assisted")]["identical_to_hf_greedy"] is True
  refused = by[(2, "transformers assisted")]
  assert refused["tokens_per_s"] is None and "refused by transformers" in refused["note"]
  assert "refused by transformers" in stdout and (tmp_path / "hf" / "target" / "config.json").is_file()


@pytest.mark.slow
def test_families_one_table_over_families(tmp_path):
  """Every family runs through specjax.experiment.run; greedy rows equal autoregressive; c, v, params filled."""
  families = "draft_model,ngram,specinfer,medusa,mtp"
  assert bench("families", "--pair=configs/tiny_random.py", f"--families={families}", "--batch_sizes=1",
               "--temperatures=0", "--max_new_tokens=8", "--repeats=1", f"--out_dir={tmp_path}",
               "--variant=sparse:specinfer:drafter.paths=chain3+1x1:drafter.gamma=3") == 0
  rows = {r["family"]: r for r in json.loads((tmp_path / "families.json").read_text())["rows"]}
  assert list(rows) == families.split(",") + ["sparse"]
  for r in rows.values():
    assert r["identical_to_autoregressive"] is True and r["lossy"] is False
    assert r["v"] > 0 and r["c"] >= 0 and r["tokens_per_iteration"] >= 1
  assert rows["draft_model"]["c"] > 0 and rows["draft_model"]["drafter_params"] > 0
  assert rows["ngram"]["drafter_params"] == 0 and rows["mtp"]["drafter_params"] > 0
  assert rows["specinfer"]["drafted_nodes"] == 1 + 1 + 3 * 6 and rows["sparse"]["drafted_nodes"] == 4
  assert "| sparse |" in (tmp_path / "families.md").read_text()
  with open(tmp_path / "families.csv") as fh:
    assert [r["family"] for r in csv.DictReader(fh)] == list(rows)


@pytest.mark.slow
def test_families_lossy_variant_runs_with_allow_lossy(tmp_path, capsys):
  """A lossy variant is refused unless the variant sets allow_lossy=True; then its row is flagged."""
  # the shapes of test_families_one_table_over_families: its draft_model row's prefill, verify-pass
  # and drafter-state programs are reused (only the sampled ones compile)
  common = ["--pair=configs/tiny_random.py", "--families=", "--batch_sizes=1", "--temperatures=1",
            "--max_new_tokens=8", "--repeats=1", f"--out_dir={tmp_path}"]
  assert bench("families", *common, "--variant=l:draft_model:lenience=0.5") == 2
  assert "allow_lossy=True" in capsys.readouterr().err
  assert bench("families", *common, "--variant=l:draft_model:lenience=0.5:allow_lossy=True") == 0
  (row,) = json.loads((tmp_path / "families.json").read_text())["rows"]
  assert row["family"] == "l" and row["lossy"] is True and "(lossy)" in (tmp_path / "families.md").read_text()


@pytest.mark.slow
def test_batch_refill_and_sweep(tmp_path):
  # the sweep's one batch size is the refill comparison's: its decoders are compiled once for both
  assert bench("batch", "--batch_sizes=2", "--drafters=ngram", "--num_prompts=4", "--max_new_tokens=6",
               "--refill_batch=2", f"--out_dir={tmp_path}") == 0
  data = json.loads((tmp_path / "bench_batch.json").read_text())
  assert [r["decoder"] for r in data["refill"]] == ["autoregressive", "ngram"]
  for r in data["refill"]:
    assert r["same_tokens"] is True and r["tokens"] > 0 and 0 < r["refill_utilization"] <= 1
  assert [(r["batch"], r["drafter"]) for r in data["sweep"]] == [(2, "ngram")]
  for r in data["sweep"]:
    assert r["same_tokens"] is True and r["speedup"] > 0 and r["v"] > 0 and r["predicted"] > 0
  md = (tmp_path / "bench_batch.md").read_text()
  assert "**Refill at batch 2**" in md and "| 2 | ngram |" in md and "**NO**" not in md
  assert (tmp_path / "speedup_vs_batch.png").read_bytes()[:4] == b"\x89PNG"


@pytest.mark.slow
def test_large_vocab_rows_per_vocab_and_sampling(tmp_path):
  assert bench("large_vocab", "--vocabs=64", "--samplings=greedy,top-p", "--batch=2", "--max_new_tokens=4",
               "--prompt_len=4", "--repeats=1", "--children=1,2", "--gamma=2", f"--out_dir={tmp_path}",
               "--name=smoke") == 0
  data = json.loads((tmp_path / "smoke.json").read_text())
  assert [(r["vocab"], r["sampling"]) for r in data["rows"]] == [(64, "greedy"), (64, "top-p 0.9")]
  assert data["meta"]["tree_nodes"] == 4 and data["meta"]["children"] == [1, 2]
  for r in data["rows"]:
    for key in ("ar_ms", "chain_spec_ms", "chain_floor_ms", "tree_spec_ms", "tree_floor_ms"):
      assert r[key] > 0, key
  md = (tmp_path / "smoke.md").read_text()
  assert "| chain gamma=2 iteration (ms) |" in md and "| 64 | top-p 0.9 |" in md


@pytest.mark.slow
def test_profile_pieces_of_one_step(tmp_path):
  # small rate probes: the floors only need positive rates (the defaults take seconds on 2 cores)
  assert bench("profile", "--batch_sizes=1", "--prompt_len=8", "--max_new_tokens=8", "--gamma=2", "--repeats=1",
               "--copy_mb=4", "--matmul_n=128", f"--out_dir={tmp_path}", "--out_name=smoke") == 0
  data = json.loads((tmp_path / "profile_smoke.json").read_text())
  (row,) = data["rows"]
  assert row["batch"] == 1 and row["minimal_same_tokens"] is True and row["iterations"] >= 1
  for key in ("ar_ms_per_step", "minimal_ms_per_step", "draft_ms", "verify_ms", "accept_ms", "commit_ms",
              "iteration_in_loop_ms", "floor_bytes_ms", "floor_flops_ms"):
    assert row[key] > 0, key
  assert row["pieces_ms"] == pytest.approx(row["draft_ms"] + row["verify_ms"] + row["accept_ms"] + row["commit_ms"])
  assert data["rates"]["copy_bytes_per_s"] > 0 and data["rates"]["matmul_flops_per_s"] > 0
  md = (tmp_path / "profile_smoke.md").read_text()
  assert "| B | AR ms/step |" in md and "- B=1:" in md


def test_compile_depth_and_precision_commands(tmp_path):
  import jax  # pylint: disable=import-outside-toplevel
  cache_was = jax.config.jax_enable_compilation_cache
  assert bench("compile_depth", "--depths=2", "--d_model=32", "--mlp_dim=64", "--max_new_tokens=2", "--repeats=1",
               f"--out_dir={tmp_path}", "--name=depth") == 0
  rows = json.loads((tmp_path / "depth.json").read_text())["rows"]
  assert [(r["depth"], r["layout"]) for r in rows] == [(2, "unrolled"), (2, "scanned")]
  assert all(r["generate_first_s"] > 0 and r["speculative_ms_per_token"] > 0 for r in rows)
  assert jax.config.jax_enable_compilation_cache == cache_was  # it turns the cache off for itself only
  assert bench("precision", "--models=demo/drafter", "--max_new_tokens=4", "--repeats=1", f"--out_dir={tmp_path}",
               "--name=prec") == 0
  rows = json.loads((tmp_path / "prec.json").read_text())["rows"]
  assert [r["setting"] for r in rows] == ["float32", "bf16 params, f32 compute", "bfloat16"]
  assert rows[0]["vs_float32"] == 1.0 and rows[0]["same_tokens_as_float32"] and all(r["ms_per_token"] > 0 for r in rows)
  assert "| demo/drafter | bfloat16 (bfloat16 / bfloat16 / bfloat16) |" in (tmp_path / "prec.md").read_text()
