"""Every drafter family on one target, one table: params, c, v, alpha, tokens per pass, speedup.

  python -m specjax.bench families                      # demo target, all families, B 1 and 8, T 0 and 1
  python -m specjax.bench families --families=draft_model,specinfer --batch_sizes=1 --temperatures=0
  python -m specjax.bench families --variant=specinfer_w2:specinfer:specinfer.children=2,1,1,1,1,1,1:specinfer.gamma=7
  python -m specjax.bench families --variant=typical:medusa:medusa.acceptance=typical:allow_lossy=True
  python -m specjax.bench families --families=medusa,mtp --drafter_option=medusa.tree=chain4+1x1 \
      --drafter_option=medusa.gamma=4
  nice -n 10 python -m specjax.bench families --target=smollm2-135m-instruct   # a real target, held-out prompts
  python -m specjax.bench families --target=gemma3-270m --drafters=ngram,medusa:gemma3/medusa
  python -m specjax.bench families --target=smollm2-135m-instruct --drafters=medusa,medusa_typical,deep=medusa \
      --drafter_option=deep.tree=chain4+1x2

**Demo target** (no ``--target``): each family is a config of configs/ (a kind's declared demos), and each
row one ``specjax.experiment.run`` (the CLI's measurement): the autoregressive baseline and the
speculative run timed alternately in one process (so load drifts hit both), c = one drafting round
/ gamma / one target step, v = one verify pass / one target step, both measured for every drafter.
``--variant=name:family:key=value:...`` adds a row set with config keys changed (``drafter.x`` or
``KIND.x`` for an option of the family's drafter kind, read as the option's type as
``--drafter_option`` reads it; other keys' values parse as int, float, bool (True/False), comma lists
of ints, else text). ``--drafter_option=KIND.OPTION=VALUE`` sets the option in every row set of
that kind (``NAME.OPTION=VALUE``: the row set so named). ``--pair`` swaps in another config's
target, drafter model and prompt length (heads then random). Writes ``families.{json,csv,md}``
under ``--out_dir`` (default benchmarks/families).

**A real target** (``--target``, anything ``specjax.load_pretrained`` takes): the drafters trained for
it on the held-out split of ``python -m specjax.train data`` (``--data``: stdlib files and gettext
catalogues no training row came from), a fixed mix of code / "Translate to German" chat / English
text. ``--drafters`` lists the rows, each ``[NAME=]ROW_OR_KIND[:CHECKPOINT]``: a row of
:func:`specjax.bench.real_rows.row_table` (the drafters trained for SmolLM2-135M at their trained
settings, each declared by its kind's ``KindSpec.rows``; e.g. ``medusa_typical`` is
``medusa:smollm2/medusa`` with ``medusa.acceptance=typical``) or any registered kind;
``--drafter_option=KIND.OPTION=VALUE`` (or ``ROW.OPTION=VALUE``) changes them (an option no row
takes is an error), and every row is built by ``specjax.drafters.build``.
B=8 runs the 8 prompts as one batch; B=1 runs the first ``--b1_prompts`` one at a time (tokens and
times summed). Per row: the two decoders timed alternately (:func:`specjax.measure.paired_times`)
after a compile run; ``c`` and ``v`` from :func:`specjax.measure.costs`; expected speedup = tokens
per pass / (gamma c + v). ``c (full V)``: the same drafter with a full-vocabulary head (random
weights; only its cost matters), i.e. what truncation saves. Lossy rows (Medusa's typical
acceptance, T > 0 only) are flagged LOSSY. Writes ``real.{json,md}`` under ``--out_dir`` (default
benchmarks/real); ``--merge`` reruns only the ``--drafters`` rows in an existing real.json.
"""
from __future__ import annotations

import csv
import dataclasses
import datetime

from specjax.bench import common

def demo_families() -> dict:
  """family -> (config file, overrides): every registered kind's demos (``KindSpec.demos``)."""
  from specjax import drafters  # pylint: disable=import-outside-toplevel
  return {demo.name: (demo.config, dict(demo.overrides)) for spec in drafters.specs() for demo in spec.demos}


def demo_kind(filename: str, overrides: dict) -> str:
  """The drafter kind of a row set: its ``drafter.kind`` override, else its config's."""
  return overrides.get("drafter.kind") or load_config(filename).drafter.kind


COLUMNS = ("family", "drafter", "batch_size", "temperature", "gamma", "drafted_nodes", "drafter_params", "c", "v",
           "alpha", "mean_accepted", "tokens_per_iteration", "baseline_tokens_per_s", "tokens_per_s", "speedup",
           "expected_speedup", "batch_utilization", "identical_to_autoregressive", "lossy", "acceptance_per_position",
           "conditional_acceptance_per_position")
DEMO_ONLY = ("variant", "pair")


# ----------------------------------------------------------------------------- the demo target
def load_config(filename: str):
  from specjax import experiment  # pylint: disable=import-outside-toplevel
  return experiment.normalize(common.load_config_file(common.REPO / "configs" / filename))


