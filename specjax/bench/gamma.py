"""Gamma x batch x temperature sweep of one pair: speedup, alpha, c, v and the walltime formula.

  python -m specjax.bench gamma                                  # demo pair, full sweep
  python -m specjax.bench gamma --config=configs/tiny_random.py --gammas=1,2 --batch_sizes=1 \\
      --temperatures=0 --max_new_tokens=8 --repeats=1 --out_dir=/tmp/bench

For each (drafter, batch, temperature) it times the autoregressive baseline once, measures c (one
drafter step / one target step, both timed as autoregressive generate, per step), then for every
gamma times speculative decoding and measures v (one jitted target forward over gamma + 1 tokens
with a cache / one over 1 token, :func:`specjax.measure.verify_cost`). Every timing is the median
of ``--repeats`` runs after one compile + warm-up run (:func:`specjax.measure.median_time`), so
speedups are ratios measured in the same run. Writes ``results.csv``, ``results.json``,
``results.md``, ``speedup_vs_gamma.png`` and ``acceptance_per_position.png`` under ``--out_dir``,
and prints the markdown table. ``--config.x=...`` overrides config keys (e.g.
``--config.prompt_len=64``).
"""
from __future__ import annotations

import csv
import datetime
import pathlib

from specjax.bench import common

DRAFTER_KINDS = ("draft_model", "ngram", "self")
CSV_COLUMNS = ("drafter", "batch_size", "temperature", "gamma", "baseline_tokens_per_s", "tokens_per_s", "speedup",
               "predicted_speedup", "efficiency", "alpha", "alpha_iid", "mean_accepted", "tokens_per_iteration",
               "acceptance_per_position", "c", "v", "target_calls", "baseline_target_calls",
               "identical_to_autoregressive", "drafter_params")


# ----------------------------------------------------------------------------- setup
def tiny_random_config():
  return common.load_config_file(common.REPO / "configs" / "tiny_random.py")


def load_pair(config):
  """(config with defaults, target, drafter model or None, is_demo); demo config without weights -> tiny."""
  from specjax import experiment  # pylint: disable=import-outside-toplevel
  config = experiment.normalize(config)
  is_demo = bool(config.target.get("checkpoint")) and experiment.demo_available(config)
  if config.target.get("checkpoint") and not is_demo:
    print("NOTE: demo weights not found under specjax/assets/demo; running the TINY RANDOM pair of "
          "configs/tiny_random.py instead (train them with python -m specjax.train demo).")
    tiny = tiny_random_config()
    config.target, config.drafter = tiny.target, tiny.drafter
  target = experiment.load_model(config.target, config.seed)[0]
  spec = experiment.small_model_spec(config)
  drafter_model = experiment.load_model(spec, config.seed + 1)[0] if spec else None
  return config, target, drafter_model, is_demo


def config_prompts(config, batch: int, is_demo: bool, vocab_size: int):
  """(prompts_BxP, lengths_B) of the config at batch ``batch`` (the demo's byte tokenizer on the demo pair)."""
  from specjax import prompts as prompts_lib  # pylint: disable=import-outside-toplevel
  from specjax.data.tokenizer import ByteTokenizer  # pylint: disable=import-outside-toplevel
  cfg = config.copy_and_resolve_references()
  cfg.batch_size = batch
  return prompts_lib.from_config(cfg, ByteTokenizer() if is_demo else None, vocab_size)


def make_drafter(kind: str, target, models: dict, ngram_n: int = 3):
  """(drafter, model whose autoregressive step is the drafter's cost, or None for c = 0).

  ``kind``: ``ngram``, ``self`` (the target drafts for itself: alpha = 1 at temperature 0, c = 1),
  or a key of ``models`` (``draft_model``: the config's drafter; the walltime command adds checkpoints).
  """
  import specjax  # pylint: disable=import-outside-toplevel
  if kind == "ngram":  # a lookup, no model: c ~ 0 as for Leviathan's bigram drafter
    return specjax.drafters.NGram(ngram_n), None
  if kind == "self":
    return specjax.drafters.DraftModel(target), target
  if models.get(kind) is not None:
    return specjax.drafters.DraftModel(models[kind]), models[kind]
  raise common.UsageError(f"unknown drafter {kind!r}; expected ngram, self or one of {sorted(models)}")


