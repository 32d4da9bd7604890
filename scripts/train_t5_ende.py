"""Trains the T5 v1.1 EnDe pair (Leviathan et al.'s setting, CPU-sized) into specjax/assets/t5_ende/.

  python scripts/train_t5_ende.py --stage=tokenizer                 # SentencePiece, 2000 pieces (~10 s)
  python scripts/train_t5_ende.py --stage=target  --workdir=runs/t5_ende   # CE on references
  python scripts/train_t5_ende.py --stage=drafters --workdir=runs/t5_ende  # all three, KD from the target
  python scripts/train_t5_ende.py --stage=eval                      # chrF of the target (and drafters)

Data: ``specjax.data.ende.split_pairs()``: "translate English to German: <en>" -> "<de>", held out
by catalogue file (``HELD_OUT_CATALOGUES``; any held-out English is dropped from training), both
sides <= 64 SentencePiece tokens. Every stage resumes from its orbax checkpoints; seeds are fixed,
so the same commands reproduce the shipped bf16 weights (up to float reduction order). Drafter
sizes follow the paper's ratios (T5-small/base/large : T5-XXL = 77M/250M/800M : 11B, i.e. 1/140,
1/45, 1/14 of the target's parameters); each is distilled from the target's softmax (KL at every
reference position + 0.1 x CE), as the demo drafter was.
"""
from __future__ import annotations

import dataclasses
import json
import pathlib
import shutil
import sys
import time

from absl import app, flags
import numpy as np

from specjax import checkpoint
from specjax.data import ende, sentencepiece_tok
from specjax.models import bundle
from specjax.models.t5 import T5, T5Config
from specjax.train import loop, seq2seq

FLAGS = flags.FLAGS
flags.DEFINE_enum("stage", "target", ["tokenizer", "target", "drafters", "eval"], "what to do")
flags.DEFINE_list("drafters", "small,base,large", "which drafters (--stage=drafters), distilled together")
flags.DEFINE_string("workdir", "runs/t5_ende", "checkpoints, metrics and plots (never committed)")
flags.DEFINE_string("out", "specjax/assets/t5_ende", "where the finished weights go")
flags.DEFINE_integer("steps", None, "optimizer steps (default: the stage's)")
flags.DEFINE_integer("stop_after", None, "end this run at that step (checkpointed; a later run resumes)")
flags.DEFINE_integer("eval_pairs", 500, "held-out pairs for chrF (--stage=eval)")
flags.DEFINE_integer("seed", 0, "seed for init and data order")
flags.DEFINE_float("dec_input_dropout", 0.0, "fraction of decoder input tokens replaced by UNK (word dropout)")
flags.DEFINE_float("learning_rate", None, "peak AdamW rate (default: the stage's); a resumed run may lower it")
flags.DEFINE_list("extra_catalogues", [], "more folders of German *.mo catalogues for the training side "
                  "(scripts/fetch_debian_catalogues.sh); the held-out catalogues and the tokenizer stay as shipped")
flags.DEFINE_string("init_from", None, "--stage=target: start from this model folder's weights (e.g. the shipped "
                    "specjax/assets/t5_ende/target) with a fresh optimizer, instead of a seeded init; a new --workdir")
flags.DEFINE_integer("warmup_steps", 40, "linear warmup before the cosine decay")

VOCAB = 2000
_T5 = dict(vocab_size=VOCAB, relative_attention_num_buckets=32, relative_attention_max_distance=128)
TARGET = T5Config(d_model=256, num_encoder_layers=3, num_decoder_layers=3, num_heads=4, head_dim=64, mlp_dim=1024,
                  **_T5)
# about 1/140, 1/45, 1/14 of TARGET's parameters (embeddings + LM head dominate at these widths)
DRAFTERS = {  # decoder depth sets c (the encoder runs once per prompt)
    "small": T5Config(d_model=14, num_encoder_layers=1, num_decoder_layers=1, num_heads=2, head_dim=8, mlp_dim=32,
                      **_T5),
    "base": T5Config(d_model=32, num_encoder_layers=2, num_decoder_layers=1, num_heads=2, head_dim=16, mlp_dim=96,
                     **_T5),
    "large": T5Config(d_model=64, num_encoder_layers=2, num_decoder_layers=2, num_heads=2, head_dim=32,
                      mlp_dim=192, **_T5),
}
STEPS = {"target": 300, "drafters": 150}
LEARNING_RATE = 3e-3  # peak, both stages