def parse_value(text: str):
  """A --variant value: True/False, int, float, a comma list of ints, else the text itself."""
  if text in ("True", "False", "true", "false"):
    return text.lower() == "true"
  if "," in text:
    try:
      return tuple(int(x) for x in text.split(",") if x)
    except ValueError:
      return text
  for cast in (int, float):
    try:
      return cast(text)
    except ValueError:
      pass
  return text


def option_value(kind: str, field: str, text: str):
  """A drafter option's value read as its type (``specjax.drafters.option_values``, as --drafter_option does);
  a config field that is not one of the kind's options reads as :func:`parse_value`."""
  from specjax import drafters  # pylint: disable=import-outside-toplevel
  if field not in {f.name for f in dataclasses.fields(drafters.options_class(kind))}:
    return parse_value(text)
  return drafters.option_values(kind, [f"{kind}.{field}={text}"])[field]


def parse_variant(text: str) -> tuple:
  """``name:family:key=value:...`` -> (name, config file, overrides). A key is a config key
  (``drafter.OPTION`` for the drafter section) or ``KIND.OPTION`` (the --drafter_option form) of
  the family's kind; the drafter's options read as their types, other values as :func:`parse_value`."""
  name, _, rest = text.partition(":")
  family, *pairs = rest.split(":")
  families = demo_families()
  if family not in families:
    raise common.UsageError(f"--variant {text!r}: unknown family {family!r}; expected one of {list(families)}")
  filename, overrides = families[family][0], dict(families[family][1])
  split = []
  for pair in pairs:
    key, sep, value = pair.partition("=")
    if not sep:
      raise common.UsageError(f"--variant {text!r}: {pair!r} is not key=value")
    split.append((key, value))
  kind = dict(split).get("drafter.kind") or demo_kind(filename, overrides)
  for key, value in split:
    section, _, field = key.rpartition(".")
    if section == kind:  # KIND.OPTION=VALUE: the drafter section's field
      key, section = f"drafter.{field}", "drafter"
    try:
      overrides[key] = option_value(kind, field, value) if section == "drafter" else parse_value(value)
    except ValueError as e:
      raise common.UsageError(f"--variant {text!r}: {e}") from e
  return name, filename, overrides


def with_drafter_options(sets, option_texts) -> list:
  """``sets`` with ``--drafter_option=OWNER.OPTION=VALUE`` set in every row set whose kind or name is
  OWNER (the name last); a string no row set takes is an error."""
  from specjax.bench import real_rows  # pylint: disable=import-outside-toplevel
  if not option_texts:
    return list(sets)
  owned = [real_rows.option_owner(t) for t in option_texts]
  used, out = set(), []
  for name, filename, overrides in sets:
    kind = demo_kind(filename, overrides)
    overrides = dict(overrides)
    for owner in dict.fromkeys((kind, name)):
      for i, (o, rest) in enumerate(owned):
        if o != owner:
          continue
        field, _, value = rest.partition("=")
        try:
          overrides[f"drafter.{field}"] = option_value(kind, field, value)
        except ValueError as e:
          raise common.UsageError(f"--drafter_option={option_texts[i]}: {e}") from e
        used.add(i)
    out.append((name, filename, overrides))
  unused = [option_texts[i] for i in range(len(owned)) if i not in used]
  if unused:
    raise common.UsageError(f"--drafter_option={unused[0]}: no row set is of that kind or name "
                            f"(rows: {', '.join(s[0] for s in sets)})")
  return out


def family_config(name, filename, overrides, batch, temperature, *, pair: str, max_new_tokens: int, repeats: int):
  """The run config of one row: the family's config, ``pair``'s models, ``overrides``, batch and temperature."""
  from specjax import experiment  # pylint: disable=import-outside-toplevel
  config = load_config(filename)
  with config.unlocked():
    if pair:  # another target: draft models from the pair, heads random (they were trained for the demo)
      other = experiment.normalize(common.load_config_file(pair))
      config.target, config.prompt_len = other.target, other.prompt_len
      if experiment.uses_small_model(config.drafter.kind):
        config.drafter.checkpoint, config.drafter.model = other.drafter.get("checkpoint", ""), other.drafter.get("model")
      else:
        config.drafter.checkpoint = ""
    for key, value in overrides.items():  # "drafter.tree" sets config.drafter.tree
      section, _, field = key.rpartition(".")
      holder = config[section] if section else config
      if field not in holder:
        raise common.UsageError(f"{name}: unknown config key {key!r} for configs/{filename}")
      try:
        holder[field] = value
      except TypeError as e:  # ConfigDict keeps a field's type
        raise common.UsageError(f"{name}: {key}={value!r}: {e}") from e
    config.batch_size, config.temperature = batch, float(temperature)
    config.max_new_tokens, config.repeats = max_new_tokens, repeats
  return config


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


