"""Training MTP heads and DFlash block drafters on a FROZEN target ("healing" / feature distillation).

Batches are dicts of arrays: ``tokens [B, T]`` and the target's outputs on them, computed once by
:func:`target_features` (no gradient reaches the target): ``hidden [B, T, E]`` (after the final
norm; the target's logits are ``hidden @ unembed``) and, for DFlash, ``feat [B, T, n*E]`` (the
chosen layers' outputs, concatenated). Both losses are KL(target || drafter) on the target's own
next-token distributions, so they train what the accept rule rewards, at every temperature.
:func:`generated_text` makes DFlash's training data: target-generated continuations of corpus prompts.
"""
from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

import specjax
from specjax.models import block_drafter, heads


@functools.partial(jax.jit, static_argnames=("feature_layers",))
def target_features(target, tokens_BxT, feature_layers=()):
  """``{"tokens", "hidden"[, "feat"]}`` for a batch; plain causal forward, no cache, no grad."""
  tokens_BxT = jnp.asarray(tokens_BxT, jnp.int32)
  out = target.module.apply({"params": target.params}, tokens_BxT, return_layer_hidden=True)
  batch = {"tokens": tokens_BxT, "hidden": jax.lax.stop_gradient(out[1])}
  if feature_layers:
    batch["feat"] = jax.lax.stop_gradient(block_drafter.features(out[3], feature_layers))
  return batch


def kl_and_overlap(t_logits, s_logits):
  """KL(target || drafter) and the overlap sum(min(p, q)) (alpha at T=1), per position."""
  t_logp, s_logp = jax.nn.log_softmax(t_logits), jax.nn.log_softmax(s_logits)
  return jnp.sum(jnp.exp(t_logp) * (t_logp - s_logp), -1), jnp.sum(jnp.minimum(jnp.exp(t_logp), jnp.exp(s_logp)), -1)


def accept_len(match_xK):
  """Greedy acceptance length per chain (teacher-forced): leading run of argmax matches."""
  return jnp.sum(jnp.cumprod(match_xK.astype(jnp.float32), -1), -1)


def frozen_io(target, subset_K=None):
  """``(embed, unembed)`` of the frozen target (``unembed`` cut to ``subset_K``'s columns)."""
  embed, unembed = heads.target_io(target)
  return embed, (unembed if subset_K is None else jnp.take(unembed, jnp.asarray(subset_K), axis=1))


def with_frozen(loss_fn, *arrays):
  """``loss_fn(*arrays, params, batch)`` as a ``loss_fn(params, batch)`` whose arrays are pytree
  leaves (``jax.tree_util.Partial``): the training step takes them as arguments
  (:func:`specjax.train.loop.make_train_step`), where a closure would compile the target's
  embedding and LM head into the program as constants (SmolLM2: 113 MB)."""
  return jax.tree_util.Partial(loss_fn, *arrays)


def mtp_loss(module, target, depth: int, decay: float = 0.8, subset_K=None):
  """The shared head unrolled ``depth`` times from each position's target hidden state.

  Step k (1-based) gets the previous step's output (the target's hidden at t for k = 1) and the
  embedding of x_{t+k}, and is compared with the target's distribution at t+k (for x_{t+k+1}).
  Depth k weighs ``decay ** (k - 1)``. A truncated head (``subset_K``) learns the target's
  distribution renormalised over its subset.
  """
  w_J = decay ** jnp.arange(depth, dtype=jnp.float32)

  def loss_fn(embed, unembed, params, batch):
    tokens, hidden = batch["tokens"], batch["hidden"].astype(jnp.float32)
    t = tokens.shape[1] - depth
    g = hidden[:, :t]
    kls, alphas, matches = [], [], []
    for k in range(1, depth + 1):
      g = module.apply({"params": params}, g, embed[tokens[:, k:t + k]])
      s_logits = g.astype(jnp.float32) @ unembed
      t_logits = jax.lax.stop_gradient(hidden[:, k:t + k] @ unembed)
      kl, alpha = kl_and_overlap(t_logits, s_logits)
      kls.append(kl.mean()), alphas.append(alpha.mean())
      matches.append(jnp.argmax(s_logits, -1) == jnp.argmax(t_logits, -1))
    kl_J, alpha_J = jnp.stack(kls), jnp.stack(alphas)
    loss = jnp.sum(w_J * kl_J) / jnp.sum(w_J)
    return loss, {"kl_first": kl_J[0], "kl_last": kl_J[-1], "alpha_t1_first": alpha_J[0],
                  "alpha_t1_last": alpha_J[-1], "accept_len": accept_len(jnp.stack(matches, -1)).mean()}
  return with_frozen(loss_fn, *frozen_io(target, subset_K))


