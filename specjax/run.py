"""``python -m specjax.run --config=configs/X.py``: generate, measure, compare with the formula.

Runs the autoregressive baseline and speculative decoding on the same prompts in one process,
times both after a compile run, prints generated text and statistics, and (``--json_out``) writes
a JSON summary. ``--dry_run`` plans a config with abstract shapes instead (specjax.dryrun).
"""
from __future__ import annotations

import dataclasses
import importlib
import json
import pathlib
import sys

from absl import app, flags
import jax
import numpy as np
from ml_collections import config_flags
from tqdm.auto import tqdm

import specjax
from specjax import loading, measure, theory
from specjax import prompts as prompts_lib
from specjax.data.tokenizer import ByteTokenizer

ASSETS = loading.ASSETS
_DEFAULT_CONFIG = pathlib.Path(__file__).parent.parent / "configs" / "demo.py"

_CONFIG = config_flags.DEFINE_config_file("config", str(_DEFAULT_CONFIG), "experiment config file")
_JSON_OUT = flags.DEFINE_string("json_out", None, "write the summary JSON here")
_DRY_RUN = flags.DEFINE_bool("dry_run", False, "lower with abstract shapes on a fake mesh; no weights")
# Keys a run reads, with their defaults; paper configs may omit the ones they don't care about.
RUN_DEFAULTS = dict(drafter_kind="draft_model", ngram_n=3, gamma=4, batch_size=1, prompt_len=32,
                    max_new_tokens=64, temperature=0.0, top_k=0, top_p=1.0, lenience=1.0, eos_id=-1,
                    stop_at_eos=True, seed=0, repeats=3, mesh="", distributed=False, prompt="", prompts_file="",
                    chat=False, refill=False, adaptive=True, confidence=0.4, verify_slope=-1.0,
                    allow_lossy=False, imports=())


def with_defaults(config):
  config = config.copy_and_resolve_references()
  with config.unlocked():
    for key, value in RUN_DEFAULTS.items():
      if key not in config:
        config[key] = value
  return config


def load_model(spec, seed: int):
  """``(model, tokenizer or None)`` from a config's model spec: ``checkpoint`` (anything
  ``specjax.load_pretrained`` takes: a registered name, a .gguf file, an HF folder, a bundle or a
  name under specjax/assets) or a random init from the family's config fields."""
  spec = dict(spec)
  if spec.get("checkpoint"):
    return loading.load_pretrained(spec["checkpoint"])
  family = spec.pop("family", "decoder")
  spec.pop("checkpoint", None)
  if family == "decoder":
    from specjax.models.decoder import Decoder as module_cls, DecoderConfig as cfg_cls  # pylint: disable=import-outside-toplevel
  elif family == "t5":
    from specjax.models.t5 import T5 as module_cls, T5Config as cfg_cls  # pylint: disable=import-outside-toplevel
  else:
    raise ValueError(f"unknown model family {family!r}; expected 'decoder' or 't5'")
  try:
    cfg = cfg_cls(**spec)
  except TypeError as e:
    raise ValueError(f"bad {family} model config key: {e}") from e
  return specjax.models.bundle.init_model(module_cls(cfg), seed), None


def build_model(spec, seed: int):
  return load_model(spec, seed)[0]


def demo_available(config) -> bool:
  """False only when the config names shipped demo weights (``demo/...``) that are not there."""
  names = [config.target.get("checkpoint"), config.drafter.get("checkpoint")]
  if config.get("drafter_kind") != "draft_model":  # the other drafters need no drafter weights
    names = names[:1]
  demo = [n for n in names if n and str(n).startswith("demo/")]
  return all((ASSETS / n).exists() or pathlib.Path(n).exists() for n in demo)


def make_prompts(config, vocab_size: int, is_code_model: bool):
  """The demo's held-out code prompts (byte-level), else random ids; see specjax.prompts."""
  return prompts_lib.from_config(config, ByteTokenizer() if is_code_model else None, vocab_size)