def run_demo(fv, argv, batches, temps) -> int:
  import jax  # pylint: disable=import-outside-toplevel
  from tqdm import tqdm  # pylint: disable=import-outside-toplevel
  from specjax import experiment  # pylint: disable=import-outside-toplevel
  families = demo_families()
  names = list(families) if fv.families is None else fv.families
  unknown = [f for f in names if f not in families]
  if unknown:
    raise common.UsageError(f"--families: unknown {unknown}; expected some of {list(families)}")
  sets = with_drafter_options([(f, *families[f]) for f in names] + [parse_variant(v) for v in fv.variant],
                              fv.drafter_option)
  max_new, repeats = fv.max_new_tokens or 192, fv.repeats or 3
  configs = [(s[0], family_config(*s, b, t, pair=fv.pair, max_new_tokens=max_new, repeats=repeats))
             for s in sets for b in batches for t in temps]  # every key checked before anything runs
  out = common.out_dir(fv.out_dir or "benchmarks/families")
  rows = []
  with tqdm(configs, desc="drafter families") as bar:
    for name, config in bar:
      bar.set_postfix_str(f"{name} B={config.batch_size} T={config.temperature:g}")
      try:
        s = experiment.run(config, verbose=False)
      except ValueError as e:  # refused before anything compiles
        if "lossy configuration refused" not in str(e):
          raise
        raise common.UsageError(f"{name}: {str(e).split('. Set ')[0]}; a --variant runs it with :allow_lossy=True")
      rows.append({**{k: s.get(k) for k in COLUMNS}, "family": name})  # per-position lists: JSON, CSV as text
      # written after every row: a long sweep that dies keeps what it measured
      meta = {"argv": list(argv), "devices": [str(d) for d in jax.devices()], "jax": jax.__version__,
              "max_new_tokens": max_new, "repeats": repeats,
              "date": datetime.datetime.now().isoformat(timespec="seconds")}
      common.write_json(out / "families.json", {"meta": meta, "rows": rows}, default=str)
      (out / "families.md").write_text(markdown(rows) + "\n")
      with open(out / "families.csv", "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=COLUMNS)
        w.writeheader()
        w.writerows(rows)
  print(markdown(rows))
  print(f"wrote {out}/families.json, families.csv, families.md")
  return 0


# ----------------------------------------------------------------------------- flags
def _flags():
  from absl import flags  # pylint: disable=import-outside-toplevel
  from specjax.bench import families_real  # pylint: disable=import-outside-toplevel
  fv = flags.FlagValues()
  flags.DEFINE_string("target", "", "empty: the demo target and configs/; else a real target "
                      "(specjax.load_pretrained) and the drafters trained for it", flag_values=fv)
  flags.DEFINE_list("families", None, f"rows; demo: any of {', '.join(demo_families())} (default all); --target: "
                    "the same as --drafters", flag_values=fv)
  flags.DEFINE_multi_string("variant", [], "demo: extra row sets, name:family:key=value:key=value (a key: a config "
                            "key, drafter.OPTION, or KIND.OPTION of the family's kind)", flag_values=fv)
  flags.DEFINE_multi_string("drafter_option", [], "KIND.OPTION=VALUE (or ROW.OPTION=VALUE) for every row of that kind "
                            "(or name), read as the option's type, e.g. medusa.tree=chain4+1x1; repeatable",
                            flag_values=fv)
  flags.DEFINE_string("pair", "", "demo: a config whose target, drafter and prompt_len replace the demo's "
                      "(e.g. configs/tiny_random.py); heads are then random", flag_values=fv)
  flags.DEFINE_list("batch_sizes", "1,8", "batch sizes", flag_values=fv)
  flags.DEFINE_list("temperatures", "0,1", "sampling temperatures", flag_values=fv)
  flags.DEFINE_integer("max_new_tokens", None, "tokens per row (default 192; --target: 96)", flag_values=fv)
  flags.DEFINE_integer("repeats", None, "timed runs of each decoder, alternating (default 3; --target: 1)",
                       flag_values=fv)
  flags.DEFINE_string("out_dir", "", "where the tables go (default benchmarks/families; --target: benchmarks/real)",
                      flag_values=fv)
  families_real.define_flags(fv)
  return fv


def _run(fv, argv) -> int:
  from specjax.bench import families_real  # pylint: disable=import-outside-toplevel
  mode, other = ("--target", DEMO_ONLY) if fv.target else ("the demo target", families_real.REAL_ONLY)
  wrong = [f"--{name}" for name in other if fv[name].present]
  if wrong:
    raise common.UsageError(f"{', '.join(wrong)}: not used with {mode}")
  batches = common.parse_list(fv.batch_sizes, int, "batch_sizes", lambda b: b >= 1)
  temps = common.parse_list(fv.temperatures, float, "temperatures", lambda t: t >= 0)
  if fv.target:
    return families_real.run(fv, argv, batches, temps)
  return run_demo(fv, argv, batches, temps)


def main(argv) -> int:
  fv = _flags()
  return common.run_task(fv, argv, __doc__, "families", lambda: _run(fv, argv))
