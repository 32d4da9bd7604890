"""A run config -> loaded target, drafter and prompts, and the measured run (``python -m specjax.run``).

A config is an ``ml_collections.ConfigDict`` with two nested sections and run keys:

* ``target``: ``checkpoint`` (anything ``specjax.load_pretrained`` takes: a registered name, a .gguf
  file, an HF folder, a specjax bundle or a name under specjax/assets), or a model family's config
  fields for a random init (``{"family": "decoder", "d_model": 64, ...}``); ``param_dtype``
  (``auto``: float32 on CPU, bfloat16 on accelerators), ``dtype`` (compute), ``cache_dtype`` and
  ``scan_layers`` (decoders: ``on``, one scan over the layers; ``off``, unrolled; ``auto``: scanned on
  accelerators only).
* ``drafter``: ``kind`` (a registered drafter kind, ``specjax.drafters.kinds()``) and that kind's
  options (``gamma``, ``checkpoint`` and its own fields; defaults and names are the kind's options
  dataclass, ``specjax.drafters.options_class(kind)``); ``model``: family fields of a random-init
  small model (draft_model / specinfer without a checkpoint, and the dry run's drafter shapes).
* run keys (:data:`RUN_DEFAULTS`): prompts, sampling, batch, cache length, adaptivity, mesh, timing,
  output file.

Before anything loads, :mod:`specjax.preflight` reads the models' sizes and context lengths from
metadata and refuses a run that cannot fit in memory; once the prompts are tokenized the cache
length (``max_len``; 0: prompt + max_new_tokens + verify slots) is checked against the context.
User prompts run one row each; more of them than ``batch_size`` rows run with continuous refill.

Keys of the older flat layout (``drafter_kind``, ``gamma``, ``ngram_n``, ``medusa_tree``, ...) are
errors that name the new key. Everything is checked before a model is loaded.
"""
from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import pathlib

import jax
import ml_collections
import numpy as np

import specjax
from specjax import adaptive as adaptive_lib
from specjax import checks
from specjax import loading, measure, precision, preflight, theory
from specjax import prompts as prompts_lib
from specjax import report as report_lib
from specjax.data.tokenizer import ByteTokenizer
from specjax.models import families
from specjax.report import print_outputs, print_report  # noqa: F401  (the CLI's, here since tests use them)
from specjax.drafters.registry import drafter_section  # noqa: F401  (configs and tests read it here too)
from specjax.suggest import did_you_mean

# Run keys with their defaults; a config may omit the ones it does not care about. ``refill`` is
# kept so older configs load: more prompts than batch_size rows always run with continuous refill.
RUN_DEFAULTS = dict(batch_size=1, prompt_len=32, max_new_tokens=64, temperature=0.0, top_k=0, top_p=1.0,
                    lenience=1.0, eos_id=-1, stop_at_eos=True, seed=0, repeats=3, mesh="", distributed=False,
                    prompt="", prompts_file="", chat=False, refill=False, adaptive=True, confidence=0.4,
                    sampled_confidence=0.0,
                    acceptance_memory=-1.0, verify_slope=-1.0, allow_lossy=False, imports=(), max_len=0, output="")
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
  if isinstance(config.max_len, bool) or not isinstance(config.max_len, int) or config.max_len < 0:
    raise ValueError(f"max_len must be an int >= 0 (0: what the run needs), got {config.max_len!r}")
  if isinstance(config.batch_size, bool) or not isinstance(config.batch_size, int) or config.batch_size < 1:
    raise ValueError(f"batch_size must be a positive int (rows decoded at once), got {config.batch_size!r}")
  if "target" not in config:
    raise ValueError("the config has no target section (config.target.checkpoint or model fields)")
  precision.resolve(config.target.get("param_dtype"))  # a bad dtype name: error now
  if str(config.target.get("scan_layers") or "auto") not in SCAN_LAYERS:
    raise ValueError(f"target.scan_layers={config.target.scan_layers!r}; expected one of {', '.join(SCAN_LAYERS)}")
  drafter = dict(config.get("drafter") or {})
  drafter.setdefault("kind", "draft_model")
  config.drafter = ml_collections.ConfigDict(drafter)
  specjax.drafters.import_modules(config.imports)  # user modules that register their own drafters
  specjax.drafters.make_options(config.drafter.kind, drafter_options(config))  # unknown kind/option: error now
  return config


