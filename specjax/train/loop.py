"""A generic optax training loop: jitted step, orbax checkpoints with exact resume, JSONL metrics.

``loss_fn(params, batch) -> (loss, metrics)`` and ``batch_fn(step) -> batch`` are all a task
gives; the batch is a pure function of the step, so a resumed run sees the same data.
"""
from __future__ import annotations

import dataclasses
import json
import pathlib
import time
from typing import Any, Callable

import flax
import jax
import jax.numpy as jnp
import numpy as np
import optax
import orbax.checkpoint as ocp
from tqdm.auto import tqdm


@dataclasses.dataclass(frozen=True)
class TrainConfig:
  steps: int = 1000
  learning_rate: float = 2e-3
  warmup_steps: int = 50
  weight_decay: float = 0.1
  clip_norm: float = 1.0
  checkpoint_every: int = 100
  keep_checkpoints: int = 2
  log_every: int = 10


@flax.struct.dataclass
class TrainState:
  step: jax.Array
  params: Any
  opt_state: Any


def make_optimizer(cfg: TrainConfig) -> optax.GradientTransformation:
  schedule = optax.warmup_cosine_decay_schedule(0.0, cfg.learning_rate, cfg.warmup_steps,
                                                max(cfg.steps, cfg.warmup_steps + 1), cfg.learning_rate * 0.05)
  decay_mask = lambda params: jax.tree_util.tree_map(lambda x: x.ndim > 1, params)  # no decay on norms
  return optax.chain(optax.clip_by_global_norm(cfg.clip_norm),
                     optax.adamw(schedule, b2=0.95, weight_decay=cfg.weight_decay, mask=decay_mask))


def make_train_step(loss_fn: Callable, optimizer: optax.GradientTransformation, donate: bool = True):
  """``step(state, batch) -> (state, metrics)``, jitted. A ``loss_fn`` that is a
  ``jax.tree_util.Partial`` (:func:`specjax.train.heads.with_frozen`) enters the program as an
  argument, so its arrays (a frozen target's embedding and LM head) are not compiled in as constants."""
  def step_fn(state: TrainState, batch, loss_fn):
    (loss, metrics), grads = jax.value_and_grad(loss_fn, has_aux=True)(state.params, batch)
    updates, opt_state = optimizer.update(grads, state.opt_state, state.params)
    params = optax.apply_updates(state.params, updates)
    metrics = dict(metrics, loss=loss, grad_norm=optax.tree.norm(grads))
    return TrainState(state.step + 1, params, opt_state), metrics
  loss = loss_fn if isinstance(loss_fn, jax.tree_util.Partial) else jax.tree_util.Partial(loss_fn)
  step = jax.jit(step_fn, donate_argnums=(0,) if donate else ())
  return lambda state, batch: step(state, batch, loss)


def train(params, loss_fn: Callable, batch_fn: Callable[[int], Any], cfg: TrainConfig,
          workdir: str | pathlib.Path, *, stop_after: int | None = None, desc: str = "train",
          mesh=None, model=None) -> Any:
  """Trains (resuming from ``workdir/checkpoints`` if present) and returns the final params.

  ``stop_after`` ends the run early at that step (after checkpointing), which tests use to
  simulate an interruption. With a ``mesh`` (and the ``model`` whose logical axes the params
  carry) params are placed by the same rules as inference and batches split over ``data``; the
  optimizer state and the jitted step follow the params' shardings.
  """
  params = jax.tree_util.tree_map(jnp.array, params)  # a copy: the step donates its state
  put_batch = lambda batch: batch
  if mesh is not None:
    from specjax import sharding  # pylint: disable=import-outside-toplevel
    params = jax.device_put(params, sharding.param_shardings(model, mesh))
    put_batch = lambda batch: jax.device_put(batch, sharding.batch_sharding(mesh, np.ndim(batch)))
  workdir = pathlib.Path(workdir).absolute()
  workdir.mkdir(parents=True, exist_ok=True)
  optimizer = make_optimizer(cfg)
  state = TrainState(jnp.zeros((), jnp.int32), params, optimizer.init(params))
  manager = ocp.CheckpointManager(
      workdir / "checkpoints",
      options=ocp.CheckpointManagerOptions(save_interval_steps=cfg.checkpoint_every,
                                           max_to_keep=cfg.keep_checkpoints))
  if manager.latest_step() is not None:
    state = manager.restore(manager.latest_step(), args=ocp.args.StandardRestore(state))
  step_fn = make_train_step(loss_fn, optimizer)
  start = int(state.step)
  end = cfg.steps if stop_after is None else min(cfg.steps, stop_after)
  metrics_path = workdir / "metrics.jsonl"
  t0 = time.time()
  with open(metrics_path, "a") as log, tqdm(total=end, initial=start, desc=desc, mininterval=5) as bar:
    for step in range(start, end):
      state, metrics = step_fn(state, put_batch(batch_fn(step)))
      if (step + 1) % cfg.log_every == 0 or step + 1 == end:
        row = {k: float(v) for k, v in metrics.items()}
        row.update(step=step + 1, elapsed_s=round(time.time() - t0, 2))
        log.write(json.dumps(row) + "\n")
        log.flush()
        bar.set_postfix(loss=f"{row['loss']:.4f}")
      bar.update(1)
      manager.save(step + 1, args=ocp.args.StandardSave(state))
  manager.wait_until_finished()
  manager.close()
  return state.params


def read_metrics(workdir) -> list[dict]:
  path = pathlib.Path(workdir) / "metrics.jsonl"
  return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def plot_loss(workdir, out_png=None, title="training loss"):
  import matplotlib  # pylint: disable=import-outside-toplevel
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt  # pylint: disable=import-outside-toplevel
  rows = read_metrics(workdir)
  fig, ax = plt.subplots(figsize=(6, 3.5))
  ax.plot([r["step"] for r in rows], [r["loss"] for r in rows])
  ax.set_xlabel("step"), ax.set_ylabel("loss"), ax.set_title(title), ax.grid(alpha=0.3)
  out_png = out_png or pathlib.Path(workdir) / "loss.png"
  fig.tight_layout(), fig.savefig(out_png, dpi=100), plt.close(fig)
  return out_png
