"""A small separate draft model for a real target, distilled from the target's own generations.

  nice -n 10 python -m specjax.train data                       # the data (target-generated)
  nice -n 10 python -m specjax.train draft_model                # -> specjax/assets/smollm2/draft_lm
  nice -n 10 python -m specjax.train draft_model --steps=600 --k=8192 --d_model=256 --num_layers=2

(The demo pair's draft model: ``python -m specjax.train demo --stage=drafter``.)

Sequence-level KD: cross-entropy on the target's greedy continuations (prompt tokens are context
only), so the drafter learns the target's argmax, which is what greedy acceptance asks for.
The drafter (:mod:`specjax.models.draft_lm`) reads the target's frozen embedding through a learned
projection and predicts over the ``--k`` most frequent tokens of the target's generations (FR-Spec
truncation; labels outside the subset are skipped, they are never proposed): with
``--frozen_head`` (default) through the target's own LM-head columns, so it stores only the small
parts (a few MB in bf16). Seeded; resumes from ``--workdir``'s orbax checkpoints; writes the
training curve (``metrics.jsonl``) and ``training.json`` (held-out loss and greedy agreement
before/after, coverage of the subset) beside the weights.
"""
from __future__ import annotations

import json
import pathlib
import time

from absl import flags
import jax
import jax.numpy as jnp
import numpy as np
import optax
from tqdm.auto import tqdm

import specjax
from specjax.data import generated
from specjax.drafters import vocab
from specjax.models import draft_lm
from specjax.train import loop
from specjax.train.commands import common


LABEL_SEQ, LABEL_BATCH = 128, 16


def teacher_labels(target, tok, folder: pathlib.Path, minutes: float, seed: int) -> dict | None:
  """Train-split stdlib crops (``LABEL_SEQ`` tokens at line starts) with the target's argmax at every
  position: the target's greedy choice in a real context, ~5x cheaper per label than generating."""
  from specjax.data import code_corpus  # pylint: disable=import-outside-toplevel
  out = folder / "teacher_labels"
  out.mkdir(parents=True, exist_ok=True)
  if minutes > 0:
    root = code_corpus.stdlib_root()
    files = [f for f in code_corpus.stdlib_files() if not code_corpus.is_held_out(str(f.relative_to(root)))]
    # the target an argument: weights closed over would compile in as constants (slow to compile)
    fwd = jax.jit(lambda model, ids: jnp.argmax(specjax.logits(model, ids), -1).astype(jnp.int32))
    t0, i = time.time(), 0
    with tqdm(desc="teacher labels (stdlib crops)", mininterval=10) as bar:
      while time.time() - t0 < minutes * 60:
        path = out / f"{i:05d}.npz"
        if not path.is_file():
          rng = np.random.default_rng([seed, 77, i])
          rows = []
          while len(rows) < LABEL_BATCH:
            text = files[rng.integers(len(files))].read_text(encoding="utf-8", errors="replace")
            starts = [0] + [j + 1 for j in np.flatnonzero(np.frombuffer(text.encode("utf-32-le"), np.uint32) == 10)]
            ids = tok.encode(text[starts[rng.integers(len(starts))]:][:6 * LABEL_SEQ], add_special_tokens=False)
            if len(ids) >= LABEL_SEQ:
              rows.append(ids[:LABEL_SEQ])
          ids = np.asarray(rows, np.int32)
          np.savez(path.with_name(f"tmp{i}.npz"), inputs=ids, labels=np.asarray(fwd(target, jnp.asarray(ids))))
          path.with_name(f"tmp{i}.npz").rename(path)
        i += 1
        bar.update(1)
  files = sorted(out.glob("[0-9]*[0-9].npz"))
  if not files:
    return None
  parts = [dict(np.load(f)) for f in files]
  return {k: np.concatenate([p[k] for p in parts]) for k in ("inputs", "labels")}


