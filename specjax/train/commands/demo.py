"""The demo pair (target and draft model) trained on the Python stdlib source -> specjax/assets/demo/.

  # target (~45 min on 2 idle CPU cores), the drafter distilled from its softmax on the corpus
  # (~8 min), then sequence-level KD on target-generated text mixed with corpus text (~12 min):
  python -m specjax.train demo --stage=target --workdir=runs/demo
  python -m specjax.train demo --stage=drafter --workdir=runs/demo
  python -m specjax.train demo --stage=drafter_seqkd --workdir=runs/demo

Every stage resumes from its orbax checkpoints if interrupted. Seeds are fixed.
"""
from __future__ import annotations

import dataclasses
import json
import pathlib
import time

from absl import flags
import jax
import jax.numpy as jnp
import numpy as np

import specjax
from specjax import checkpoint
from specjax.data import code_corpus
from specjax.data.tokenizer import ByteTokenizer
from specjax.models import bundle
from specjax.models.decoder import Decoder, DecoderConfig
from specjax.train import loop, objectives
from specjax.train.commands import common

TOK = ByteTokenizer()
TARGET = DecoderConfig(vocab_size=TOK.vocab_size, d_model=384, num_layers=6, num_heads=6, num_kv_heads=6,
                       head_dim=64, mlp_dim=1024, tie_embeddings=True)
DRAFTER = DecoderConfig(vocab_size=TOK.vocab_size, d_model=192, num_layers=1, num_heads=3, num_kv_heads=3,
                        head_dim=64, mlp_dim=512, tie_embeddings=True)
BATCH, SEQ = 32, 256


def held_out_bits_per_byte(module, params, data, n_batches=8):
  loss_fn = jax.jit(objectives.lm_loss(module, TOK.pad_id))
  losses = [float(loss_fn(params, jnp.asarray(code_corpus.batch_at(data, i, 16, SEQ, seed=1234)))[0])
            for i in range(n_batches)]
  return float(np.mean(losses) / np.log(2.0))