# Flat config keys -> (drafter kind, option name) of the registry's options dataclasses.
_FLAT_OPTIONS = {"ngram_n": ("ngram", "n"), "table_order": ("table", "order"),
                 "specinfer_children": ("specinfer", "children"), "specinfer_paths": ("specinfer", "paths"),
                 "specinfer_siblings": ("specinfer", "siblings"), "medusa_heads": ("medusa", "checkpoint"),
                 "medusa_tree": ("medusa", "tree"), "medusa_top_k": ("medusa", "top_k"),
                 "medusa_acceptance": ("medusa", "acceptance"), "medusa_num_heads": ("medusa", "num_heads"),
                 "eagle_tree": ("eagle", "tree"), "eagle_paths": ("eagle", "paths"),
                 "eagle_siblings": ("eagle", "siblings"), "eagle_top_k": ("eagle", "top_k"),
                 "eagle_total_tokens": ("eagle", "total_tokens")}


def drafter_options(config) -> dict:
  """The registry options of ``config.drafter_kind`` from the config: gamma, seed, the drafter's
  checkpoint and the kind's own keys."""
  kind = config.drafter_kind
  names = {f.name for f in dataclasses.fields(specjax.drafters.options_class(kind))}
  values = {"gamma": config.gamma, "seed": config.seed}
  if config.get("drafter") and config.drafter.get("checkpoint") and "checkpoint" in names:
    values["checkpoint"] = config.drafter.checkpoint
  for key, (owner, option) in _FLAT_OPTIONS.items():
    if owner == kind and key in config and option in names:
      value = config[key]
      values[option] = tuple(value) if isinstance(value, (list, tuple)) else value
  return values


def make_drafter(config, drafter_model, target):
  """The config's drafter for ``target``, from the registry (``drafter_model``: a random-init small model)."""
  kind = config.drafter_kind
  if kind in ("draft_model", "specinfer") and drafter_model is not None:  # a random-init small model
    drafter = specjax.drafters.DraftModel(drafter_model)
    if kind == "draft_model":
      return drafter
    options = specjax.drafters.make_options(kind, {k: v for k, v in drafter_options(config).items() if k != "checkpoint"})
    from specjax import tree as tree_lib  # pylint: disable=import-outside-toplevel
    paths = tuple(map(tuple, tree_lib.parse_chain_paths(options.paths))) if options.paths else ()
    return specjax.drafters.SpecInfer(drafter_model, tuple(options.children), options.siblings, paths)
  return specjax.drafters.build(kind, drafter_options(config), target)