def apply_drafter_overrides(config, overrides: dict) -> None:
  """Sets the command line's drafter options (:func:`specjax.config_util.split_drafter_overrides`) on
  ``config`` (a loaded config file). A ``kind`` there
  brings that kind's options at their defaults (the config's values kept for the options it shares,
  and its ``model``), so ``--config.drafter.kind=X --config.drafter.OPTION=...`` works for any
  registered kind, a user's included (``config.imports`` are imported first). A value is read by the
  type of the option's default; an option the kind does not have is an error naming it."""
  if not overrides:
    return
  specjax.drafters.import_modules(config.get("imports", ()))
  section = dict(config.get("drafter") or {})
  kind = overrides.get("kind", section.get("kind", "draft_model"))
  defaults = dataclasses.asdict(specjax.drafters.make_options(kind, {}))
  defaults.pop("seed")
  if kind != section.get("kind"):  # a switch: the new kind's options, the shared ones as the config had them
    section = {"kind": kind, **defaults, **{k: v for k, v in section.items() if k in defaults or k == "model"}}
  for key, text in overrides.items():
    if key == "kind":
      continue
    if key not in defaults and key != "model":
      specjax.drafters.make_options(kind, {key: text})  # raises, naming the option and the kind's options
    section[key] = _parse_like(text, defaults.get(key, section.get(key)), f"drafter.{key}")
  with config.unlocked() if hasattr(config, "unlocked") else contextlib.nullcontext():
    config.drafter = ml_collections.ConfigDict(section)


def _parse_like(text: str, default, name: str):
  """``text`` as a value of ``default``'s type (bool, int, float, a tuple of ints, else the text)."""
  try:
    if isinstance(default, bool):
      if text.lower() not in ("true", "false", "1", "0"):
        raise ValueError(text)
      return text.lower() in ("true", "1")
    if isinstance(default, (tuple, list)):
      return tuple(int(x) for x in text.strip("()[] ").split(",") if x.strip())
    if isinstance(default, int):
      return int(text)
    if isinstance(default, float):
      return float(text)
  except ValueError as e:
    raise ValueError(f"--config.{name}={text!r}: expected a value of type {type(default).__name__}") from e
  return text


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


SCAN_LAYERS = {"auto": None, "on": True, "off": False}  # target.scan_layers -> DecoderConfig.scan_layers


def load_model(spec, seed: int, mesh=None):
  """``(model, tokenizer or None)``: a checkpoint, or a random init from the family's config fields;
  params stored in the spec's ``param_dtype`` (:mod:`specjax.precision`, default ``"auto"``). With
  ``mesh``, a checkpoint's tensors are placed on it as they are read (a random init is not)."""
  spec = dict(spec)
  param_dtype = spec.pop("param_dtype", "auto")
  if spec.get("checkpoint"):
    overrides = {k: spec[k] for k in ("dtype", "cache_dtype") if spec.get(k)}
    scan = SCAN_LAYERS[str(spec.get("scan_layers") or "auto")]
    if scan is not None:  # "auto": by platform (DecoderConfig.scanned)
      overrides["scan_layers"] = scan
    return loading.load_pretrained(spec["checkpoint"], param_dtype=param_dtype, mesh=mesh, **overrides)
  model = families.from_fields(spec, seed)
  return model.replace(params=precision.cast_params(model.params, param_dtype)), None


def make_drafter(config, target):
  """The config's drafter for ``target`` (``config`` normalized)."""
  kind, options = config.drafter.kind, drafter_options(config)
  model_fields = config.drafter.get("model")
  if uses_small_model(kind) and not options.get("checkpoint"):
    if not model_fields:
      raise ValueError(f"drafter kind {kind!r} needs drafter.checkpoint (a small model with the target's "
                       "tokenizer) or drafter.model (fields of a random one); for a target without one use "
                       "--config.drafter.kind=ngram")
    small = families.from_fields(dict(model_fields), config.seed + 1)
    return specjax.drafters.build(kind, options, target, model=small)
  return specjax.drafters.build(kind, options, target)