def splits(tok):
  for folder in FLAGS.extra_catalogues:
    if not pathlib.Path(folder).is_dir():
      raise FileNotFoundError(f"--extra_catalogues folder {folder} does not exist "
                              "(bash scripts/fetch_debian_catalogues.sh writes data/debian_catalogues)")
  pairs = ende.split_pairs(ende.DEFAULT_DIRS + tuple(map(pathlib.Path, FLAGS.extra_catalogues)))
  return {name: seq2seq.tokenize(p, tok, ende.T5_PREFIX) for name, p in pairs.items()}, pairs


def copy_tokenizer(folder):
  """Each model folder carries the tokenizer, so ``specjax.load_pretrained(folder)`` gives both."""
  for name in ("tokenizer.model", "specjax_tokenizer.json"):
    shutil.copy(sentencepiece_tok.ASSET / name, pathlib.Path(folder) / name)


def bf16(cfg):
  return dataclasses.replace(cfg, dtype="bfloat16")


def train_target(data, workdir, steps, init=None):
  """CE on the references from a seeded init, or from ``init`` (``--init_from``'s params)."""
  module = T5(bf16(TARGET))
  # a warm start draws fresh batches (seed + 7): its data order must not replay the first run's
  seed = FLAGS.seed if init is None else FLAGS.seed + 7
  init = bundle.init_model(module, FLAGS.seed).params if init is None else init
  cfg = loop.TrainConfig(steps=steps, learning_rate=FLAGS.learning_rate or LEARNING_RATE,
                         warmup_steps=FLAGS.warmup_steps, checkpoint_every=20)
  batches = seq2seq.Batches(data["train"], seed, dec_input_dropout=FLAGS.dec_input_dropout)
  params = loop.train(init, seq2seq.ce_loss(module), batches, cfg,
                      workdir, desc="T5 target", stop_after=FLAGS.stop_after)
  model = bundle.Model(T5(TARGET), params)
  held = seq2seq.eval_metrics(seq2seq.ce_loss(module), params, data["held_out"])
  return model, {"held_out": held}


def warm_start(folder):
  """The params of a saved target folder; its config must be TARGET's (same shapes, same vocab)."""
  model = checkpoint.load_model(folder)
  if dataclasses.replace(model.config, dtype=TARGET.dtype) != TARGET:
    raise ValueError(f"--init_from={folder} holds {model.config}, not this script's target {TARGET}")
  return model.params


def train_drafters(names, data, workdir, steps):
  """Distils every drafter in ``names`` from the target in one run: one teacher forward per batch,
  the loss the sum of each drafter's KD loss (their params are disjoint, so each gets its own
  gradient; the global-norm clip sees all three, hence the larger clip_norm)."""
  target = checkpoint.load_model(pathlib.Path(FLAGS.out) / "target")
  teacher = T5(bf16(TARGET))
  students = {n: T5(bf16(DRAFTERS[n])) for n in names}
  init = {n: bundle.init_model(students[n], FLAGS.seed + 1 + i).params for i, n in enumerate(names)}
  each = {n: seq2seq.kd_loss(students[n], teacher, target.params) for n in names}

  def loss_fn(params, batch):
    t_logits = seq2seq.teacher_logits(teacher, target.params, batch)
    total, metrics = 0.0, {}
    for n in names:
      loss, m = each[n](params[n], batch, t_logits)
      total = total + loss
      metrics.update({f"{n}/{k}": v for k, v in dict(m, loss=loss).items()})
    return total, metrics

  cfg = loop.TrainConfig(steps=steps, learning_rate=FLAGS.learning_rate or LEARNING_RATE, warmup_steps=20,
                         checkpoint_every=25, clip_norm=3.0)
  params = loop.train(init, loss_fn, seq2seq.Batches(data["train"], FLAGS.seed + 2), cfg, workdir,
                      desc=f"T5 drafters {','.join(names)} (KD)", stop_after=FLAGS.stop_after)
  out = {}
  for n in names:
    model = bundle.Model(T5(DRAFTERS[n]), params[n])
    out[n] = (model, {"target_params": target.num_params, "ratio": f"1/{target.num_params / model.num_params:.0f}",
                      "held_out_after": seq2seq.eval_metrics(each[n], params[n], data["held_out"])})
  return out


