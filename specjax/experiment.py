"""A run config -> loaded target, drafter and prompts, and the measured run (``python -m specjax.run``).

A config is an ``ml_collections.ConfigDict`` with two nested sections and run keys:

* ``target``: ``checkpoint`` (anything ``specjax.load_pretrained`` takes: a registered name, a .gguf
  file, an HF folder, a specjax bundle or a name under specjax/assets), or a model family's config
  fields for a random init (``{"family": "decoder", "d_model": 64, ...}``).
* ``drafter``: ``kind`` (a registered drafter kind, ``specjax.drafters.kinds()``) and that kind's
  options (``gamma``, ``checkpoint`` and its own fields; defaults and names are the kind's options
  dataclass, ``specjax.drafters.options_class(kind)``); ``model``: family fields of a random-init
  small model (draft_model / specinfer without a checkpoint, and the dry run's drafter shapes).
* run keys (:data:`RUN_DEFAULTS`): prompts, sampling, batch, adaptivity, mesh, timing.

Keys of the older flat layout (``drafter_kind``, ``gamma``, ``ngram_n``, ``medusa_tree``, ...) are
errors that name the new key. Everything is checked before a model is loaded.
"""
from __future__ import annotations

import dataclasses
import importlib
import pathlib

import jax
import ml_collections
import numpy as np

import specjax
from specjax import loading, measure, theory
from specjax import prompts as prompts_lib
from specjax.data.tokenizer import ByteTokenizer
from specjax.models import families
from specjax.suggest import did_you_mean

# Run keys with their defaults; a config may omit the ones it does not care about.
RUN_DEFAULTS = dict(batch_size=1, prompt_len=32, max_new_tokens=64, temperature=0.0, top_k=0, top_p=1.0,
                    lenience=1.0, eos_id=-1, stop_at_eos=True, seed=0, repeats=3, mesh="", distributed=False,
                    prompt="", prompts_file="", chat=False, refill=False, adaptive=True, confidence=0.4,
                    verify_slope=-1.0, allow_lossy=False, imports=())
# Keys read by the dry run and the paper configs only.
PLANNING_KEYS = ("name", "hardware", "alpha", "latency", "paper", "calibrate", "collective_latency_us")
# The flat layout's keys and where they live now.
MOVED = {"drafter_kind": "drafter.kind", "gamma": "drafter.gamma", "ngram_n": "drafter.n",
         "table_order": "drafter.order", "specinfer_children": "drafter.children",
         "specinfer_paths": "drafter.paths", "specinfer_siblings": "drafter.siblings",
         "medusa_heads": "drafter.checkpoint", "medusa_tree": "drafter.tree", "medusa_top_k": "drafter.top_k",
         "medusa_acceptance": "drafter.acceptance", "medusa_num_heads": "drafter.num_heads",
         "eagle_tree": "drafter.tree", "eagle_paths": "drafter.paths", "eagle_siblings": "drafter.siblings",
         "eagle_top_k": "drafter.top_k", "eagle_total_tokens": "drafter.total_tokens"}
SMALL_MODEL_KINDS = ("draft_model", "specinfer")


def normalize(config) -> ml_collections.ConfigDict:
  """A checked copy with every run key present; raises on moved, unknown or misspelt keys."""
  config = ml_collections.ConfigDict(config.to_dict() if hasattr(config, "to_dict") else dict(config))
  for old, new in MOVED.items():
    if old in config:
      raise ValueError(f"config key {old!r} is now {new!r} (e.g. --config.{new}=...)")
  known = set(RUN_DEFAULTS) | set(PLANNING_KEYS) | {"target", "drafter"}
  for key in config:
    if key not in known:
      raise ValueError(f"unknown config key {key!r}{did_you_mean(key, sorted(known))}")
  for key, value in RUN_DEFAULTS.items():
    if key not in config:
      config[key] = value
  if "target" not in config:
    raise ValueError("the config has no target section (config.target.checkpoint or model fields)")
  drafter = dict(config.get("drafter") or {})
  drafter.setdefault("kind", "draft_model")
  config.drafter = ml_collections.ConfigDict(drafter)
  for module in config.imports:  # user modules that register their own drafters
    importlib.import_module(module)
  specjax.drafters.make_options(config.drafter.kind, drafter_options(config))  # unknown kind/option: error now
  return config


def drafter_section(kind: str, **values) -> ml_collections.ConfigDict:
  """A config's ``drafter`` section: ``kind`` and every option of the kind at its default, then
  ``values`` (so each option can be overridden from the command line)."""
  options = dataclasses.asdict(specjax.drafters.make_options(kind, {}))
  options.pop("seed")
  unknown = set(values) - set(options) - {"model"}
  if unknown:
    specjax.drafters.make_options(kind, {k: values[k] for k in unknown})  # raises, naming the key
  return ml_collections.ConfigDict({"kind": kind, **options, **values})