def run(config, verbose: bool = True) -> dict:
  """Baseline and speculative decoding on the config's prompts; returns (and prints) the summary."""
  config = with_defaults(config)
  for module in config.imports:  # user modules that register their own drafters
    importlib.import_module(module)
  specjax.drafters.options_class(config.drafter_kind)  # unknown kind: a clear error before loading anything
  if config.drafter_kind == "draft_model" and not (config.get("drafter") and (
      config.drafter.get("checkpoint") or config.drafter.get("d_model"))):
    raise ValueError("drafter_kind='draft_model' needs drafter.checkpoint (or a drafter config); for a target "
                     f"without a trained drafter use --config.drafter_kind=ngram (one of {specjax.drafters.kinds()})")
  if not demo_available(config):
    print("NOTE: demo weights not found under specjax/assets/demo; running a TINY RANDOM pair instead "
          "(train them with scripts/train_demo.py).")
    config.target = dict(family="decoder", vocab_size=264, d_model=64, num_layers=2, num_heads=4,
                         num_kv_heads=4, head_dim=16, mlp_dim=128)
    config.drafter = dict(family="decoder", vocab_size=264, d_model=32, num_layers=1, num_heads=2,
                          num_kv_heads=2, head_dim=16, mlp_dim=64)
  target, tok = load_model(config.target, config.seed)
  from specjax.models import draft_lm  # pylint: disable=import-outside-toplevel
  drafter_model = (load_model(config.drafter, config.seed + 1)[0]
                   if config.drafter_kind in ("draft_model", "specinfer")
                   and draft_lm.resolve(config.drafter.get("checkpoint")) is None else None)
  drafter = make_drafter(config, drafter_model, target)
  sampling = specjax.Sampling(config.temperature, config.top_k, config.top_p)
  prompts, lengths = prompts_lib.from_config(config, tok, target.vocab_size)
  eos_id = None  # eos_id -1: the tokenizer's (the byte-level demo's text has none)
  if config.stop_at_eos and config.eos_id >= 0:
    eos_id = config.eos_id
  elif config.stop_at_eos and tok is not None and not isinstance(tok, ByteTokenizer):
    eos_id = tok.eos_id
  common = dict(max_new_tokens=config.max_new_tokens, sampling=sampling, rng=jax.random.PRNGKey(config.seed),
                eos_id=eos_id)
  if config.refill and len(prompts) > config.batch_size:  # continuous refill: batch_size rows at a time
    common["batch_size"] = int(config.batch_size)
  mesh = specjax.make_mesh(config.mesh) if config.mesh else None
  if mesh is not None:
    target = specjax.shard(target, mesh)
    drafter_model = specjax.shard(drafter_model, mesh) if drafter_model is not None else None
    drafter = make_drafter(config, drafter_model, target)
    common["mesh"] = mesh
  reason = specjax.decode.lossy_reason(drafter, sampling, config.lenience)
  if reason is not None and not config.allow_lossy:  # before anything compiles
    raise ValueError(f"lossy configuration refused: {reason}. Set --config.allow_lossy=True to run it anyway")
  tree = drafter.tree
  num_nodes = tree.num_nodes if tree is not None else config.gamma + 1  # verify input: root + drafts
  with tqdm(total=2, desc="measure c and v, then compile + time (autoregressive and speculative, alternating)",
            leave=False) as bar:
    # c and v: the drafter's round and the verify pass, each against a one-token target step
    max_len = prompts.shape[1] + config.max_new_tokens + num_nodes
    with specjax.sharding.decode_context(mesh):
      c, v = measure.costs(target, drafter, prompts, lengths, config.gamma, num_nodes, sampling, max_len)
    bar.update(1)
    adaptive = None
    if config.adaptive and tree is None:  # verify cost per draft from the measured v unless given
      # a noisy v (a loaded machine can measure v < 1) must not make drafting look free: floor 0.1
      slope = config.verify_slope if config.verify_slope >= 0 else max((v - 1.0) / config.gamma, 0.1)
      adaptive = specjax.Adaptive(confidence=config.confidence, verify_slope=slope)
    spec_fn = lambda: specjax.speculative_generate(target, drafter, prompts, lengths, gamma=config.gamma,
                                                   lenience=config.lenience, adaptive=adaptive,
                                                   allow_lossy=config.allow_lossy, **common)
    base_fn = lambda: specjax.generate(target, prompts, lengths, **common)
    base, spec, t_base, t_spec = measure.paired_times(base_fn, spec_fn, config.repeats)
    bar.update(1)
  st = spec.stats
  summary = {
      "config": pathlib.Path(sys.argv[0]).name,
      "target": str(config.target.get("checkpoint") or "random init"),
      "eos_id": eos_id,
      "drafter": config.drafter_kind,
      "gamma": config.gamma,
      "drafted_nodes": num_nodes - 1,  # per verify pass
      "batch_size": int(common.get("batch_size", prompts.shape[0])),
      "num_prompts": int(prompts.shape[0]),
      "refill": "batch_size" in common,
      "temperature": config.temperature,
      "top_k": config.top_k,
      "top_p": config.top_p,
      "lossy": st["lossy"],
      "lossy_reason": st["lossy_reason"],
      "adaptive": None if adaptive is None else dataclasses.asdict(adaptive),
      "mean_submitted": st["mean_submitted"],
      "submitted_histogram": st["submitted_histogram"],
      "width_histogram": st["width_histogram"],
      "verify_widths": st.get("verify_widths", [config.gamma]),
      "tokens_per_s": float(np.sum(spec.lengths) / t_spec),
      "baseline_tokens_per_s": float(np.sum(base.lengths) / t_base),
      "speedup": t_base / t_spec * float(np.sum(spec.lengths)) / max(float(np.sum(base.lengths)), 1.0),
      "alpha": st["alpha"],
      "mean_accepted": st["mean_accepted"],
      "tokens_per_iteration": st["tokens_per_iteration"],
      "acceptance_per_position": st["acceptance_per_position"],
      "conditional_acceptance_per_position": st["conditional_acceptance_per_position"],
      "iterations": st["iterations"],
      "batch_utilization": st["batch_utilization"],
      "target_calls": st["target_calls"],
      "baseline_target_calls": base.stats["target_calls"],
      "c": round(c, 4),
      "v": round(v, 4),
      # the walltime formula from alpha (i.i.d. chain acceptance), and the same cost model fed the
      # measured tokens per iteration (valid for trees too); both use the measured c and v
      "predicted_speedup": float(theory.walltime_improvement(st["alpha"], config.gamma, c, v)),
      # adaptive rounds verify at their own widths: v interpolated linearly at the mean width used
      "expected_speedup": float(st["tokens_per_iteration"] / (config.gamma * c + 1.0 + (v - 1.0) * _mean_width(st, config.gamma) / config.gamma)),
      "target_params": target.num_params,
      "drafter_params": drafter.num_params,
      "identical_to_autoregressive": bool(np.array_equal(spec.tokens, base.tokens)),
  }
  if verbose:
    print_report(summary, prompts, lengths, spec, tok, sampling)
  return summary