def evaluate(pairs, n):
  """chrF (sacrebleu) of greedy translations of the first n held-out pairs, every shipped model."""
  tok = sentencepiece_tok.load()
  rng = np.random.default_rng(1234)
  idx = np.sort(rng.choice(len(pairs["held_out"]), min(n, len(pairs["held_out"])), replace=False))
  src = [pairs["held_out"][i][0] for i in idx]
  ref = [pairs["held_out"][i][1] for i in idx]
  report = {"pairs": len(src), "catalogues": list(ende.HELD_OUT_CATALOGUES)}
  for name in ["target"] + [f"drafter_{d}" for d in DRAFTERS]:
    folder = pathlib.Path(FLAGS.out) / name
    if not folder.is_dir():
      continue
    t0 = time.time()
    hyp = seq2seq.greedy_translations(checkpoint.load_model(folder), tok, src, ende.T5_PREFIX)
    report[name] = {"chrF": round(seq2seq.chrf(hyp, ref), 2), "wall_s": round(time.time() - t0, 1),
                    "examples": [{"en": s, "ref": r, "hyp": h} for s, r, h in list(zip(src, ref, hyp))[:12]]}
    print(name, "chrF", report[name]["chrF"], flush=True)
  return report


def write_prompts(n: int = 8, seed: int = 0):
  """``prompts.txt`` for configs/t5xxl_small.py:cpu: n held-out sources (JSON strings, prefixed)."""
  pairs = ende.split_pairs()["held_out"]
  rng = np.random.default_rng(seed)
  picks = [pairs[i][0] for i in rng.permutation(len(pairs)) if 20 <= len(pairs[i][0]) <= 80][:n]
  path = pathlib.Path(FLAGS.out) / "prompts.txt"
  path.write_text("".join(json.dumps(ende.T5_PREFIX + s, ensure_ascii=False) + "\n" for s in picks))
  return path


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments: {argv[1:]}")
  if FLAGS.init_from and FLAGS.stage != "target":
    raise app.UsageError(f"--init_from={FLAGS.init_from} applies to --stage=target only, not --stage={FLAGS.stage}")
  out = pathlib.Path(FLAGS.out)
  if FLAGS.stage == "tokenizer":
    tok = sentencepiece_tok.train_from_catalogues(vocab_size=VOCAB, seed=FLAGS.seed)
    print(f"wrote {sentencepiece_tok.ASSET} ({tok.vocab_size} pieces) and {write_prompts()}")
    return
  # a wrong --init_from fails here, before minutes of tokenizing
  init = warm_start(FLAGS.init_from) if FLAGS.init_from else None
  tok = sentencepiece_tok.load()
  if tok.vocab_size != VOCAB:
    raise ValueError(f"{sentencepiece_tok.ASSET} has {tok.vocab_size} pieces, the models expect {VOCAB}")
  data, pairs = splits(tok)
  if FLAGS.stage == "eval":
    report = evaluate(pairs, FLAGS.eval_pairs)
    (out / "chrf.json").write_text(json.dumps(report, indent=2, ensure_ascii=False) + "\n")
    return
  t0 = time.time()
  steps = FLAGS.steps or STEPS[FLAGS.stage]
  if FLAGS.stage == "target":
    workdir = pathlib.Path(FLAGS.workdir) / "target"
    results = {"target": train_target(data, workdir, steps, init)}
  else:
    workdir = pathlib.Path(FLAGS.workdir) / "drafters"
    results = {f"drafter_{n}": r for n, r in train_drafters(FLAGS.drafters, data, workdir, steps).items()}
  for name, (model, report) in results.items():
    report.update(params=model.num_params, config=dataclasses.asdict(model.config), steps=steps,
                  train_pairs=len(data["train"].enc), held_out_pairs=len(data["held_out"].enc), seed=FLAGS.seed,
                  wall_s_this_run=round(time.time() - t0, 1), command=" ".join(sys.argv))
    checkpoint.save_model(model, out / name, dtype="bfloat16")
    copy_tokenizer(out / name)
    (out / name / "training.json").write_text(json.dumps(report, indent=2) + "\n")
    print(name, json.dumps(report, indent=2))
  loop.plot_loss(workdir, title=f"T5 EnDe {FLAGS.stage}")


if __name__ == "__main__":
  app.run(main)