def dflash_loss(module, target, decay: float = 4.0, subset_K=None):
  """Random anchors per sequence (``batch["anchors"] [B, N]``); block position i weighs exp(-(i-1)/decay).

  Each anchor ``a`` opens a block ``[x_a, MASK...]`` at positions ``a .. a+B-1`` that sees context
  slots ``< a`` (the target's features of the tokens before the anchor) and its own block only.
  ``subset_K``: as :func:`mtp_loss`.
  """
  blk = module.cfg.block_size
  w_Y = jnp.exp(-jnp.arange(blk - 1, dtype=jnp.float32) / decay)

  def loss_fn(embed, unembed, params, batch):
    tokens, hidden, feat, anchors = batch["tokens"], batch["hidden"], batch["feat"], batch["anchors"]
    b, t = tokens.shape
    n = anchors.shape[1]
    apply = functools.partial(module.apply, {"params": params})
    ck, cv = apply(feat, jnp.broadcast_to(jnp.arange(t)[None], (b, t)), method="context")
    pos_BxNxY = anchors[:, :, None] + jnp.arange(blk)[None, None]
    anchor_emb = embed[jnp.take_along_axis(tokens, anchors, 1)]                     # [B, N, E]
    tok_emb = jnp.broadcast_to(anchor_emb[:, :, None], (b, n, blk, embed.shape[1])).reshape(b, n * blk, -1)
    is_mask = jnp.broadcast_to(jnp.arange(blk)[None, None] > 0, (b, n, blk)).reshape(b, n * blk)
    ctx_vis = (jnp.arange(t)[None, None] < anchors[:, :, None])                       # [B, N, T]
    ctx_vis = jnp.broadcast_to(ctx_vis[:, :, None], (b, n, blk, t)).reshape(b, n * blk, t)
    mask = block_drafter.block_mask(ctx_vis, jnp.repeat(jnp.arange(n), blk))
    h = apply(tok_emb, is_mask, pos_BxNxY.reshape(b, n * blk), ck, cv, mask).reshape(b, n, blk, -1)
    s_logits = h[:, :, 1:].astype(jnp.float32) @ unembed                               # predicts x_{a+i}
    t_hidden = jnp.take_along_axis(hidden, pos_BxNxY[:, :, :-1].reshape(b, -1)[..., None], 1)
    t_logits = jax.lax.stop_gradient(t_hidden.astype(jnp.float32) @ unembed).reshape(s_logits.shape)
    kl, alpha = kl_and_overlap(t_logits, s_logits)                                               # [B, N, I]
    loss = jnp.sum(kl.mean((0, 1)) * w_Y) / jnp.sum(w_Y)
    match = jnp.argmax(s_logits, -1) == jnp.argmax(t_logits, -1)
    return loss, {"kl_first": kl[..., 0].mean(), "alpha_t1_first": alpha[..., 0].mean(),
                  "alpha_t1_mean": alpha.mean(), "accept_len": accept_len(match).mean()}
  return with_frozen(loss_fn, *frozen_io(target, subset_K))


def random_anchors(rng: np.random.Generator, batch: int, seq_len: int, block_size: int, n: int, low: int = 1):
  """``[batch, n]`` anchors in ``[low, seq_len - block_size]``: each block's labels stay in the sequence."""
  high = seq_len - block_size
  if high < low:
    raise ValueError(f"sequences of {seq_len} tokens are too short for block_size={block_size}")
  return rng.integers(low, high + 1, size=(batch, n)).astype(np.int32)


def generated_text(target, prompts_NxP, gen_len: int, *, temperature: float = 0.0, batch: int = 64,
                   seed: int = 0) -> np.ndarray:
  """``[N, P + gen_len]``: each prompt followed by the target's own continuation (DFlash's data)."""
  rows = []
  sampling = specjax.Sampling(temperature=temperature)
  for i in range(0, len(prompts_NxP), batch):
    p = np.asarray(prompts_NxP[i:i + batch], np.int32)
    out = specjax.generate(target, p, np.full((len(p),), p.shape[1]), max_new_tokens=gen_len, sampling=sampling,
                           rng=jax.random.PRNGKey(seed + i))
    rows.append(np.concatenate([p, out.tokens], 1))
  return np.concatenate(rows, 0)