def uses_small_model(kind: str) -> bool:
  """Whether the kind drafts with a separate small model (its declaration's ``small_model``)."""
  return specjax.drafters.spec(kind).small_model is not None


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


def run(config, verbose: bool = True, report=None, outputs=None) -> dict:
  """Baseline and speculative decoding on the config's prompts; returns the summary.

  ``outputs(prompts, lengths, spec_output, tokenizer, eos_id, builtin, items, chat)`` is called as soon as the
  first speculative run is done (the CLI prints the text then); ``report(summary, prompts,
  lengths, spec_output, tokenizer, sampling)`` once the timing is done.
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
  checks.check_run(config, gamma)  # every input from the config alone: one line before anything loads
  sampling = specjax.Sampling(config.temperature, config.top_k, config.top_p)
  settings = _adaptive_settings(config)  # checked here: a bad value is named before anything loads
  fetch_hub_checkpoints(config, verbose)  # downloads, or one error naming what to do offline
  infos = _check_memory_before_loading(config, gamma)
  mesh = specjax.make_mesh(config.mesh) if config.mesh else None
  _say(verbose, f"loading the target ({_what(config.target)})")
  target, tok = load_model(config.target, config.seed, mesh)  # a checkpoint goes to the mesh as it is read
  _say(verbose, f"building the {config.drafter.kind} drafter")
  drafter = make_drafter(config, target)
  prompts, lengths, items = prompts_lib.load(config, tok, target.vocab_size)
  tree = drafter.tree
  num_nodes = tree.num_nodes if tree is not None else gamma + 1  # verify input: root + drafts
  max_len = _cache_length(config, target, prompts, lengths, num_nodes, infos)
  rows = min(int(config.batch_size), len(prompts))
  preflight.check_memory([(name, dataclasses.replace(info, params=0)) for name, info in infos], rows, max_len,
                         prompts.shape[1])  # the caches' exact size; the params are in memory by now
  reason = specjax.decode.lossy_reason(drafter, sampling, config.lenience)
  if reason is not None and not config.allow_lossy:  # before anything compiles
    raise ValueError(f"lossy configuration refused: {reason}. Set --config.allow_lossy=True to run it anyway")
  eos_id = eos_of(config, tok)
  common = dict(max_new_tokens=config.max_new_tokens, sampling=sampling, rng=jax.random.PRNGKey(config.seed),
                eos_id=eos_id, max_len=config.max_len or None)  # None: each decoder's own minimum
  if len(prompts) > rows:  # continuous refill: batch_size rows at a time, each finished row takes the next
    if config.mesh:
      raise ValueError(f"{len(prompts)} prompts for batch_size={rows} rows need continuous refill, which does "
                       f"not run on a mesh yet; set --config.batch_size={len(prompts)} or drop --config.mesh")
    common["batch_size"] = rows
    _say(verbose, f"{len(prompts)} prompts, {rows} rows at a time (continuous refill)")
  if mesh is not None:
    target, drafter = specjax.sharding.ensure_sharded(target, mesh), specjax.shard(drafter, mesh)
    common["mesh"] = mesh
  _say(verbose, "measuring c and v (compiles one drafting round and the verify pass)")
  with specjax.sharding.decode_context(mesh):  # c, v: the drafter's round and the verify pass vs one step
    c, v = measure.costs(target, drafter, prompts[:rows], lengths[:rows], gamma, num_nodes, sampling, max_len)
  adaptive = None
  if config.adaptive and (tree is None or drafter.tree_budgets):  # chains, or static trees with node budgets
    adaptive = settings
    if config.verify_slope < 0:  # a round at every compiled width, measured in the loop on these prompts
      _say(verbose, "compiling speculative decoding; timing its rounds at each verify width")
      with specjax.sharding.decode_context(mesh):
        costs = measure.loop_costs(target, drafter, prompts, lengths, gamma=gamma, adaptive=adaptive,
                                   repeats=1,  # each sample is a whole run, max_new_tokens rounds
                                   lenience=config.lenience, allow_lossy=config.allow_lossy, **common)
      adaptive = dataclasses.replace(adaptive, verify_costs=costs)
  spec_fn = lambda: specjax.speculative_generate(target, drafter, prompts, lengths, gamma=gamma,
                                                 lenience=config.lenience, adaptive=adaptive,
                                                 allow_lossy=config.allow_lossy, **common)
  base_fn = lambda: specjax.generate(target, prompts, lengths, **common)
  _say(verbose, "running speculative decoding once" if adaptive is not None and adaptive.verify_costs
       else "compiling speculative decoding and running it once")
  spec = jax.block_until_ready(spec_fn())
  if outputs is not None:
    outputs(prompts, lengths, spec, tok, eos_id, items is None, items, bool(config.get("chat")))
  if config.output:
    report_lib.write_jsonl(config.output, report_lib.records(prompts, lengths, spec, tok, eos_id, items))
    _say(verbose, f"wrote {len(prompts)} outputs to {config.output}")
  _say(verbose, "compiling the autoregressive baseline and running it once")
  base = jax.block_until_ready(base_fn())
  _say(verbose, f"timing both decoders ({config.repeats} runs each, alternating)")
  _, _, t_base, t_spec = measure.paired_times(base_fn, spec_fn, config.repeats, warm_up=False)  # both ran above
  summary = _summary(config, target, drafter, prompts, base, spec, t_base, t_spec, c, v, gamma, adaptive, common)
  summary.update(max_len=max_len, builtin_prompts=items is None)
  if report is not None:
    report(summary, prompts, lengths, spec, tok, sampling)
  return summary


def _what(spec) -> str:
  spec = dict(spec)
  return str(spec["checkpoint"]) if spec.get("checkpoint") else f"random init of {spec.get('family', 'decoder')} fields"


def _model_infos(config) -> list:
  """``[(name, ModelInfo)]`` of the target and the drafter's own weights, from metadata."""
  infos = [("target", preflight.describe(config.target))]
  if uses_small_model(config.drafter.kind):
    spec = small_model_spec(config)
    infos.append(("drafter", preflight.describe(spec) if spec else None))
  elif config.drafter.get("checkpoint"):
    infos.append(("drafter", preflight.describe_checkpoint(str(config.drafter.checkpoint))))
  return [(name, info) for name, info in infos if info is not None]