def _mean_width(stats, gamma: int) -> float:
  widths, hist = stats.get("verify_widths", [gamma]), stats["width_histogram"]
  return float(np.dot(widths, hist) / max(sum(hist), 1))


def print_report(s, prompts, lengths, spec, tok, sampling):
  if tok is not None:
    for row in range(min(2, len(prompts))):
      print(f"--- prompt {row} " + "-" * 50)
      print(tok.decode(prompts[row, :lengths[row]]), end="")
      print("\033[1m" + tok.decode(spec.tokens[row, :spec.lengths[row]]) + "\033[0m")
  else:
    print("generated ids (row 0):", spec.tokens[0, :spec.lengths[0]].tolist())
  print("-" * 66)
  print(f"drafter={s['drafter']} gamma={s['gamma']} batch={s['batch_size']} temperature={s['temperature']}"
        + ("  [LOSSY: output is not exactly the target's distribution]" if s["lossy"] else ""))
  print(f"autoregressive: {s['baseline_tokens_per_s']:.1f} tok/s ({s['baseline_target_calls']} target calls)")
  print(f"speculative:    {s['tokens_per_s']:.1f} tok/s ({s['target_calls']} target calls)")
  print(f"speedup {s['speedup']:.2f}x measured | {s['predicted_speedup']:.2f}x predicted by the walltime formula "
        f"(alpha={s['alpha']:.3f}, gamma={s['gamma']}, c={s['c']:.3f}, v={s['v']:.2f}) | "
        f"{s['expected_speedup']:.2f}x from the measured tokens per iteration")
  print(f"mean accepted {s['mean_accepted']:.2f} of {s['mean_submitted']:.2f} submitted drafts/iteration; "
        f"per position {s['acceptance_per_position']}")
  if s["adaptive"] is not None:
    print(f"adaptive draft length: rows submitted 0..{s['gamma']} drafts {s['submitted_histogram']} times; "
          f"verify widths {s['verify_widths']} ran {s['width_histogram']} times")
  if sampling.greedy:
    print("identical to greedy autoregressive output:", "yes" if s["identical_to_autoregressive"] else "NO")


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments: {argv[1:]}")
  config = _CONFIG.value
  if _DRY_RUN.value:
    from specjax import dryrun  # pylint: disable=import-outside-toplevel
    result = dryrun.dry_run(config)
    print(dryrun.format_table(result))
  else:
    if config.get("distributed", False):
      specjax.sharding.initialize_distributed()
    result = run(config)
  if _JSON_OUT.value:
    pathlib.Path(_JSON_OUT.value).write_text(json.dumps(result, indent=2, default=str) + "\n")
    print(f"wrote {_JSON_OUT.value}")


if __name__ == "__main__":
  app.run(main)