def make_loss(module, frozen, to_k_V):
  """CE of the drafter's K logits against the target's greedy token, where it is inside the subset.

  ``batch = (inputs_BxT, labels_BxT, weight_BxT)``."""
  def loss_fn(params, batch):
    inputs, labels, weight = batch
    logits_BxTxK, _, _ = module.apply({"params": {**params, **frozen}}, inputs)
    label_k = to_k_V[labels]
    w = (weight & (label_k >= 0)).astype(jnp.float32)
    nll = optax.softmax_cross_entropy_with_integer_labels(logits_BxTxK, jnp.maximum(label_k, 0))
    norm = jnp.maximum(w.sum(), 1.0)
    agree = (jnp.argmax(logits_BxTxK, -1) == label_k).astype(jnp.float32)
    # greedy agreement over every continuation token (labels outside the subset count as misses)
    all_w = weight.astype(jnp.float32)
    return jnp.sum(nll * w) / norm, {"greedy_agreement": jnp.sum(agree * all_w) / jnp.maximum(all_w.sum(), 1.0)}
  return loss_fn


def as_batch(seq, gen):
  """Generated sequences -> (inputs, labels, weight): next tokens, continuation positions only."""
  return jnp.asarray(seq[:, :-1]), jnp.asarray(seq[:, 1:]), jnp.asarray(gen[:, 1:])


def evaluate(loss_fn, params, seq, gen, batch=16):
  rows = [loss_fn(params, as_batch(seq[i:i + batch], gen[i:i + batch]))
          for i in range(0, len(seq) - batch + 1, batch)]
  return {"loss": float(np.mean([float(r[0]) for r in rows])),
          "greedy_agreement": float(np.mean([float(r[1]["greedy_agreement"]) for r in rows]))}


def run(opt) -> int:
  t0 = time.time()
  target, tok = specjax.load_pretrained(opt.target)
  data_dir = pathlib.Path(opt.data_dir or generated.default_out(opt.target)).expanduser()
  train = generated.load_shards(data_dir, "shards")
  held = generated.load_shards(data_dir, "held_out")
  labelled = teacher_labels(target, tok, data_dir, opt.label_minutes, opt.seed)
  counts = generated.token_counts(data_dir, target.vocab_size)  # the target's own tokens: generated
  if labelled is not None:  # ... and its argmax choices on the labelled crops
    counts = counts + np.bincount(labelled["labels"].ravel(), minlength=target.vocab_size)
  subset = vocab.top_k_subset(counts, opt.k)
  held_counts = np.bincount(held["tokens"][np.arange(held["tokens"].shape[1])[None] < held["lengths"][:, None]],
                            minlength=target.vocab_size)
  to_k = np.full((target.vocab_size,), -1, np.int32)
  to_k[subset] = np.arange(opt.k)
  tc = target.config
  cfg = draft_lm.DraftLMConfig(
      vocab_size=tc.vocab_size, embed_dim=tc.d_model, out_vocab=opt.k, frozen_head=opt.frozen_head,
      d_model=opt.d_model, num_layers=opt.num_layers, num_heads=opt.num_heads,
      num_kv_heads=opt.num_kv_heads, head_dim=64, mlp_dim=opt.mlp_dim, rope_theta=tc.rope_theta,
      norm_eps=tc.norm_eps, tie_embeddings=False)
  model = draft_lm.init(cfg, target, opt.seed, subset)
  frozen = {k: v for k, v in model.params.items() if k in draft_lm.FROZEN_KEYS}
  params = {k: v for k, v in model.params.items() if k not in draft_lm.FROZEN_KEYS}
  loss_fn = make_loss(model.module, frozen, jnp.asarray(to_k))
  seq, gen = generated.joined(train)
  hseq, hgen = generated.joined(held)
  print(f"train: {len(seq)} sequences, {int(gen.sum())} target tokens; held out: {len(hseq)}, "
        f"{int(hgen.sum())}; K={opt.k} covers {vocab.coverage(counts, subset):.4f} of train tokens, "
        f"{vocab.coverage(held_counts, subset):.4f} of held-out", flush=True)

  n_lab = int(round(opt.batch_size * opt.labelled_share)) if labelled is not None else 0
  width = seq.shape[1] - 1

  def batch_fn(step):  # a pure function of the step: a resumed run sees the same batches
    rng = np.random.default_rng([opt.seed, step])
    rows = rng.integers(0, len(seq), opt.batch_size - n_lab)
    inputs, labels, weight = (np.asarray(x) for x in as_batch(seq[rows], gen[rows]))
    if n_lab:
      lab = rng.integers(0, len(labelled["inputs"]), n_lab)
      padw = ((0, 0), (0, width - LABEL_SEQ))
      inputs = np.concatenate([inputs, np.pad(labelled["inputs"][lab], padw)])
      labels = np.concatenate([labels, np.pad(labelled["labels"][lab], padw)])
      weight = np.concatenate([weight, np.pad(np.ones((n_lab, LABEL_SEQ), bool), padw)])
    return jnp.asarray(inputs), jnp.asarray(labels), jnp.asarray(weight)

  eval_fn = jax.jit(loss_fn)
  before = evaluate(eval_fn, params, hseq, hgen)
  tcfg = loop.TrainConfig(steps=opt.steps, learning_rate=opt.learning_rate, warmup_steps=30,
                          checkpoint_every=50, log_every=10)
  params = loop.train(params, loss_fn, batch_fn, tcfg, opt.workdir, desc="draft_lm seq-KD")
  after = evaluate(eval_fn, params, hseq, hgen)
  model = model.replace(params={**params, **frozen})
  report = {
      "target": opt.target, "config": {k: getattr(cfg, k) for k in ("d_model", "num_layers", "num_heads",
                                                                      "num_kv_heads", "mlp_dim", "out_vocab",
                                                                      "frozen_head")},
      "stored_params": draft_lm.DraftLM.stored_params(model.params), "steps": opt.steps,
      "batch_size": opt.batch_size, "seed": opt.seed, "train_sequences": int(len(seq)),
      "train_target_tokens": int(gen.sum()),
      "teacher_labelled_tokens": 0 if labelled is None else int(labelled["labels"].size), "labelled_per_batch": n_lab, "tokens_seen": int(opt.steps * opt.batch_size * seq.shape[1]),
      "subset_coverage_train": vocab.coverage(counts, subset), "subset_coverage_held_out":
      vocab.coverage(held_counts, subset), "held_out_before": before, "held_out_after": after,
      "wall_s": round(time.time() - t0, 1), "curve": loop.read_metrics(opt.workdir)}
  out = pathlib.Path(opt.out)
  draft_lm.save(model, subset, out, dtype="bfloat16", extra={"training": {k: v for k, v in report.items()
                                                                          if k != "curve"}})
  (out / "training.json").write_text(json.dumps(report, indent=1) + "\n")
  print(json.dumps({k: v for k, v in report.items() if k != "curve"}, indent=2))
  return 0


