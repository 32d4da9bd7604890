"""Per-layer sliding windows (Gemma 3 / Mistral style) with every family piece on, no transformers:
a naive per-query reference forward equals specjax.logits; cached prefill + steps (ragged rows,
rollback) equal the full forward past the window; greedy speculative == greedy autoregressive for
chain, tree and head drafters, each accepted at every draft depth (the MTP, DFlash and Medusa heads
fitted in this module to the target's greedy text for the batch-3 prompts, tests/head_fit.py); a
draft deeper than the window is refused."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import head_fit
import stats_util
import specjax
from specjax import testing
from specjax.drafters import medusa as medusa_lib
from specjax.models import api, block_drafter, heads, kv_cache
from specjax.train import heads as train_heads
from specjax.train import medusa as train_medusa

V = 64
WINDOWS = (3, 0, 3)  # local, global, local
MAX_NEW = 16
FAMILY = dict(layer_windows=WINDOWS, local_rope_theta=100.0, rope_theta=10000.0, norm_offset=1.0, sandwich_norms=True,
              qk_norm=True, scale_embeddings=True, mlp_activation="gelu_tanh", qkv_bias=True,
              query_pre_attn_scalar=12.0)


def _randomize_vectors(model, seed):
  """Norm scales (0 under offset 1) and q/k/v biases init to zero: make them matter."""
  leaves, treedef = jax.tree_util.tree_flatten_with_path(model.params)
  keys = jax.random.split(jax.random.PRNGKey(seed), len(leaves))
  out = []
  for (path, x), k in zip(leaves, keys):
    name = jax.tree_util.keystr(path)
    if "scale" in name or "_bias" in name:
      x = x + 0.3 * jax.random.normal(k, x.shape)
    out.append(x)
  return model.replace(params=jax.tree_util.tree_unflatten(treedef, out))


def _windowed(**over):
  cfg = dict(FAMILY, num_layers=3)
  cfg.update(over)
  return _randomize_vectors(testing.tiny_decoder(V, seed=0, **cfg), seed=1)


_logits = jax.jit(specjax.logits)  # an eager forward costs seconds; a compile, one


@pytest.fixture(scope="module")
def target():
  return _windowed()


# ----------------------------------------------------------------------------- (a) naive reference
def _rms(x, w, offset, eps):
  return x / np.sqrt(np.mean(x * x, -1, keepdims=True) + eps) * (offset + w)


def _rope(x_TxHxD, theta):
  d = x_TxHxD.shape[-1]
  freq = theta ** (-np.arange(0, d, 2) / d)
  ang = np.arange(len(x_TxHxD))[:, None, None] * freq
  x1, x2 = x_TxHxD[..., :d // 2], x_TxHxD[..., d // 2:]
  return np.concatenate([x1 * np.cos(ang) - x2 * np.sin(ang), x2 * np.cos(ang) + x1 * np.sin(ang)], -1)


def _gelu_tanh(x):
  return 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x ** 3)))


def reference_logits(model, tokens_T, windows):
  """One row, float64, explicit loops: query i sees keys max(0, i - w + 1) .. i in a layer of window w
  (``windows[layer]``; 0 or ``()``: all of 0 .. i)."""
  cfg = model.config
  p = jax.tree_util.tree_map(lambda a: np.asarray(a, np.float64), model.params)
  off, eps, t = cfg.norm_offset, cfg.norm_eps, len(tokens_T)
  x = p["embed"][np.asarray(tokens_T)] * np.sqrt(cfg.d_model)
  group = cfg.num_heads // cfg.num_kv_heads
  for layer in range(cfg.num_layers):
    lp, w = p[f"layer_{layer}"], windows[layer] if windows else 0
    a = lp["attn"]
    h = _rms(x, lp["attn_norm"]["scale"], off, eps)
    q, k, v = (np.einsum("te,ehd->thd", h, a[n]) + a[f"{n}_bias"] for n in "qkv")
    q, k = _rms(q, a["q_norm"]["scale"], off, eps), _rms(k, a["k_norm"]["scale"], off, eps)
    theta = cfg.local_rope_theta if cfg.window(layer) else cfg.rope_theta  # the model's own, whatever the mask
    q, k = _rope(q, theta), _rope(k, theta)
    out = np.zeros_like(q)
    for i in range(t):
      lo = max(0, i - w + 1) if w else 0
      for head in range(cfg.num_heads):
        kv = head // group
        s = k[lo:i + 1, kv] @ q[i, head] / np.sqrt(cfg.query_pre_attn_scalar)
        e = np.exp(s - s.max())
        out[i, head] = (e / e.sum()) @ v[lo:i + 1, kv]
    attn = np.einsum("thd,hde->te", out, a["o"])
    x = x + _rms(attn, lp["post_attn_norm"]["scale"], off, eps)
    h = _rms(x, lp["mlp_norm"]["scale"], off, eps)
    m = lp["mlp"]
    mlp = (_gelu_tanh(h @ m["gate"]) * (h @ m["up"])) @ m["down"]
    x = x + _rms(mlp, lp["post_mlp_norm"]["scale"], off, eps)
  return _rms(x, p["final_norm"]["scale"], off, eps) @ p["lm_head"]


def test_reference_forward_equals_logits(target):
  toks = jax.random.randint(jax.random.PRNGKey(3), (2, 11), 0, V)
  got = np.asarray(_logits(target, toks))
  for row in range(2):
    want = reference_logits(target, np.asarray(toks[row]), WINDOWS)
    np.testing.assert_allclose(got[row], want, atol=2e-4, rtol=2e-4)
  assert got.std() > 1.0  # sharp, varied logits


def test_window_changes_the_output(target):
  """The window is live: the same weights without it give other logits once a sequence outgrows it."""
  toks = np.asarray(jax.random.randint(jax.random.PRNGKey(3), (11,), 0, V))
  windowed, full = reference_logits(target, toks, WINDOWS), reference_logits(target, toks, ())
  np.testing.assert_allclose(windowed[:3], full[:3], atol=1e-9)  # within the window: identical
  assert np.abs(windowed[3:] - full[3:]).max() > 0.1


# ----------------------------------------------------------------------------- (b) cache
_forward = jax.jit(api.forward)  # the model is a pytree (its module static): one compile per shape
def _cache(model, batch, max_len):
  cfg = model.config
  return kv_cache.init_cache(cfg.num_layers, batch, max_len, cfg.num_kv_heads, cfg.head_dim)


def _full(target, rows):
  """Cache-free logits of three 16-token rows: one shape, one compile (an eager forward is slow)."""
  return np.asarray(_logits(target, jnp.stack(rows)))


def test_prefill_then_steps_equal_full_forward(target):
  toks = jax.random.randint(jax.random.PRNGKey(4), (3, 16), 0, V)
  full = _full(target, list(toks))
  logits, _, cache = _forward(target, toks[:2, :5], _cache(target, 2, 16))  # prefill longer than the window
  np.testing.assert_allclose(logits, full[:2, :5], atol=1e-4)
  cache = cache.with_length(jnp.array([5, 5]))
  for i in range(5, 14):  # one token at a time, far past the window
    logits, _, cache = _forward(target, toks[:2, i:i + 1], cache)
    np.testing.assert_allclose(logits[:, 0], full[:2, i], atol=1e-4, err_msg=f"step {i}")
    cache = cache.with_length(cache.length_B + 1)


def test_ragged_rows_and_rollback(target):
  toks = jax.random.randint(jax.random.PRNGKey(5), (2, 16), 0, V)
  other = jax.random.randint(jax.random.PRNGKey(6), (4,), 0, V)
  alt = jnp.concatenate([toks[0, :10], other, jnp.array([7, 0])])  # row 0 after its rollback
  full = _full(target, [toks[0], toks[1], alt])
  _, _, cache = _forward(target, toks[:, :8], _cache(target, 2, 20))
  # ragged: row 0 commits 8, row 1 only 4; then a 4-token chunk (wider than the window) each
  cache = cache.with_length(jnp.array([8, 4]))
  logits, _, cache = _forward(target, jnp.stack([toks[0, 8:12], toks[1, 4:8]]), cache)
  np.testing.assert_allclose(logits[0], full[0, 8:12], atol=1e-4)
  np.testing.assert_allclose(logits[1], full[1, 4:8], atol=1e-4)
  # row 0 rolls back two slots written but rejected, and feeds other tokens there; row 1 goes on
  cache = cache.with_length(jnp.array([10, 8]))
  logits, _, cache = _forward(target, jnp.stack([other, toks[1, 8:12]]), cache)
  np.testing.assert_allclose(logits[0], full[2, 10:14], atol=1e-4)
  np.testing.assert_allclose(logits[1], full[1, 8:12], atol=1e-4)
  # one-token steps after the rollback
  cache = cache.with_length(jnp.array([14, 12]))
  logits, _, _ = _forward(target, jnp.array([[7], [int(toks[1, 12])]]), cache)
  np.testing.assert_allclose(logits[0, 0], full[2, 14], atol=1e-4)
  np.testing.assert_allclose(logits[1, 0], full[1, 12], atol=1e-4)


# ----------------------------------------------------------------------------- (c) greedy speculative
def _prompts(batch, seed):
  rs = np.random.RandomState(seed)
  lengths = np.array([9, 4, 6][:batch])  # every row longer than the window, ragged
  prompts = rs.randint(2, V, size=(batch, 9))
  prompts[np.arange(9)[None] >= lengths[:, None]] = 0
  return prompts, lengths


@pytest.fixture(scope="module")
def baselines(target):
  out = {b: specjax.generate(target, *_prompts(b, seed=b), max_new_tokens=MAX_NEW) for b in (1, 3)}
  for b, o in out.items():
    assert len(set(np.asarray(o.tokens[0]).tolist())) > 4, o.tokens  # varied output
  return out


FIT_WIDTH = 16  # each fitted row: its prompt, then the target's first 16 - len(prompt) new tokens


@pytest.fixture(scope="module")
def fitted(target, baselines):
  """MTP, DFlash and Medusa heads fitted (300 Adam steps each) to the target's greedy text for the batch-3
  prompts, the first 7..12 new tokens of each row: their drafts are accepted at every depth, and the
  rest of each row, which they never saw, still brings rejections."""
  tc = target.config
  rows = head_fit.full_rows(*_prompts(3, seed=3), baselines[3].tokens, FIT_WIDTH)
  batch = train_heads.target_features(target, rows, (0, 2))
  mtp = heads.init_head(heads.MTPHead(heads.MTPConfig(vocab_size=V, d_model=tc.d_model, mlp_dim=64)), 1)
  mtp_params, _ = head_fit.fit(mtp.params, train_heads.mtp_loss(mtp.module, target, depth=2), batch,
                               learning_rate=1e-2)
  module = block_drafter.BlockDrafter(block_drafter.BlockDrafterConfig(
      vocab_size=V, d_model=tc.d_model, num_layers=1, num_heads=4, num_kv_heads=2, head_dim=8, mlp_dim=64,
      target_layers=(0, 2), block_size=3))
  dflash = heads.init_head(module, 2)
  anchors = np.tile(np.arange(1, FIT_WIDTH - 3 + 1, dtype=np.int32)[None], (len(rows), 1))  # every block
  dflash_params, _ = head_fit.fit(dflash.params, train_heads.dflash_loss(module, target), dict(batch, anchors=anchors),
                                  learning_rate=1e-2)
  medusa_heads, _ = head_fit.fit(medusa_lib.init_heads(None, 2, tc.d_model),
                                 train_medusa.medusa_kl_loss(medusa_lib.target_lm_head(target), 2),
                                 {"tokens": batch["tokens"], "hidden": batch["hidden"]}, learning_rate=1e-2)
  return {"mtp": specjax.drafters.MTP(mtp.replace(params=mtp_params)),
          "dflash": specjax.drafters.DFlash(dflash.replace(params=dflash_params)),
          "medusa": medusa_lib.Medusa.create(target, medusa_heads, paths=((0,), (1,), (0, 0), (1, 0)))}


def _make(name, target, fitted):
  if name == "ngram":
    return specjax.drafters.NGram(3)
  if name == "draft_model":
    return specjax.drafters.DraftModel(testing.perturbed(target, 0.05, seed=2))
  if name == "specinfer":  # windowed small model too: its own window must exceed the tree's depth
    return specjax.drafters.SpecInfer(testing.perturbed(target, 0.05, seed=2), children=(2, 2))
  return fitted[name]


CASES = [(name, gamma, 3) for name, gamma in (("draft_model", 1), ("draft_model", 2), ("ngram", 2), ("specinfer", 2),
                                              ("mtp", 2), ("dflash", 2), ("medusa", 2))]
CASES += [("draft_model", 2, 1), ("specinfer", 2, 1)]  # batch 1 too (each case is one compile: keep few)


@pytest.mark.parametrize("name,gamma,batch", CASES)
def test_greedy_speculative_equals_autoregressive(target, baselines, fitted, name, gamma, batch):
  prompts, lengths = _prompts(batch, seed=batch)
  out = specjax.speculative_generate(target, _make(name, target, fitted), prompts, lengths, gamma=gamma,
                                     max_new_tokens=MAX_NEW)
  np.testing.assert_array_equal(out.tokens, baselines[batch].tokens)
  np.testing.assert_array_equal(out.lengths, baselines[batch].lengths)
  stats_util.assert_accepts_at_every_depth(out.stats, rejected=batch > 1)  # one row may accept every draft
  if name in ("draft_model", "specinfer"):  # a near copy: drafts are accepted
    assert out.stats["mean_accepted"] > 0.3, out.stats


# ----------------------------------------------------------------------------- (d) refused drafts
def test_gamma_reaching_the_window_is_refused(target):
  prompts, lengths = _prompts(1, seed=0)
  with pytest.raises(ValueError, match=r"gamma=3 .*target's smallest window is 3"):
    specjax.speculative_generate(target, specjax.drafters.NGram(3), prompts, lengths, gamma=3, max_new_tokens=4)
  tree = specjax.drafters.SpecInfer(testing.perturbed(target, 0.05), children=(1, 1, 1))
  with pytest.raises(ValueError, match=r"gamma=3 "):
    specjax.speculative_generate(target, tree, prompts, lengths, gamma=3, max_new_tokens=4)
  # a windowed drafter model under a global target is checked too
  plain = testing.tiny_decoder(V, seed=0, num_layers=1)
  small = testing.tiny_decoder(V, seed=1, num_layers=1, layer_windows=(2,))
  with pytest.raises(ValueError, match=r"gamma=2 .*drafter model's smallest window is 2"):
    specjax.speculative_generate(plain, specjax.drafters.DraftModel(small), prompts, lengths, gamma=2,
                                 max_new_tokens=4)