def drafter_options(config) -> dict:
  """The drafter section as the kind's options: ``kind`` and ``model`` taken out, ``seed`` filled in,
  and options of other registered kinds (left by a ``--config.drafter.kind=`` switch) dropped; a key
  that is no kind's option stays, so the kind's options check names it."""
  kind = config.drafter.kind
  own = {f.name for f in dataclasses.fields(specjax.drafters.options_class(kind))}
  others = {f.name for k in specjax.drafters.kinds() for f in dataclasses.fields(specjax.drafters.options_class(k))}
  values = {k: v for k, v in dict(config.drafter).items()
            if k not in ("kind", "model") and (k in own or k not in others)}
  values.setdefault("seed", config.get("seed", 0))
  return {k: tuple(v) if isinstance(v, list) else v for k, v in values.items()}


def gamma_of(config) -> int:
  return specjax.drafters.make_options(config.drafter.kind, drafter_options(config)).gamma


def load_model(spec, seed: int):
  """``(model, tokenizer or None)``: a checkpoint, or a random init from the family's config fields."""
  spec = dict(spec)
  if spec.get("checkpoint"):
    return loading.load_pretrained(spec["checkpoint"])
  return families.from_fields(spec, seed), None


def make_drafter(config, target):
  """The config's drafter for ``target`` (``config`` normalized)."""
  kind, options = config.drafter.kind, drafter_options(config)
  model_fields = config.drafter.get("model")
  if kind in SMALL_MODEL_KINDS and not options.get("checkpoint"):
    if not model_fields:
      raise ValueError(f"drafter kind {kind!r} needs drafter.checkpoint (a small model with the target's "
                       "tokenizer) or drafter.model (fields of a random one); for a target without one use "
                       "--config.drafter.kind=ngram")
    small = families.from_fields(dict(model_fields), config.seed + 1)
    if kind == "draft_model":
      return specjax.drafters.DraftModel(small)
    opts = specjax.drafters.make_options(kind, options)
    paths = tuple(map(tuple, specjax.tree.parse_chain_paths(opts.paths))) if opts.paths else ()
    return specjax.drafters.SpecInfer(small, tuple(opts.children), opts.siblings, paths)
  return specjax.drafters.build(kind, options, target)


def small_model_spec(config) -> dict | None:
  """The drafter section's small model as a model spec: its checkpoint, or its ``model`` fields."""
  if config.drafter.get("checkpoint"):
    return {"checkpoint": config.drafter.checkpoint}
  return dict(config.drafter.model) if config.drafter.get("model") else None


def demo_available(config) -> bool:
  """False only when the config names shipped demo weights (``demo/...``) that are not there."""
  names = [config.target.get("checkpoint"), config.drafter.get("checkpoint")]
  demo = [n for n in names if n and str(n).startswith("demo/")]
  return all((loading.ASSETS / n).exists() or pathlib.Path(n).exists() for n in demo)


def eos_of(config, tok):
  """-1: the tokenizer's EOS (the byte-level demo's text has none); None: run to max_new_tokens."""
  if not config.stop_at_eos:
    return None
  if config.eos_id >= 0:
    return int(config.eos_id)
  return tok.eos_id if tok is not None and not isinstance(tok, ByteTokenizer) else None


