"""One table over every drafter family on the same target: params, c, v, alpha, accepted, speedup.

  python scripts/compare_drafters.py                       # demo target, all families, B 1 and 8, T 0 and 1
  python scripts/compare_drafters.py --families=draft_model,specinfer --batch_sizes=1 --temperatures=0
  python scripts/compare_drafters.py --variant=specinfer_w2:specinfer:specinfer_children=2,1,1,1,1,1,1:gamma=7

Each row is one ``specjax.experiment.run`` (the CLI's measurement): the autoregressive baseline and the
speculative run timed alternately in one process (so load drifts hit both), c = one drafting round
/ gamma / one target step, v = one verify pass / one target step, both measured for every drafter.
Writes ``families.{json,csv,md}`` under ``--out_dir`` and prints the markdown table.
"""
from __future__ import annotations

import csv
import datetime
import importlib.util
import json
import pathlib
import sys

from absl import app, flags
import jax
from tqdm.auto import tqdm

from specjax import experiment

REPO = pathlib.Path(__file__).resolve().parent.parent
# family -> (config file, overrides)
FAMILIES = {
    "draft_model": ("demo.py", {}),
    "ngram": ("demo.py", {"drafter.kind": "ngram", "drafter.gamma": 4}),
    "table": ("table_demo.py", {}),
    "specinfer": ("specinfer_demo.py", {}),
    "medusa": ("medusa_demo.py", {}),
    "mtp": ("mtp_demo.py", {}),
    "dflash": ("dflash_demo.py", {}),
    "eagle": ("eagle_demo.py", {}),
    "eagle_static": ("eagle_demo.py", {"drafter.tree": "static"}),
    "eagle_dynamic": ("eagle_demo.py", {"drafter.tree": "dynamic"}),
}
COLUMNS = ("family", "drafter", "batch_size", "temperature", "gamma", "drafted_nodes", "drafter_params", "c", "v",
           "alpha", "mean_accepted", "tokens_per_iteration", "baseline_tokens_per_s", "tokens_per_s", "speedup",
           "expected_speedup", "batch_utilization", "identical_to_autoregressive", "lossy", "acceptance_per_position",
           "conditional_acceptance_per_position")

_FAMILIES = flags.DEFINE_list("families", list(FAMILIES), f"families to run, from {list(FAMILIES)}")
_VARIANTS = flags.DEFINE_multi_string("variant", [], "extra row sets: name:family:key=value:key=value")
_BATCHES = flags.DEFINE_list("batch_sizes", "1,8", "batch sizes")
_TEMPS = flags.DEFINE_list("temperatures", "0,1", "sampling temperatures")
_MAX_NEW = flags.DEFINE_integer("max_new_tokens", 192, "tokens per row")
_REPEATS = flags.DEFINE_integer("repeats", 3, "timed runs of each decoder (alternating)")
_OUT_DIR = flags.DEFINE_string("out_dir", "benchmarks/families", "where families.{json,csv,md} go")
_PAIR = flags.DEFINE_string("pair", "", "a config whose target, drafter and prompt_len replace the demo's "
                            "(e.g. configs/tiny_random.py); heads are then random")


def load_config(filename: str):
  spec = importlib.util.spec_from_file_location(filename[:-3], REPO / "configs" / filename)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return experiment.normalize(module.get_config())


def _value(text: str):
  if "," in text:
    return tuple(int(x) for x in text.split(",") if x)
  for cast in (int, float):
    try:
      return cast(text)
    except ValueError:
      pass
  return text


def parse_variant(text: str) -> tuple:
  """``name:family:key=value:...`` -> (name, config file, overrides)."""
  name, family, *pairs = text.split(":")
  if family not in FAMILIES:
    raise app.UsageError(f"--variant {text!r}: unknown family {family!r}; expected one of {list(FAMILIES)}")
  overrides = dict(FAMILIES[family][1])
  for pair in pairs:
    key, sep, value = pair.partition("=")
    if not sep:
      raise app.UsageError(f"--variant {text!r}: {pair!r} is not key=value")
    overrides[key] = _value(value)
  return name, FAMILIES[family][0], overrides