def target_generated(target, train, workdir, seed, rows=512, prompt_len=32, batch=64):
  """Target continuations of corpus crops: half greedy, half sampled at temperature 1 (cached)."""
  path = workdir / "generated.npy"
  if path.exists():
    return np.load(path)
  out = []
  for i in range(rows // batch):
    prompts = code_corpus.batch_at(train, 10_000 + i, batch, prompt_len - 1, seed=seed)
    sampling = specjax.Sampling(0.0 if i % 2 == 0 else 1.0)
    gen = specjax.generate(target, prompts, np.full((batch,), prompt_len), max_new_tokens=SEQ + 1 - prompt_len,
                           sampling=sampling, rng=jax.random.PRNGKey(i))
    out.append(np.concatenate([prompts, gen.tokens], axis=1))
  data = np.concatenate(out).astype(np.int32)
  workdir.mkdir(parents=True, exist_ok=True)
  np.save(path, data)
  return data


def sequence_kd(opt, train, held, workdir):
  """Continues the drafter on target-generated text (and corpus text, alternating), KD loss."""
  target = checkpoint.load_model(pathlib.Path(opt.out) / "target")
  drafter = checkpoint.load_model(pathlib.Path(opt.out) / "drafter")
  generated = target_generated(target, train, workdir, opt.seed)
  held_gen, train_gen = generated[:32], generated[32:]
  module = Decoder(dataclasses.replace(DRAFTER, dtype="bfloat16"))
  teacher = Decoder(dataclasses.replace(TARGET, dtype="bfloat16"))
  loss_fn = objectives.distill_loss(module, teacher, target.params, TOK.pad_id, hard_weight=0.1)

  def batch_fn(step):
    if step % 2:
      return jnp.asarray(code_corpus.batch_at(train, step, BATCH, SEQ, opt.seed + 7))
    rows = np.random.default_rng([opt.seed, step]).integers(0, len(train_gen), BATCH)
    return jnp.asarray(train_gen[rows])

  probes = {"corpus": jnp.asarray(code_corpus.batch_at(held, 0, 16, SEQ, seed=99)), "generated": jnp.asarray(held_gen)}
  metrics = jax.jit(loss_fn)
  before = {k: {m: float(v) for m, v in metrics(drafter.params, p)[1].items()} for k, p in probes.items()}
  cfg = loop.TrainConfig(steps=opt.seqkd_steps, learning_rate=2e-3, warmup_steps=10, checkpoint_every=20)
  params = loop.train(drafter.params, loss_fn, batch_fn, cfg, workdir, desc="drafter seq-KD")
  after = {k: {m: float(v) for m, v in metrics(params, p)[1].items()} for k, p in probes.items()}
  model = bundle.Model(Decoder(DRAFTER), params)
  return model, {"params": model.num_params, "train_tokens": opt.seqkd_steps * BATCH * SEQ,
                 "generated_rows": int(len(generated)), "held_out_before": before, "held_out_after": after}


def run(opt) -> int:
  workdir = pathlib.Path(opt.workdir) / opt.stage
  train = code_corpus.load_split("train", TOK)
  held = code_corpus.load_split("held_out", TOK)
  batch_fn = lambda step: jnp.asarray(code_corpus.batch_at(train, step, BATCH, SEQ, opt.seed))
  t0 = time.time()
  if opt.stage == "target":
    module = Decoder(dataclasses.replace(TARGET, dtype="bfloat16"))
    init = bundle.init_model(module, opt.seed)
    cfg = loop.TrainConfig(steps=opt.target_steps, learning_rate=3e-3, warmup_steps=30, checkpoint_every=20)
    params = loop.train(init.params, objectives.lm_loss(module, TOK.pad_id), batch_fn, cfg, workdir,
                        desc="target")
    model = bundle.Model(Decoder(TARGET), params)
    report = {"params": model.num_params, "train_tokens": opt.target_steps * BATCH * SEQ}
  elif opt.stage == "drafter_seqkd":
    model, report = sequence_kd(opt, train, held, workdir)
  else:
    target = checkpoint.load_model(pathlib.Path(opt.out) / "target")
    module = Decoder(dataclasses.replace(DRAFTER, dtype="bfloat16"))
    teacher = Decoder(dataclasses.replace(TARGET, dtype="bfloat16"))
    init = bundle.init_model(module, opt.seed + 1)
    loss_fn = objectives.distill_loss(module, teacher, target.params, TOK.pad_id, hard_weight=0.1)
    probe = jnp.asarray(code_corpus.batch_at(held, 0, 16, SEQ, seed=99))
    before = {k: float(v) for k, v in jax.jit(loss_fn)(init.params, probe)[1].items()}
    cfg = loop.TrainConfig(steps=opt.drafter_steps, learning_rate=3e-3, warmup_steps=20, checkpoint_every=20)
    params = loop.train(init.params, loss_fn, batch_fn, cfg, workdir, desc="drafter")
    after = {k: float(v) for k, v in jax.jit(loss_fn)(params, probe)[1].items()}
    model = bundle.Model(Decoder(DRAFTER), params)
    report = {"params": model.num_params, "train_tokens": opt.drafter_steps * BATCH * SEQ,
              "held_out_before": before, "held_out_after": after}
  report["held_out_bits_per_byte"] = held_out_bits_per_byte(model.module, model.params, held)
  report["wall_s"] = round(time.time() - t0, 1)
  name = "drafter" if opt.stage == "drafter_seqkd" else opt.stage
  out = pathlib.Path(opt.out) / name
  if opt.stage == "drafter_seqkd":  # keep the KD stage's report beside this one
    report = {"kd_stage": json.loads((out / "training.json").read_text()), "seqkd_stage": report}
  checkpoint.save_model(model, out, dtype="bfloat16")
  (out / "training.json").write_text(json.dumps(report, indent=2) + "\n")
  loop.plot_loss(workdir, title=f"demo {opt.stage}")
  print(json.dumps(report, indent=2))
  return 0


def main(argv) -> int:
  fv = flags.FlagValues()
  d = lambda kind, name, default, text, **kw: common.define(fv, kind, name, default, text, **kw)
  d("enum", "stage", "target", "what to train", enum_values=["target", "drafter", "drafter_seqkd"])
  d("string", "workdir", "runs/demo", "checkpoints, metrics and plots")
  d("string", "out", "specjax/assets/demo", "where the finished weights go")
  d("integer", "target_steps", 360, "target optimizer steps (32 x 256 tokens each)")
  d("integer", "drafter_steps", 200, "drafter distillation steps")
  d("integer", "seqkd_steps", 300, "sequence-level KD steps (continuing the drafter)")
  d("integer", "seed", 0, "seed for init and data order")
  return common.run_task(fv, argv, __doc__, "demo", lambda: run(fv))
