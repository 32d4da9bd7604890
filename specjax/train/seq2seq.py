"""Encoder-decoder (T5) training pieces: tokenized pairs in length buckets, CE and KD losses, chrF.

Batches are dicts ``{"enc": [B, S], "enc_len": [B], "dec_in": [B, T], "labels": [B, T]}``: the
decoder input is ``[start, y_0 .. y_{n-2}]`` and the labels ``[y_0 .. y_{n-1}]`` (``y`` ends with
EOS), right-padded with ``pad_id`` (0, T5's decoder start too), pads weighted 0. Length buckets
keep the token count per batch about constant with a few static shapes (one compile each), since
catalogue strings are mostly short. ``batch_at(step)`` is a pure function of the step, so a
resumed run (``specjax.train.loop``) sees the same data.
"""
from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import optax

# (max tokens per side, rows): about 4k encoder + 4k decoder slots per batch
BUCKETS = ((24, 160), (40, 96), (64, 64))


@dataclasses.dataclass
class Tokenized:
  enc: list  # encoder ids (prefix + English + EOS) per pair
  dec: list  # German ids + EOS per pair

  def __post_init__(self):
    if len(self.enc) != len(self.dec):
      raise ValueError(f"{len(self.enc)} encoder rows but {len(self.dec)} decoder rows")


def tokenize(pairs, tok, prefix: str, max_len: int = BUCKETS[-1][0]) -> Tokenized:
  """Encodes ``(english, german)`` pairs; pairs with either side longer than ``max_len`` are dropped."""
  enc, dec = [], []
  for en, de in pairs:
    e, d = tok.encode(prefix + en), tok.encode(de)
    if len(e) <= max_len and len(d) <= max_len:
      enc.append(e), dec.append(d)
  if not enc:
    raise ValueError(f"no pair fits max_len={max_len} tokens")
  return Tokenized(enc, dec)


def pad(rows, width: int, pad_id: int = 0) -> np.ndarray:
  out = np.full((len(rows), width), pad_id, np.int32)
  for i, r in enumerate(rows):
    out[i, :len(r)] = r
  return out


def make_batch(data: Tokenized, idx, width: int, pad_id: int = 0, start_id: int = 0) -> dict:
  enc = [data.enc[i] for i in idx]
  dec = [data.dec[i] for i in idx]
  return {"enc": pad(enc, width, pad_id), "enc_len": np.array([len(e) for e in enc], np.int32),
          "dec_in": pad([[start_id] + d[:-1] for d in dec], width, pad_id), "labels": pad(dec, width, pad_id)}


class Batches:
  """Bucketed training batches: bucket drawn in proportion to its pairs, rows uniform within it.

  ``dec_input_dropout`` replaces that fraction of the decoder's input tokens (never the start
  token, never the labels) by ``unk_id``: word dropout, a data-side regulariser that makes the
  decoder's own history unreliable, so a small model on little data must read the encoder instead
  of memorising the German side as a language model.
  """

  def __init__(self, data: Tokenized, seed: int, buckets=BUCKETS, dec_input_dropout: float = 0.0, unk_id: int = 2):
    if not 0.0 <= dec_input_dropout < 1.0:
      raise ValueError(f"dec_input_dropout={dec_input_dropout} must be in [0, 1)")
    self.data, self.seed, self.buckets = data, seed, buckets
    self.dec_input_dropout, self.unk_id = dec_input_dropout, unk_id
    longest = np.array([max(len(e), len(d)) for e, d in zip(data.enc, data.dec)])
    self.members, lo = [], 0
    for width, _ in buckets:
      self.members.append(np.nonzero((longest > lo) & (longest <= width))[0])
      lo = width
    sizes = np.array([len(m) for m in self.members], np.float64)
    self.prob = sizes / sizes.sum()

  def __call__(self, step: int) -> dict:
    rng = np.random.default_rng([self.seed, step])
    b = int(rng.choice(len(self.buckets), p=self.prob))
    width, rows = self.buckets[b]
    batch = make_batch(self.data, rng.choice(self.members[b], rows), width)
    if self.dec_input_dropout:
      dec = batch["dec_in"]
      drop = (rng.random(dec.shape) < self.dec_input_dropout) & (dec != 0)  # pads and the start token stay
      batch["dec_in"] = np.where(drop, self.unk_id, dec).astype(np.int32)
    return batch