def main(argv) -> int:
  fv = flags.FlagValues()
  d = lambda kind, name, default, text: common.define(fv, kind, name, default, text)
  d("string", "target", "smollm2-135m-instruct", "checkpoint (anything load_pretrained takes)")
  d("string", "data_dir", "", "data folder of the data task (default: its default for --target)")
  d("string", "workdir", "runs/smollm2_draft_lm", "checkpoints and metrics")
  d("string", "out", "specjax/assets/smollm2/draft_lm", "where the finished bundle goes")
  d("integer", "k", 8192, "draft vocabulary: the K most frequent generated tokens")
  d("integer", "d_model", 256, "drafter width")
  d("integer", "num_layers", 2, "drafter blocks")
  d("integer", "num_heads", 4, "attention heads (head_dim 64)")
  d("integer", "num_kv_heads", 2, "KV heads")
  d("integer", "mlp_dim", 768, "SwiGLU width")
  d("bool", "frozen_head", True, "logits through the target's LM-head columns of the subset")
  d("integer", "steps", 600, "optimizer steps")
  d("integer", "batch_size", 16, "sequences per step")
  d("float", "learning_rate", 3e-3, "peak learning rate")
  d("integer", "seed", 0, "init and data order")
  d("float", "label_minutes", 0.0, "first spend up to this long labelling train-split stdlib crops with "
    "the target's argmax (teacher-forced; cached under the data folder, resumable)")
  d("float", "labelled_share", 0.5, "share of each batch from the labelled crops (when there are any)")
  return common.run_task(fv, argv, __doc__, "draft_model", lambda: run(fv))