# ----------------------------------------------------------------------------- timing
class Sweep:
  """Runs the sweep; baselines, c and v are measured once per shape and reused across gammas."""

  def __init__(self, config, target, models: dict, *, max_new_tokens: int, repeats: int, is_demo: bool):
    self.config, self.target, self.models = config, target, models
    self.max_new_tokens, self.repeats, self.is_demo = max_new_tokens, repeats, is_demo
    self.steps, self.vs = {}, {}  # (model, batch, temperature) -> timings; (batch, gamma) -> v

  def prompts(self, batch: int):
    return config_prompts(self.config, batch, self.is_demo, self.target.vocab_size)

  def common(self, temperature: float):
    import jax  # pylint: disable=import-outside-toplevel
    import specjax  # pylint: disable=import-outside-toplevel
    sampling = specjax.Sampling(float(temperature), self.config.top_k, self.config.top_p)
    return dict(max_new_tokens=self.max_new_tokens, sampling=sampling, rng=jax.random.PRNGKey(self.config.seed))

  def step_time(self, model, batch: int, temperature: float) -> tuple:
    """(output, seconds, seconds per autoregressive step) of ``model``; cached per (model, batch, temperature)."""
    import specjax  # pylint: disable=import-outside-toplevel
    key = (id(model), batch, temperature)
    if key not in self.steps:
      prompts, lengths = self.prompts(batch)
      out, t = specjax.measure.median_time(
          lambda: specjax.generate(model, prompts, lengths, **self.common(temperature)), self.repeats)
      self.steps[key] = (out, t, t / max(out.stats["iterations"], 1))
    return self.steps[key]

  def v(self, batch: int, gamma: int) -> float:
    """One cached target forward over gamma + 1 tokens / one over 1 token (same cache, same length)."""
    import specjax  # pylint: disable=import-outside-toplevel
    if (batch, gamma) not in self.vs:
      prompts, lengths = self.prompts(batch)
      max_len = prompts.shape[1] + self.max_new_tokens + gamma + 1
      self.vs[(batch, gamma)] = specjax.measure.verify_cost(self.target, prompts, lengths, gamma + 1, max_len,
                                                            max(self.repeats, 5))
    return self.vs[(batch, gamma)]

  def row(self, kind: str, batch: int, temperature: float, gamma: int) -> dict:
    import numpy as np  # pylint: disable=import-outside-toplevel
    import specjax  # pylint: disable=import-outside-toplevel
    from specjax import theory  # pylint: disable=import-outside-toplevel
    base, t_base, target_step = self.step_time(self.target, batch, temperature)
    drafter, cost_model = make_drafter(kind, self.target, self.models)
    c = self.step_time(cost_model, batch, temperature)[2] / target_step if cost_model is not None else 0.0
    prompts, lengths = self.prompts(batch)
    spec, t_spec = specjax.measure.median_time(lambda: specjax.speculative_generate(
        self.target, drafter, prompts, lengths, gamma=gamma, **self.common(temperature)), self.repeats)
    st, v = spec.stats, self.v(batch, gamma)
    speedup = (t_base / t_spec) * float(np.sum(spec.lengths)) / max(float(np.sum(base.lengths)), 1.0)
    predicted = float(theory.walltime_improvement(st["alpha"], gamma, c, v))
    return {
        "drafter": kind, "batch_size": batch, "temperature": float(temperature), "gamma": gamma,
        "baseline_tokens_per_s": float(np.sum(base.lengths) / t_base),
        "tokens_per_s": float(np.sum(spec.lengths) / t_spec),
        "speedup": speedup, "predicted_speedup": predicted, "efficiency": speedup / predicted,
        "alpha": st["alpha"],
        "alpha_iid": float(theory.alpha_from_acceptance(st["accepted_per_position"], st["drafted_per_position"])[0]),
        "mean_accepted": st["mean_accepted"], "tokens_per_iteration": st["tokens_per_iteration"],
        "acceptance_per_position": st["acceptance_per_position"], "c": c, "v": v,
        "target_calls": st["target_calls"], "baseline_target_calls": base.stats["target_calls"],
        # exactness check for free: greedy speculative output must equal greedy autoregressive output
        "identical_to_autoregressive": bool(np.array_equal(spec.tokens, base.tokens)) if temperature == 0 else None,
        "drafter_params": cost_model.num_params if cost_model is not None else 0,
    }

  def run(self, kinds, batches, temperatures, gammas, progress: bool = True) -> list[dict]:
    from tqdm import tqdm  # pylint: disable=import-outside-toplevel
    combos = [(k, b, t, g) for k in kinds for b in batches for t in temperatures for g in gammas]
    rows = []
    with tqdm(combos, desc="sweep", disable=not progress) as bar:
      for kind, b, t, g in bar:
        bar.set_postfix_str(f"{kind} B={b} T={t} gamma={g}")
        rows.append(self.row(kind, b, t, g))
    return rows