def generated_text_over(target, prompts_NxP, gen_len: int, temperatures, seed: int = 0) -> np.ndarray:
  """:func:`generated_text` with the prompts split evenly over ``temperatures``, rows in prompt order."""
  parts = np.array_split(np.arange(len(prompts_NxP)), len(temperatures))
  return np.concatenate([generated_text(target, prompts_NxP[idx], gen_len, temperature=t, seed=seed)
                         for idx, t in zip(parts, temperatures)])


# ----------------------------------------------------------------------------- data pools, evaluation
def corpus_prompts(data: np.ndarray, n: int, prompt_len: int, seed: int, newline: int = 10) -> np.ndarray:
  """``[n, prompt_len]`` crops of a token stream starting at line starts (deterministic in ``seed``)."""
  starts = np.flatnonzero(data[:-prompt_len - 1] == newline) + 1
  chosen = np.random.default_rng(seed).choice(starts, size=n, replace=False)
  return np.stack([data[s:s + prompt_len] for s in chosen]).astype(np.int32)


def feature_pool(target, tokens_NxT: np.ndarray, feature_layers=(), chunk: int = 32, dtype="bfloat16") -> dict:
  """Target outputs for every row, computed once, stored on the host (bf16 halves the memory)."""
  import ml_dtypes  # pylint: disable=import-outside-toplevel
  np_dtype = ml_dtypes.bfloat16 if dtype == "bfloat16" else np.float32
  parts = []
  for i in range(0, len(tokens_NxT), chunk):
    out = jax.device_get(target_features(target, tokens_NxT[i:i + chunk], tuple(feature_layers)))
    parts.append({k: (v if k == "tokens" else np.asarray(v).astype(np_dtype)) for k, v in out.items()})
  return {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}


def pool_batch(pool: dict, step: int, batch: int, seed: int, anchors: tuple | None = None) -> dict:
  """Rows drawn by ``(seed, step)`` (so a resumed run sees the same data); ``anchors=(block, n)`` adds
  DFlash's random anchors."""
  rng = np.random.default_rng([seed, step])
  idx = rng.integers(0, len(pool["tokens"]), size=batch)
  out = {k: jnp.asarray(v[idx]) for k, v in pool.items()}
  if anchors is not None:
    out["anchors"] = jnp.asarray(random_anchors(rng, batch, pool["tokens"].shape[1], *anchors))
  return out


def acceptance_by_gamma(target, drafter, prompts_BxP, gammas, max_new_tokens: int = 128, temperature: float = 0.0):
  """Real speculative runs: per gamma, mean accepted drafts and acceptance length (tokens/iteration)."""
  out = {}
  for g in gammas:
    st = specjax.speculative_generate(target, drafter, prompts_BxP, np.full((len(prompts_BxP),), prompts_BxP.shape[1]),
                                      gamma=g, max_new_tokens=max_new_tokens,
                                      sampling=specjax.Sampling(temperature)).stats
    out[g] = {"acceptance_length": st["tokens_per_iteration"], "mean_accepted": st["mean_accepted"],
              "alpha": st["alpha"], "acceptance_per_position": st["acceptance_per_position"]}
  return out


def text_pool(target, data: np.ndarray, n: int, seq_len: int, *, source: str = "generated", prompt_len: int = 64,
              temperatures=(0.0,), seed: int = 0) -> np.ndarray:
  """``[n, seq_len]`` training text: target continuations of corpus prompts (``source="generated"``,
  split evenly over ``temperatures``), or plain corpus crops (``source="corpus"``)."""
  if source == "corpus":
    from specjax.data import code_corpus  # pylint: disable=import-outside-toplevel
    return code_corpus.batch_at(data, 0, n, seq_len - 1, seed).astype(np.int32)
  if source != "generated":
    raise ValueError(f"source must be 'generated' or 'corpus', got {source!r}")
  return generated_text_over(target, corpus_prompts(data, n, prompt_len, seed), seq_len - prompt_len,
                             temperatures, seed)
