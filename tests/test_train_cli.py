"""``python -m specjax.train <task>``: the dispatcher, every task's ``--help`` and one-line errors, and the
real-target head training (``--data=real``) end to end on tiny settings, in-process.

The end-to-end runs train a few steps on the demo target and a small folder laid out as the ``data``
task writes it; the checks are on what a run writes and that the drafter loaders read it back.
"""
import json
import pathlib
import subprocess
import sys

from absl import flags
import numpy as np
import pytest

from specjax.train import __main__ as train_main
from specjax.train.commands import common

REPO = pathlib.Path(__file__).resolve().parent.parent


def train(*args) -> int:
  return train_main.main(["specjax.train", *map(str, args)])


# --------------------------------------------------------------------------------------------- fast
def test_help_lists_every_task_and_each_help_exits_0(capsys):
  out = subprocess.run([sys.executable, "-m", "specjax.train", "--help"], cwd=REPO, capture_output=True, text=True,
                       check=True).stdout
  listed = [line.split()[0] for line in out.split("tasks:\n")[1].splitlines() if line.strip()]
  assert listed == list(train_main.TASKS)
  assert {"demo", "medusa", "mtp", "dflash", "eagle", "data", "draft_model", "t5_ende"} <= set(listed)
  assert "(module not found)" not in out
  assert out.startswith("usage: python -m specjax.train <task | KIND:CHECKPOINT> [flags]"), out.splitlines()[0]
  for name, module in train_main.TASKS.items():
    assert train(name, "--help") == 0, name
    text = capsys.readouterr().out
    assert train_main.summary(module) in text and "flags:" in text, name
    assert f"python -m specjax.train {name}" in text, name  # the docstring shows how to run it


def test_unknown_task_and_no_task_exit_2(capsys):
  assert train("no_such_task") == 2
  err = capsys.readouterr().err.strip()
  assert len(err.splitlines()) == 1 and "unknown task 'no_such_task'" in err and "medusa" in err
  assert train_main.main(["specjax.train"]) == 2
  assert "tasks:" in capsys.readouterr().out


@pytest.mark.parametrize("args, message", [
    (["medusa", "--k=64"], "--k: not used with --data=generated"),
    (["medusa", "--data=real", "--gen_tokens=8"], "--gen_tokens: not used with --data=real"),
    (["mtp", "--data=real", "--eval_only"], "--eval_only: not used with --data=real"),
    (["mtp", "--data=corpus", "--crop=64"], "--crop: not used with --data=corpus"),
    (["dflash", "--data=real", "--pool=4"], "--pool: not used with --data=real"),
    (["dflash", "--data=nope"], "--data"),
    (["demo", "--stage=nope"], "--stage"),
    (["eagle", "--steps=many"], "--steps"),
    (["draft_model", "stray"], "unexpected arguments"),
    (["data", "--no_such_flag=1"], "no_such_flag"),
    (["t5_ende", "--stage=drafters", "--init_from=somewhere"], "applies to --stage=target only, not --stage=drafters"),
])
def test_bad_flags_are_one_line_and_exit_2(capsys, args, message):
  assert train(*args) == 2
  err = capsys.readouterr().err.strip()
  assert len(err.splitlines()) == 1 and err.startswith(f"{args[0]}: ") and message in err, err


def test_kind_colon_checkpoint_is_the_task_and_its_out_folder(capsys):
  assert train_main.task_args(["p", "mtp:runs/x", "--steps=3"]) == ["p", "mtp", "--out=runs/x", "--steps=3"]
  assert train_main.task_args(["p", "mtp:smollm2/mtp"])[2] == f"--out={REPO / 'specjax/assets/smollm2/mtp'}"
  for args, message in ((["mtp:runs/x", "--out=y"], "drop --out"), (["mtp:"], "no checkpoint after the colon"),
                        (["demo:runs/x"], "'demo' is not one"), (["ngram:runs/x"], "'ngram' is not one")):
    assert train(*args) == 2, args
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and message in err, err
  assert "eagle" in err and "draft_model" in err  # the kinds that train are named


def test_defaults_follow_data():
  """A flag left unset takes the demo default or the real one; one given on the command line wins."""
  defaults = {"steps": ("integer", 1500, 400), "out": ("string", "specjax/assets/demo/medusa", None)}
  fv = flags.FlagValues()
  common.define(fv, "enum", "data", "generated", "mode", enum_values=["generated", "real"])
  common.define_by_data(fv, defaults, {"steps": "optimizer steps", "out": "weights"})
  assert "optimizer steps (default 1500; --data=real: 400)" in fv.get_help()
  fv(["x"])
  assert (common.resolve(fv, defaults, False).steps, common.resolve(fv, defaults, True).steps) == (1500, 400)
  assert common.resolve(fv, defaults, True).out is None  # worked out from --target by the task
  fv.unparse_flags()
  fv(["x", "--data=real", "--steps=7"])
  assert common.resolve(fv, defaults, True).steps == 7


# --------------------------------------------------------------------------------------------- slow
@pytest.mark.slow
@pytest.mark.parametrize("family, extra", [("mtp", ["--eval_gammas=2", "--mlp_dim=64"]),
                                           ("medusa", ["--num_heads=2"]),
                                           ("dflash", ["--eval_gammas=2", "--mlp_dim=64"])])
def test_real_heads_end_to_end(family, extra, tmp_path, capsys):
  """``python -m specjax.train <family> --data=real`` on the demo target and a small folder laid out as
  the data task writes it: it trains, writes weights + vocab_subset.npy + training.json, caches the features,
  and the drafter loaders read it back."""
  rng = np.random.default_rng(0)
  for split, n in (("shards", 24), ("held_out", 8)):
    (tmp_path / "data" / split).mkdir(parents=True)
    np.savez(tmp_path / "data" / split / "00000.npz", prompts=rng.integers(32, 127, (n, 40)).astype(np.int32),
             prompt_lengths=np.full((n,), 40, np.int32), tokens=rng.integers(32, 127, (n, 48)).astype(np.int32),
             lengths=np.full((n,), 48, np.int32), kinds=np.array(["code"] * n), sources=np.array(["x"] * n))
  out = tmp_path / family  # trained as KIND:CHECKPOINT, the name bench and run draft with
  assert train(f"{family}:{out}", "--data=real", f"--target={REPO / 'specjax/assets/demo/target'}",
               f"--data_dir={tmp_path / 'data'}", f"--workdir={tmp_path / 'wd'}",
               "--k=64", "--crop=64", "--steps=4", "--batch=4", *extra) == 0
  stdout = capsys.readouterr().out
  report = json.loads((out / "training.json").read_text())
  assert report["family"] == family and report["k"] == 64 and report["steps"] == 4 and report["train_rows"] == 24
  assert 0 < report["subset_coverage"] <= 1 and report["acceptance_greedy"] and '"held_out_after"' in stdout
  assert np.load(out / "vocab_subset.npy").shape == (64,)
  assert len(list((tmp_path / "data").glob("features_crop64*.npz"))) == 1  # cached for the next run
  import specjax  # pylint: disable=import-outside-toplevel
  target = specjax.checkpoint.load_model(REPO / "specjax/assets/demo/target")
  options = ("medusa.tree=chain2", "medusa.gamma=2") if family == "medusa" else (f"{family}.gamma=3",)
  drafter = specjax.drafters.build(*specjax.drafters.parse_drafter(f"{family}:{out}", options), target)
  assert drafter.subset_K.shape == (64,)