def fetch_hub_checkpoints(config, verbose: bool = True) -> None:
  """The target's and a small-model drafter's checkpoints that are Hugging Face hub ids (what
  ``load_pretrained`` would fetch), fetched into huggingface_hub's cache before anything loads (read
  in place when already there). Ids neither cached nor fetchable (offline, or no route to the hub)
  are one error naming each id and the offline ways on: local folders, or the dry run."""
  from specjax import hub  # pylint: disable=import-outside-toplevel
  missing = []
  roles = ("target", "drafter") if uses_small_model(config.drafter.kind) else ("target",)
  for role in roles:
    source = config[role].get("checkpoint")
    if not source or not loading.hub_id(source):
      continue
    _say(verbose, f"the {role} {source}: from the Hugging Face hub into {hub.cache_folder()} (unless cached)")
    try:
      hub.resolve(str(source))
    except hub.HubUnavailable as e:
      missing.append((role, e))
  if not missing:
    return
  ids = " and ".join(f"{e.source} ({role})" for role, e in missing)
  why = "HF_HUB_OFFLINE is set" if any(e.local_only for _, e in missing) else "the hub cannot be reached"
  downloads = " and ".join(f"`hf download {_download_args(e.source)}`" for _, e in missing)
  folders = " ".join(f"--config.{role}.checkpoint=FOLDER" for role, _ in missing)
  raise loading.CheckpointError(
      f"hub checkpoint{'s' if len(missing) > 1 else ''} {ids} not in the cache {missing[0][1].cache} and {why}; "
      f"on a machine with hub access run {downloads} and copy that cache here (or point HF_HUB_CACHE at it), "
      f"or pass local HF folders ({folders}), or plan the config's sizes without weights (--dry_run)")


def _download_args(source: str) -> str:
  from specjax import hub  # pylint: disable=import-outside-toplevel
  repo, revision, gguf = hub.parse(source)
  return " ".join([repo] + ([gguf] if gguf else []) + (["--revision", revision] if revision else []))


