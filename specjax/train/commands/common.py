"""What the training tasks share: flag parsing with one-line errors and defaults that follow ``--data``.

A task's ``main(argv)`` builds its flags on a private ``flags.FlagValues()`` and hands them to
``run_task`` (:mod:`specjax.cli`) with the function that does the work. A family that trains on
the demo target or on a real one (``--data=real``) leaves the flags whose defaults differ at None
and fills them with :func:`resolve`.
"""
from __future__ import annotations

import types

from absl import flags

from specjax.cli import HELP, UsageError, run_task  # noqa: F401  (the commands use them through common)

flags.disclaim_key_flags()  # flags defined through define() belong to the task module that calls it


def define(fv, kind: str, name: str, default, help_text: str, **kw) -> None:
  """``flags.DEFINE_<kind>(name, default, help_text)`` on ``fv``."""
  getattr(flags, f"DEFINE_{kind}")(name, default, help=help_text, flag_values=fv, **kw)


def define_by_data(fv, defaults: dict, helps: dict) -> None:
  """Flags whose default depends on ``--data``: ``defaults[name] = (kind, demo default, real default)``;
  the help text names both (a real default of None is worked out from ``--target``, see its help)."""
  for name, (kind, demo, real) in defaults.items():
    real_text = "from --target" if real is None else _show(real)
    define(fv, kind, name, None, f"{helps[name]} (default {_show(demo)}; --data=real: {real_text})")


def _show(value) -> str:
  return ",".join(map(str, value)) if isinstance(value, (list, tuple)) else str(value)


def resolve(fv, defaults: dict, real: bool) -> types.SimpleNamespace:
  """Every flag's value, a flag of ``defaults`` left unset taking the demo or the real default."""
  values = fv.flag_values_dict()
  for name, (_, demo, real_default) in defaults.items():
    if values[name] is None:
      values[name] = real_default if real else demo
  return types.SimpleNamespace(**values)


def run_by_data(fv, defaults: dict, demo_flags, real_flags, train_demo, train_real) -> int:
  """``--data=real``: ``train_real(opt)``, else ``train_demo(opt)``; a flag of the other mode is refused."""
  real = fv.data == "real"
  refuse(fv, demo_flags if real else real_flags, f"with --data={fv.data}")
  opt = resolve(fv, defaults, real)
  return train_real(opt) if real else train_demo(opt)


def demo_text(opt, target, **kw):
  """``(train, held_out)``: the target's generations from stdlib prompts (``train_heads.text_pool``),
  ``opt.pool`` and 32 sequences of ``opt.seq_len`` tokens over ``opt.gen_temperatures``."""
  from specjax.data import code_corpus  # pylint: disable=import-outside-toplevel
  from specjax.train import heads as train_heads  # pylint: disable=import-outside-toplevel
  temps = tuple(float(t) for t in opt.gen_temperatures)
  text = train_heads.text_pool(target, code_corpus.load_split("train"), opt.pool, opt.seq_len,
                               temperatures=temps, seed=opt.seed, **kw)
  held_text = train_heads.text_pool(target, code_corpus.load_split("held_out"), 32, opt.seq_len,
                                    temperatures=temps, seed=opt.seed + 1, **kw)
  return text, held_text


def held_out_metrics(loss_fn, held: dict, anchors=None):
  """``metrics(params)``: ``loss_fn``'s metrics, rounded, on a fixed batch of 32 rows of the pool ``held``."""
  import jax  # pylint: disable=import-outside-toplevel
  from specjax.train import heads as train_heads  # pylint: disable=import-outside-toplevel
  probe = train_heads.pool_batch(held, 0, 32, 1234, anchors)
  return lambda params: {k: round(float(v), 4) for k, v in jax.jit(loss_fn)(params, probe)[1].items()}


def train_on_pool(params, loss_fn, pool: dict, opt, workdir, desc: str, anchors=None, **config):
  """``params`` after ``opt.steps`` steps at ``opt.learning_rate`` on ``opt.batch`` rows of the pool
  per step, drawn by ``opt.seed`` (a resumed run sees the same data); ``config``: more TrainConfig fields."""
  from specjax.train import heads as train_heads  # pylint: disable=import-outside-toplevel
  from specjax.train import loop  # pylint: disable=import-outside-toplevel
  cfg = loop.TrainConfig(steps=opt.steps, learning_rate=opt.learning_rate, warmup_steps=20, checkpoint_every=50,
                         **config)
  return loop.train(params, loss_fn, lambda s: train_heads.pool_batch(pool, s, opt.batch, opt.seed, anchors),
                    cfg, workdir, desc=desc)


def train_head(init, loss_fn, pool: dict, held: dict, opt, desc: str, anchors=None):
  """``(head, before, after)``: the head bundle ``init`` trained on ``pool`` (:func:`train_on_pool`,
  checkpoints in ``opt.workdir``), and ``loss_fn``'s held-out metrics before and after."""
  metrics = held_out_metrics(loss_fn, held, anchors)
  before = metrics(init.params)
  params = train_on_pool(init.params, loss_fn, pool, opt, opt.workdir, desc, anchors)
  return init.replace(params=params), before, metrics(params)


def save_trained_head(head, out, workdir, title: str, report: dict, acceptance, subset=None) -> int:
  """Saves a trained head (bf16; ``subset``, a truncated vocabulary's ids, beside it), its loss plot,
  and ``training.json`` with ``report`` plus ``acceptance()`` (greedy acceptance of the saved head),
  which it also prints."""
  import json  # pylint: disable=import-outside-toplevel
  import numpy as np  # pylint: disable=import-outside-toplevel
  from specjax.models import heads, store  # pylint: disable=import-outside-toplevel
  from specjax.train import loop  # pylint: disable=import-outside-toplevel
  heads.save_head(head, out, dtype="bfloat16")
  if subset is not None:
    np.save(out / store.SUBSET_FILE, subset)
  loop.plot_loss(workdir, title=title)
  report["acceptance_greedy"] = acceptance()
  (out / "training.json").write_text(json.dumps(report, indent=2) + "\n")
  print(json.dumps(report, indent=2))
  return 0


def refuse(fv, names, why: str) -> None:
  """A UsageError naming the first of ``names`` given on the command line (a flag that does nothing here)."""
  for name in names:
    if fv[name].present:
      raise UsageError(f"--{name}: not used {why}")