def run(config, verbose: bool = True, report=None) -> dict:
  """Baseline and speculative decoding on the config's prompts; returns the summary.

  ``report(summary, prompts, lengths, spec_output, tokenizer, sampling)`` prints it (the CLI's).
  """
  config = normalize(config)
  if not demo_available(config):
    print("NOTE: demo weights not found under specjax/assets/demo; running a TINY RANDOM pair instead.")
    config.target = dict(family="decoder", vocab_size=264, d_model=64, num_layers=2, num_heads=4,
                         num_kv_heads=4, head_dim=16, mlp_dim=128)
    config.drafter.checkpoint = ""
    config.drafter.model = dict(family="decoder", vocab_size=264, d_model=32, num_layers=1, num_heads=2,
                                num_kv_heads=2, head_dim=16, mlp_dim=64)
  gamma = gamma_of(config)
  sampling = specjax.Sampling(config.temperature, config.top_k, config.top_p)
  target, tok = load_model(config.target, config.seed)
  drafter = make_drafter(config, target)
  prompts, lengths = prompts_lib.from_config(config, tok, target.vocab_size)
  reason = specjax.decode.lossy_reason(drafter, sampling, config.lenience)
  if reason is not None and not config.allow_lossy:  # before anything compiles
    raise ValueError(f"lossy configuration refused: {reason}. Set --config.allow_lossy=True to run it anyway")
  common = dict(max_new_tokens=config.max_new_tokens, sampling=sampling, rng=jax.random.PRNGKey(config.seed),
                eos_id=eos_of(config, tok))
  if config.refill and len(prompts) > config.batch_size:  # continuous refill: batch_size rows at a time
    common["batch_size"] = int(config.batch_size)
  mesh = specjax.make_mesh(config.mesh) if config.mesh else None
  if mesh is not None:
    target, drafter = specjax.shard(target, mesh), specjax.shard(drafter, mesh)
    common["mesh"] = mesh
  tree = drafter.tree
  num_nodes = tree.num_nodes if tree is not None else gamma + 1  # verify input: root + drafts
  _say(verbose, "measuring c and v (compiles one drafting round and the verify pass)")
  with specjax.sharding.decode_context(mesh):  # c, v: the drafter's round and the verify pass vs one step
    c, v = measure.costs(target, drafter, prompts, lengths, gamma, num_nodes, sampling,
                         prompts.shape[1] + config.max_new_tokens + num_nodes)
  adaptive = None
  if config.adaptive and tree is None:
    # a noisy v (a loaded machine can measure v < 1) must not make drafting look free: floor 0.1
    slope = config.verify_slope if config.verify_slope >= 0 else max((v - 1.0) / gamma, 0.1)
    adaptive = specjax.Adaptive(confidence=config.confidence, verify_slope=slope)
  spec_fn = lambda: specjax.speculative_generate(target, drafter, prompts, lengths, gamma=gamma,
                                                 lenience=config.lenience, adaptive=adaptive,
                                                 allow_lossy=config.allow_lossy, **common)
  base_fn = lambda: specjax.generate(target, prompts, lengths, **common)
  _say(verbose, f"compiling and timing both decoders ({config.repeats} timed runs each, alternating)")
  base, spec, t_base, t_spec = measure.paired_times(base_fn, spec_fn, config.repeats)
  summary = _summary(config, target, drafter, prompts, base, spec, t_base, t_spec, c, v, gamma, adaptive, common)
  if report is not None:
    report(summary, prompts, lengths, spec, tok, sampling)
  return summary


def _summary(config, target, drafter, prompts, base, spec, t_base, t_spec, c, v, gamma, adaptive, common):
  st = spec.stats
  mean_width = float(np.dot(st.get("verify_widths", [gamma]), st["width_histogram"])
                     / max(sum(st["width_histogram"]), 1))
  return {
      "target": str(config.target.get("checkpoint") or "random init"),
      "eos_id": common["eos_id"],
      "drafter": config.drafter.kind,
      "drafter_options": drafter_options(config),
      "gamma": gamma,
      "drafted_nodes": gamma if drafter.tree is None else drafter.tree.num_nodes - 1,  # per verify pass
      "batch_size": int(common.get("batch_size", prompts.shape[0])),
      "num_prompts": int(prompts.shape[0]),
      "refill": "batch_size" in common,
      "temperature": config.temperature, "top_k": config.top_k, "top_p": config.top_p,
      "lossy": st["lossy"], "lossy_reason": st["lossy_reason"],
      "adaptive": None if adaptive is None else dataclasses.asdict(adaptive),
      "mean_submitted": st["mean_submitted"],
      "submitted_histogram": st["submitted_histogram"],
      "width_histogram": st["width_histogram"],
      "verify_widths": st.get("verify_widths", [gamma]),
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
      # measured tokens per iteration (valid for trees too; adaptive rounds at their mean width, with v
      # interpolated linearly); both use the measured c and v
      "predicted_speedup": float(theory.walltime_improvement(st["alpha"], gamma, c, v)),
      "expected_speedup": float(st["tokens_per_iteration"] / (gamma * c + 1.0 + (v - 1.0) * mean_width / gamma)),
      "target_params": target.num_params,
      "drafter_params": drafter.num_params,
      "identical_to_autoregressive": bool(np.array_equal(spec.tokens, base.tokens)),
  }


def _say(verbose: bool, msg: str) -> None:
  if verbose:
    print(f"[specjax] {msg}", flush=True)


def print_report(s, prompts, lengths, spec, tok, sampling):
  """The CLI's report: two rows of text, then timings, acceptance and the exactness check."""
  if tok is not None:
    for row in range(min(2, len(prompts))):
      print(f"--- prompt {row} " + "-" * 50)
      print(tok.decode(prompts[row, :lengths[row]]), end="")
      print("\033[1m" + tok.decode(spec.tokens[row, :spec.lengths[row]]) + "\033[0m")
  else:
    print("generated ids (row 0):", spec.tokens[0, :spec.lengths[0]].tolist())
  print("-" * 66)
  print(f"drafter={s['drafter']} gamma={s['gamma']} batch={s['batch_size']} temperature={s['temperature']}"
        + (f"  [LOSSY: {s['lossy_reason']}]" if s["lossy"] else ""))
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