def _adaptive_settings(config):
  """The run's ``specjax.Adaptive`` before its costs are measured (verify_slope >= 0: a line)."""
  kw = {} if config.acceptance_memory < 0 else {"memory": config.acceptance_memory}  # < 0: Adaptive's default
  if config.verify_slope >= 0:
    kw["verify_slope"] = config.verify_slope
  return specjax.Adaptive(confidence=adaptive_lib.run_cut(config.confidence, config.sampled_confidence,
                                                             config.temperature), **kw)



def _check_memory_before_loading(config, gamma: int) -> list:
  """Params + caches vs the memory there is, before a weight is read (a paper-size random init
  would otherwise take minutes to be killed). The cache length is a guess until the prompts are
  tokenized: max_len, or the built-in prompt length (user prompts: their characters)."""
  infos = _model_infos(config)
  items = prompts_lib.user_prompts(config)
  rows = min(int(config.batch_size), len(items)) if items else int(config.batch_size)
  prompt_len = max(len(json.dumps(i)) for i in items) if items else int(config.prompt_len)
  max_len = config.max_len or prompt_len + config.max_new_tokens + gamma + 1
  context, source = _context(infos)
  preflight.check_requested(int(config.max_len), context, source)
  max_len = min(max_len, context or max_len)
  devices = math.prod(int(n) for n in str(config.mesh).split("x") if n.isdigit()) if config.mesh else 1
  preflight.check_memory(infos, rows, max_len, prompt_len, devices)
  return infos


def _context(infos) -> tuple:
  """``(the smallest context length of the models, where it comes from)``; ``(None, "")``: no limit."""
  limits = [(info.context, f"the {name}'s: {info.context_source}") for name, info in infos if info.context]
  return min(limits) if limits else (None, "")


def _cache_length(config, target, prompts, lengths, num_nodes: int, infos) -> int:
  """The cache length of the run, checked against every model's context and config.max_len."""
  longest = int(np.argmax(lengths))
  prompt_len = 1 if target.is_encoder_decoder else int(lengths[longest])
  what = "the prompt" if len(prompts) == 1 else f"the longest prompt (row {longest})"
  context, source = _context(infos)
  return preflight.cache_length(prompt_len=prompt_len, max_new_tokens=int(config.max_new_tokens), slots=num_nodes,
                                requested=int(config.max_len), context=context, context_source=source,
                                prompt_what=what)


def _summary(config, target, drafter, prompts, base, spec, t_base, t_spec, c, v, gamma, adaptive, common):
  st = spec.stats
  drafted = gamma if drafter.tree is None else drafter.tree.num_nodes - 1  # per full verify pass
  widths = st.get("verify_widths", st.get("verify_budgets", [drafted]))  # a tree's budgets count nodes
  mean_width = float(np.dot(widths, st["width_histogram"]) / max(sum(st["width_histogram"]), 1))
  return {
      "target": str(config.target.get("checkpoint") or "random init"),
      "eos_id": common["eos_id"],
      "drafter": config.drafter.kind,
      "drafter_options": drafter_options(config),
      "gamma": gamma,
      "drafted_nodes": drafted,  # per full verify pass
      "batch_size": int(common.get("batch_size", prompts.shape[0])),
      "num_prompts": int(prompts.shape[0]),
      "refill": "batch_size" in common,
      "temperature": config.temperature, "top_k": config.top_k, "top_p": config.top_p,
      "lossy": st["lossy"], "lossy_reason": st["lossy_reason"],
      "adaptive": None if adaptive is None else dataclasses.asdict(adaptive),
      "mean_submitted": st["mean_submitted"],
      "submitted_histogram": st["submitted_histogram"],
      "width_histogram": st["width_histogram"],
      "idle_rounds": st["idle_rounds"],
      "verify_widths": st.get("verify_widths", [gamma]),
      "verify_budgets": st.get("verify_budgets"),  # a static tree's node budgets (width_histogram counts them)
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
      "expected_speedup": float(st["tokens_per_iteration"] / (gamma * c + 1.0 + (v - 1.0) * mean_width / drafted)),
      "target_params": target.num_params,
      "drafter_params": drafter.num_params,
      "identical_to_autoregressive": bool(np.array_equal(spec.tokens, base.tokens)),
  }


def _say(verbose: bool, msg: str) -> None:
  if verbose:
    print(f"[specjax] {msg}", flush=True)