# ----------------------------------------------------------------------------- outputs
def markdown_table(rows) -> str:
  head = ("| drafter | B | T | γ | AR tok/s | spec tok/s | speedup | formula | efficiency | α | α iid "
          "| mean acc | c | v | = AR |\n|" + "---|" * 15)
  lines = [head]
  for r in rows:
    same = {True: "yes", False: "**NO**", None: "n/a"}[r["identical_to_autoregressive"]]
    lines.append(f"| {r['drafter']} | {r['batch_size']} | {r['temperature']:g} | {r['gamma']} "
                 f"| {r['baseline_tokens_per_s']:.1f} | {r['tokens_per_s']:.1f} | {r['speedup']:.2f}x "
                 f"| {r['predicted_speedup']:.2f}x | {r['efficiency']:.2f} | {r['alpha']:.3f} | {r['alpha_iid']:.3f} "
                 f"| {r['mean_accepted']:.2f} | {r['c']:.3f} | {r['v']:.2f} | {same} |")
  return "\n".join(lines)


def _plot_panels(rows, path, draw, **axes_kw):
  """One panel per (drafter, temperature), one colour per batch size: ``draw(ax, rows_by_gamma, b, color)``."""
  import matplotlib  # pylint: disable=import-outside-toplevel
  import matplotlib.ticker  # pylint: disable=import-outside-toplevel
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt  # pylint: disable=import-outside-toplevel
  kinds = list(dict.fromkeys(r["drafter"] for r in rows))
  temps = list(dict.fromkeys(r["temperature"] for r in rows))
  batches = sorted({r["batch_size"] for r in rows})
  fig, axes = plt.subplots(len(kinds), len(temps), figsize=(4.5 * len(temps), 3.5 * len(kinds)), squeeze=False)
  for i, kind in enumerate(kinds):
    for j, temp in enumerate(temps):
      ax = axes[i][j]
      for k, b in enumerate(batches):
        sel = sorted((r for r in rows if (r["drafter"], r["temperature"], r["batch_size"]) == (kind, temp, b)),
                     key=lambda r: r["gamma"])
        if sel:
          draw(ax, sel, b, f"C{k}")
      ax.xaxis.set_major_locator(matplotlib.ticker.MaxNLocator(integer=True))
      ax.set(title=f"{kind}, temperature {temp:g}", **axes_kw)
      ax.legend(fontsize=7)
  fig.tight_layout()
  fig.savefig(path, dpi=110)
  plt.close(fig)


def plot_speedup(rows, path):
  import numpy as np  # pylint: disable=import-outside-toplevel
  from specjax import theory  # pylint: disable=import-outside-toplevel

  def draw(ax, sel, b, color):
    g = np.array([r["gamma"] for r in sel])
    alpha = float(np.mean([r["alpha"] for r in sel]))  # one alpha for the curve: the sweep's mean
    curve = theory.walltime_improvement(alpha, g, sel[0]["c"], np.array([r["v"] for r in sel]))
    ax.plot(g, curve, "-", color=color, alpha=0.6, label=f"B={b} formula (α={alpha:.2f}, c={sel[0]['c']:.2f})")
    ax.plot(g, [r["speedup"] for r in sel], "o", color=color, label=f"B={b} measured")
    ax.axhline(1.0, color="gray", lw=0.8, ls=":")

  _plot_panels(rows, path, draw, xlabel="gamma", ylabel="speedup over autoregressive")


def plot_acceptance(rows, path):
  import numpy as np  # pylint: disable=import-outside-toplevel

  def draw(ax, sel, b, color):
    r = sel[-1]  # the longest draft shows every position
    pos = np.arange(1, r["gamma"] + 1)
    ax.plot(pos, r["acceptance_per_position"], "o-", color=color, label=f"B={b} measured")
    ax.plot(pos, r["alpha_iid"] ** pos, "--", color=color, alpha=0.6, label=f"B={b} i.i.d. α^i")

  _plot_panels(rows, path, draw, xlabel="draft position i", ylim=(0, 1.05), ylabel="P(draft i accepted)")


