"""The T5 v1.1 EnDe pair (Leviathan et al.'s setting, CPU-sized) -> specjax/assets/t5_ende/.

  python -m specjax.train t5_ende --stage=tokenizer                  # SentencePiece, 2000 pieces (~10 s)
  python -m specjax.train t5_ende --stage=target --workdir=runs/t5_ende    # CE on references
  python -m specjax.train t5_ende --stage=drafters --workdir=runs/t5_ende  # all three, KD from the target
  python -m specjax.train t5_ende --stage=eval                       # chrF of the target (and drafters)

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
import time

from absl import flags
import numpy as np

from specjax import checkpoint
from specjax.data import ende, sentencepiece_tok
from specjax.models import bundle
from specjax.models.t5 import T5, T5Config
from specjax.train import loop, seq2seq
from specjax.train.commands import common

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


def splits(opt, tok):
  for folder in opt.extra_catalogues:
    if not pathlib.Path(folder).is_dir():
      raise FileNotFoundError(f"--extra_catalogues folder {folder} does not exist "
                              "(bash scripts/fetch_debian_catalogues.sh writes data/debian_catalogues)")
  pairs = ende.split_pairs(ende.DEFAULT_DIRS + tuple(map(pathlib.Path, opt.extra_catalogues)))
  return {name: seq2seq.tokenize(p, tok, ende.T5_PREFIX) for name, p in pairs.items()}, pairs


def copy_tokenizer(folder):
  """Each model folder carries the tokenizer, so ``specjax.load_pretrained(folder)`` gives both."""
  for name in ("tokenizer.model", "specjax_tokenizer.json"):
    shutil.copy(sentencepiece_tok.ASSET / name, pathlib.Path(folder) / name)


def bf16(cfg):
  return dataclasses.replace(cfg, dtype="bfloat16")


def train_target(opt, data, workdir, steps, init=None):
  """CE on the references from a seeded init, or from ``init`` (``--init_from``'s params)."""
  module = T5(bf16(TARGET))
  # a warm start draws fresh batches (seed + 7): its data order must not replay the first run's
  seed = opt.seed if init is None else opt.seed + 7
  init = bundle.init_model(module, opt.seed).params if init is None else init
  cfg = loop.TrainConfig(steps=steps, learning_rate=opt.learning_rate or LEARNING_RATE,
                         warmup_steps=opt.warmup_steps, checkpoint_every=20)
  batches = seq2seq.Batches(data["train"], seed, dec_input_dropout=opt.dec_input_dropout)
  params = loop.train(init, seq2seq.ce_loss(module), batches, cfg,
                      workdir, desc="T5 target", stop_after=opt.stop_after)
  model = bundle.Model(T5(TARGET), params)
  held = seq2seq.eval_metrics(seq2seq.ce_loss(module), params, data["held_out"])
  return model, {"held_out": held}


def warm_start(folder):
  """The params of a saved target folder; its config must be TARGET's (same shapes, same vocab)."""
  model = checkpoint.load_model(folder)
  if dataclasses.replace(model.config, dtype=TARGET.dtype) != TARGET:
    raise common.UsageError(f"--init_from={folder} holds {model.config}, not the T5 EnDe target {TARGET}")
  return model.params


def train_drafters(opt, names, data, workdir, steps):
  """Distils every drafter in ``names`` from the target in one run: one teacher forward per batch,
  the loss the sum of each drafter's KD loss (their params are disjoint, so each gets its own
  gradient; the global-norm clip sees all three, hence the larger clip_norm)."""
  target = checkpoint.load_model(pathlib.Path(opt.out) / "target")
  teacher = T5(bf16(TARGET))
  students = {n: T5(bf16(DRAFTERS[n])) for n in names}
  init = {n: bundle.init_model(students[n], opt.seed + 1 + i).params for i, n in enumerate(names)}
  each = {n: seq2seq.kd_loss(students[n], teacher, target.params) for n in names}

  def loss_fn(params, batch):
    t_logits = seq2seq.teacher_logits(teacher, target.params, batch)
    total, metrics = 0.0, {}
    for n in names:
      loss, m = each[n](params[n], batch, t_logits)
      total = total + loss
      metrics.update({f"{n}/{k}": v for k, v in dict(m, loss=loss).items()})
    return total, metrics

  cfg = loop.TrainConfig(steps=steps, learning_rate=opt.learning_rate or LEARNING_RATE, warmup_steps=20,
                         checkpoint_every=25, clip_norm=3.0)
  params = loop.train(init, loss_fn, seq2seq.Batches(data["train"], opt.seed + 2), cfg, workdir,
                      desc=f"T5 drafters {','.join(names)} (KD)", stop_after=opt.stop_after)
  out = {}
  for n in names:
    model = bundle.Model(T5(DRAFTERS[n]), params[n])
    out[n] = (model, {"target_params": target.num_params, "ratio": f"1/{target.num_params / model.num_params:.0f}",
                      "held_out_after": seq2seq.eval_metrics(each[n], params[n], data["held_out"])})
  return out


def evaluate(opt, pairs, n):
  """chrF (sacrebleu) of greedy translations of the first n held-out pairs, every shipped model."""
  tok = sentencepiece_tok.load()
  rng = np.random.default_rng(1234)
  idx = np.sort(rng.choice(len(pairs["held_out"]), min(n, len(pairs["held_out"])), replace=False))
  src = [pairs["held_out"][i][0] for i in idx]
  ref = [pairs["held_out"][i][1] for i in idx]
  report = {"pairs": len(src), "catalogues": list(ende.HELD_OUT_CATALOGUES)}
  for name in ["target"] + [f"drafter_{d}" for d in DRAFTERS]:
    folder = pathlib.Path(opt.out) / name
    if not folder.is_dir():
      continue
    t0 = time.time()
    hyp = seq2seq.greedy_translations(checkpoint.load_model(folder), tok, src, ende.T5_PREFIX)
    report[name] = {"chrF": round(seq2seq.chrf(hyp, ref), 2), "wall_s": round(time.time() - t0, 1),
                    "examples": [{"en": s, "ref": r, "hyp": h} for s, r, h in list(zip(src, ref, hyp))[:12]]}
    print(name, "chrF", report[name]["chrF"], flush=True)
  return report


def write_prompts(out, n: int = 8, seed: int = 0):
  """``prompts.txt`` for configs/t5xxl_small.py:cpu: n held-out sources (JSON strings, prefixed)."""
  pairs = ende.split_pairs()["held_out"]
  rng = np.random.default_rng(seed)
  picks = [pairs[i][0] for i in rng.permutation(len(pairs)) if 20 <= len(pairs[i][0]) <= 80][:n]
  path = pathlib.Path(out) / "prompts.txt"
  path.write_text("".join(json.dumps(ende.T5_PREFIX + s, ensure_ascii=False) + "\n" for s in picks))
  return path


def run(opt, command: str) -> int:
  if opt.init_from and opt.stage != "target":
    raise common.UsageError(f"--init_from={opt.init_from} applies to --stage=target only, not --stage={opt.stage}")
  out = pathlib.Path(opt.out)
  if opt.stage == "tokenizer":
    tok = sentencepiece_tok.train_from_catalogues(vocab_size=VOCAB, seed=opt.seed)
    print(f"wrote {sentencepiece_tok.ASSET} ({tok.vocab_size} pieces) and {write_prompts(out)}")
    return 0
  # a wrong --init_from fails here, before minutes of tokenizing
  init = warm_start(opt.init_from) if opt.init_from else None
  tok = sentencepiece_tok.load()
  if tok.vocab_size != VOCAB:
    raise ValueError(f"{sentencepiece_tok.ASSET} has {tok.vocab_size} pieces, the models expect {VOCAB}")
  data, pairs = splits(opt, tok)
  if opt.stage == "eval":
    report = evaluate(opt, pairs, opt.eval_pairs)
    (out / "chrf.json").write_text(json.dumps(report, indent=2, ensure_ascii=False) + "\n")
    return 0
  t0 = time.time()
  steps = opt.steps or STEPS[opt.stage]
  if opt.stage == "target":
    workdir = pathlib.Path(opt.workdir) / "target"
    results = {"target": train_target(opt, data, workdir, steps, init)}
  else:
    workdir = pathlib.Path(opt.workdir) / "drafters"
    results = {f"drafter_{n}": r for n, r in train_drafters(opt, opt.drafters, data, workdir, steps).items()}
  for name, (model, report) in results.items():
    report.update(params=model.num_params, config=dataclasses.asdict(model.config), steps=steps,
                  train_pairs=len(data["train"].enc), held_out_pairs=len(data["held_out"].enc), seed=opt.seed,
                  wall_s_this_run=round(time.time() - t0, 1), command=command)
    checkpoint.save_model(model, out / name, dtype="bfloat16")
    copy_tokenizer(out / name)
    (out / name / "training.json").write_text(json.dumps(report, indent=2) + "\n")
    print(name, json.dumps(report, indent=2))
  loop.plot_loss(workdir, title=f"T5 EnDe {opt.stage}")
  return 0


def main(argv) -> int:
  fv = flags.FlagValues()
  d = lambda kind, name, default, text, **kw: common.define(fv, kind, name, default, text, **kw)
  d("enum", "stage", "target", "what to do", enum_values=["tokenizer", "target", "drafters", "eval"])
  d("list", "drafters", "small,base,large", "which drafters (--stage=drafters), distilled together")
  d("string", "workdir", "runs/t5_ende", "checkpoints, metrics and plots (never committed)")
  d("string", "out", "specjax/assets/t5_ende", "where the finished weights go")
  d("integer", "steps", None, "optimizer steps (default: the stage's)")
  d("integer", "stop_after", None, "end this run at that step (checkpointed; a later run resumes)")
  d("integer", "eval_pairs", 500, "held-out pairs for chrF (--stage=eval)")
  d("integer", "seed", 0, "seed for init and data order")
  d("float", "dec_input_dropout", 0.0, "fraction of decoder input tokens replaced by UNK (word dropout)")
  d("float", "learning_rate", None, "peak AdamW rate (default: the stage's); a resumed run may lower it")
  d("list", "extra_catalogues", [], "more folders of German *.mo catalogues for the training side "
    "(scripts/fetch_debian_catalogues.sh); the held-out catalogues and the tokenizer stay as shipped")
  d("string", "init_from", None, "--stage=target: start from this model folder's weights (e.g. the shipped "
    "specjax/assets/t5_ende/target) with a fresh optimizer, instead of a seeded init; a new --workdir")
  d("integer", "warmup_steps", 40, "linear warmup before the cosine decay")
  return common.run_task(fv, argv, __doc__, "t5_ende", lambda: run(fv, " ".join(argv)))