def _logits(module, params, batch):
  return module.apply({"params": params}, batch["dec_in"], encoder_tokens=batch["enc"],
                      encoder_lengths=batch["enc_len"])[0]


def ce_loss(module, pad_id: int = 0):
  def loss_fn(params, batch):
    logits = _logits(module, params, batch)
    weight = (batch["labels"] != pad_id).astype(jnp.float32)
    nll = optax.softmax_cross_entropy_with_integer_labels(logits, batch["labels"])
    loss = jnp.sum(nll * weight) / jnp.maximum(weight.sum(), 1.0)
    acc = jnp.sum((jnp.argmax(logits, -1) == batch["labels"]) * weight) / jnp.maximum(weight.sum(), 1.0)
    return loss, {"token_accuracy": acc}
  return loss_fn


def teacher_logits(teacher, teacher_params, batch):
  return jax.lax.stop_gradient(_logits(teacher, teacher_params, batch))


def kd_loss(student, teacher, teacher_params, pad_id: int = 0, hard_weight: float = 0.1):
  """KL(teacher || student) at every reference position + ``hard_weight`` x CE; reports the
  temperature-1 agreement sum_x min(p, q) (alpha's estimate) and greedy agreement. The returned
  ``loss_fn(params, batch, t_logits=None)`` takes precomputed teacher logits to share them."""
  def loss_fn(params, batch, t_logits=None):
    if t_logits is None:
      t_logits = teacher_logits(teacher, teacher_params, batch)
    s_logits = _logits(student, params, batch)
    t_logp, s_logp = jax.nn.log_softmax(t_logits), jax.nn.log_softmax(s_logits)
    weight = (batch["labels"] != pad_id).astype(jnp.float32)
    norm = jnp.maximum(weight.sum(), 1.0)
    kl = jnp.sum(jnp.exp(t_logp) * (t_logp - s_logp), -1)
    ce = optax.softmax_cross_entropy_with_integer_labels(s_logits, batch["labels"])
    loss = jnp.sum((kl + hard_weight * ce) * weight) / norm
    alpha = jnp.sum(jnp.minimum(jnp.exp(t_logp), jnp.exp(s_logp)), -1)
    agree = (jnp.argmax(t_logits, -1) == jnp.argmax(s_logits, -1)).astype(jnp.float32)
    return loss, {"kl": jnp.sum(kl * weight) / norm, "alpha_t1": jnp.sum(alpha * weight) / norm,
                  "greedy_agreement": jnp.sum(agree * weight) / norm}
  return loss_fn


def eval_metrics(loss_fn, params, data: Tokenized, rows: int = 64, max_pairs: int = 512) -> dict:
  """Mean of ``loss_fn``'s loss and metrics over the first ``max_pairs`` of ``data`` in fixed
  64-wide batches (one compile)."""
  fn = jax.jit(loss_fn)
  sums, n = {}, 0
  width = BUCKETS[-1][0]
  for a in range(0, min(len(data.enc), max_pairs) - rows + 1, rows):
    loss, m = fn(params, make_batch(data, range(a, a + rows), width))
    for k, v in dict(m, loss=loss).items():
      sums[k] = sums.get(k, 0.0) + float(v)
    n += 1
  return {k: v / max(n, 1) for k, v in sums.items()}


def greedy_translations(model, tok, sources, prefix: str, *, batch: int = 32, max_new_tokens: int = 64,
                        width: int = 64) -> list[str]:
  """The model's greedy translations of English ``sources`` (``specjax.generate``, stops at EOS)."""
  from specjax import decode  # pylint: disable=import-outside-toplevel
  out = []
  for a in range(0, len(sources), batch):
    chunk = [tok.encode(prefix + s)[:width] for s in sources[a:a + batch]]
    rows = chunk + [chunk[-1]] * (batch - len(chunk))  # a fixed batch: one compile
    gen = decode.generate(model, pad(rows, width), np.array([len(r) for r in rows], np.int32),
                          max_new_tokens=max_new_tokens, eos_id=tok.eos_id)
    for i in range(len(chunk)):
      out.append(tok.decode(gen.tokens[i, :gen.lengths[i]], skip_special_tokens=True))
  return out


def chrf(hypotheses, references) -> float:
  import sacrebleu  # pylint: disable=import-outside-toplevel
  return float(sacrebleu.corpus_chrf(list(hypotheses), [list(references)]).score)