def write_outputs(rows, meta, out_dir) -> pathlib.Path:
  out = common.out_dir(out_dir)
  with open(out / "results.csv", "w", newline="") as fh:
    w = csv.DictWriter(fh, fieldnames=CSV_COLUMNS)
    w.writeheader()
    for r in rows:
      w.writerow({**r, "acceptance_per_position": ";".join(f"{x:.4f}" for x in r["acceptance_per_position"])})
  common.write_json(out / "results.json", {"meta": meta, "rows": rows})
  (out / "results.md").write_text(markdown_table(rows) + "\n")
  plot_speedup(rows, out / "speedup_vs_gamma.png")
  plot_acceptance(rows, out / "acceptance_per_position.png")
  return out


# ----------------------------------------------------------------------------- flags
def define_sweep_flags(fv, *, gammas="1,2,3,4,5,6,7", drafters="draft_model,ngram", batch_sizes="1,8",
                       temperatures="0,1", out_dir="benchmarks/results", drafters_help=None) -> None:
  """The sweep's flags on ``fv`` (the walltime command takes them too, with its own defaults)."""
  from absl import flags  # pylint: disable=import-outside-toplevel
  from ml_collections import config_flags  # pylint: disable=import-outside-toplevel
  config_flags.DEFINE_config_file("config", str(common.REPO / "configs" / "demo.py"), "experiment config file",
                                  flag_values=fv)
  flags.DEFINE_list("gammas", gammas, "draft lengths to sweep", flag_values=fv)
  flags.DEFINE_list("drafters", drafters, drafters_help or "draft_model | ngram | self (target drafts)",
                    flag_values=fv)
  flags.DEFINE_list("batch_sizes", batch_sizes, "batch sizes to sweep", flag_values=fv)
  flags.DEFINE_list("temperatures", temperatures, "sampling temperatures to sweep", flag_values=fv)
  flags.DEFINE_integer("max_new_tokens", None, "tokens per row (default: the config's)", flag_values=fv)
  flags.DEFINE_integer("repeats", None, "timed runs per measurement (default: the config's)", flag_values=fv)
  flags.DEFINE_string("out_dir", out_dir, "where the tables, JSON and plots go", flag_values=fv)


def config_filename(fv) -> str:
  from ml_collections import config_flags  # pylint: disable=import-outside-toplevel
  return config_flags.get_config_filename(fv["config"])


def _run(fv, argv) -> int:
  gammas = common.parse_list(fv.gammas, int, "gammas", lambda g: g >= 1)
  kinds = common.parse_list(fv.drafters, str, "drafters", lambda k: k in DRAFTER_KINDS)
  batches = common.parse_list(fv.batch_sizes, int, "batch_sizes", lambda b: b >= 1)
  temps = common.parse_list(fv.temperatures, float, "temperatures", lambda t: t >= 0)
  import jax  # pylint: disable=import-outside-toplevel
  config, target, drafter_model, is_demo = load_pair(fv.config)
  if "draft_model" in kinds and drafter_model is None:
    raise common.UsageError("--drafters=draft_model needs a config with a `drafter` model")
  max_new = fv.max_new_tokens or config.max_new_tokens
  repeats = fv.repeats or config.repeats
  sweep = Sweep(config, target, {"draft_model": drafter_model}, max_new_tokens=max_new, repeats=repeats,
                is_demo=is_demo)
  rows = sweep.run(kinds, batches, temps, gammas)
  meta = {"config": config_filename(fv), "demo_weights": is_demo,
          "target_params": target.num_params,
          "drafter_params": drafter_model.num_params if drafter_model is not None else 0,
          "prompt_len": config.prompt_len, "max_new_tokens": max_new, "repeats": repeats,
          "devices": [str(d) for d in jax.devices()], "jax": jax.__version__,
          "argv": list(argv), "date": datetime.datetime.now().isoformat(timespec="seconds")}
  out = write_outputs(rows, meta, fv.out_dir)
  print(markdown_table(rows))
  print(f"wrote {out}/results.csv, results.json, results.md, speedup_vs_gamma.png, acceptance_per_position.png")
  return 0


def main(argv) -> int:
  from absl import flags  # pylint: disable=import-outside-toplevel
  fv = flags.FlagValues()
  define_sweep_flags(fv)
  return common.run_task(fv, argv, __doc__, "gamma", lambda: _run(fv, argv))