def row(name, filename, overrides, batch, temperature) -> dict:
  config = load_config(filename)
  with config.unlocked():
    if _PAIR.value:  # another target: draft models from the pair, heads random (they were trained for the demo)
      pair = load_config(pathlib.Path(_PAIR.value).name)
      config.target, config.prompt_len = pair.target, pair.prompt_len
      if config.drafter.kind in experiment.SMALL_MODEL_KINDS:
        config.drafter.checkpoint, config.drafter.model = pair.drafter.get("checkpoint", ""), pair.drafter.get("model")
      else:
        config.drafter.checkpoint = ""
    for key, value in overrides.items():  # "drafter.tree" sets config.drafter.tree
      section, _, field = key.rpartition(".")
      holder = config[section] if section else config
      if field not in holder:
        raise app.UsageError(f"{name}: unknown config key {key!r} for configs/{filename}")
      holder[field] = value
    config.batch_size, config.temperature = batch, float(temperature)
    config.max_new_tokens, config.repeats = _MAX_NEW.value, _REPEATS.value
  s = experiment.run(config, verbose=False)
  return {**{k: s.get(k) for k in COLUMNS}, "family": name}  # the per-position lists: JSON, CSV as text


def markdown(rows) -> str:
  lines = ["| family | B | T | γ | drafted nodes | drafter params | c | v | α | tokens/iter | AR tok/s "
           "| spec tok/s | speedup | expected | = AR |", "|" + "---|" * 15]
  for r in rows:
    same = {True: "yes", False: "**NO**"}.get(r["identical_to_autoregressive"], "n/a") if r["temperature"] == 0 else "n/a"
    lines.append(f"| {r['family']}{' (lossy)' if r['lossy'] else ''} | {r['batch_size']} | {r['temperature']:g} "
                 f"| {r['gamma']} | {r['drafted_nodes']} | {r['drafter_params']:,} | {r['c']:.3f} | {r['v']:.2f} "
                 f"| {r['alpha']:.3f} | {r['tokens_per_iteration']:.2f} | {r['baseline_tokens_per_s']:.1f} "
                 f"| {r['tokens_per_s']:.1f} | {r['speedup']:.2f}x | {r['expected_speedup']:.2f}x | {same} |")
  return "\n".join(lines)


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments: {argv[1:]}")
  unknown = [f for f in _FAMILIES.value if f not in FAMILIES]
  if unknown:
    raise app.UsageError(f"--families: unknown {unknown}; expected some of {list(FAMILIES)}")
  sets = [(f, *FAMILIES[f]) for f in _FAMILIES.value] + [parse_variant(v) for v in _VARIANTS.value]
  combos = [(s, int(b), float(t)) for s in sets for b in _BATCHES.value for t in _TEMPS.value]
  out = pathlib.Path(_OUT_DIR.value)
  out.mkdir(parents=True, exist_ok=True)
  rows = []
  with tqdm(combos, desc="drafter families") as bar:
    for (name, filename, overrides), b, t in bar:
      bar.set_postfix_str(f"{name} B={b} T={t:g}")
      rows.append(row(name, filename, overrides, b, t))
      # written after every row: a long sweep that dies keeps what it measured
      meta = {"argv": sys.argv, "devices": [str(d) for d in jax.devices()], "jax": jax.__version__,
              "max_new_tokens": _MAX_NEW.value, "repeats": _REPEATS.value,
              "date": datetime.datetime.now().isoformat(timespec="seconds")}
      (out / "families.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=2, default=str) + "\n")
      (out / "families.md").write_text(markdown(rows) + "\n")
      with open(out / "families.csv", "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=COLUMNS)
        w.writeheader()
        w.writerows(rows)
  print(markdown(rows))
  print(f"wrote {out}/families.json, families.csv, families.md")


if __name__ == "__main__":
  app.run(main)
