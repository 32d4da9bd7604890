"""The compiled loops update their caches in place, and the minimal reference loop agrees with them.

Speed itself is a benchmark (``python -m specjax.bench profile``); what a test can pin down is structure: no
op in the optimized HLO of a loop makes a new whole-cache buffer by copying or transposing one
(before the fix, every layer transposed and copied the stacked cache twice per step at batch > 1).
"""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import specjax
from specjax import decode, profiling, testing
from specjax.models import kv_cache

B, P, N, GAMMA = 4, 6, 8, 3
# The HLO checks (and the minimal loop, a benchmark's baseline) look at the programs as they ship, fully
# optimised: they are marked xla_optimized. The rest compare values, and the module's weights are
# made by eager ops: those compile at the suite's default level (fast, and shared with other modules).


@pytest.fixture(scope="module")
def target():
  return testing.tiny_decoder(vocab_size=64, num_layers=2, num_kv_heads=2)


def _prompts(vocab):
  rng = np.random.default_rng(1)
  return rng.integers(1, vocab, (B, P)).astype(np.int32), np.array([P, P - 2, P, P - 1], np.int32)


def _cache_shape(target, max_len):
  cfg = target.config
  return (cfg.num_layers, B, cfg.num_kv_heads, max_len, cfg.head_dim)


@pytest.mark.xla_optimized
def test_autoregressive_loop_has_no_full_cache_copy(target):
  prompts, lengths = _prompts(target.vocab_size)
  max_len = P + N + 1
  hlo = decode._generate.lower(target, jnp.asarray(prompts), jnp.asarray(lengths), jax.random.PRNGKey(0),
                               max_new_tokens=N, sampling=specjax.Sampling(), eos_id=None, pad_id=0,
                               max_len=max_len).compile().as_text()
  shape = _cache_shape(target, max_len)
  assert "f32[" + ",".join(map(str, shape)) + "]" in hlo  # the pattern looks at the right buffer
  assert profiling.full_cache_copies(hlo, shape) == []


@pytest.mark.xla_optimized
@pytest.mark.parametrize("tree", [None, "tree"])
def test_speculative_loop_has_no_full_cache_copy(target, tree):
  prompts, lengths = _prompts(target.vocab_size)
  drafter = specjax.drafters.DraftModel(testing.perturbed(target, 0.3))
  if tree:
    drafter = specjax.drafters.SpecInfer(testing.perturbed(target, 0.3), children=(2, 1, 1))
  max_len = P + N + 8
  hlo = decode._speculative.lower(target, drafter, jnp.asarray(prompts), jnp.asarray(lengths), jax.random.PRNGKey(0),
                                  gamma=GAMMA, max_new_tokens=N, sampling=specjax.Sampling(), eos_id=None, pad_id=0,
                                  max_len=max_len, lenience=1.0).compile().as_text()
  assert profiling.full_cache_copies(hlo, _cache_shape(target, max_len)) == []


@pytest.mark.xla_optimized
@pytest.mark.parametrize("kind", ["ngram", "draft_model", "recycling"])
def test_adaptive_width_switch_has_no_full_cache_copy(target, kind):
  """The adaptive loop's verify-width switch (lax.switch): its branches only read the target cache
  and return the new keys/values (kv_cache.PendingKV), written once after the switch. (Branches
  that wrote the cache themselves cost one copy of the keys and one of the values per round.) A
  draft model (its cache the target's shape here) feeds idle rounds' tokens the same way."""
  prompts, lengths = _prompts(target.vocab_size)
  max_len = P + N + 8
  drafter = specjax.drafters.NGram(2) if kind == "ngram" else specjax.drafters.DraftModel(testing.perturbed(target, 0.3))
  gamma = GAMMA
  if kind == "recycling":  # a static tree's node budget switch (0, 2, 4, 8 nodes): the tree's path compacted
    drafter = specjax.drafters.Recycling.create(target.vocab_size)  # in the pending buffers, not the cache
    gamma = drafter.tree.max_depth
  hlo = decode._speculative.lower(target, drafter, jnp.asarray(prompts), jnp.asarray(lengths),
                                  jax.random.PRNGKey(0), gamma=gamma, max_new_tokens=N, sampling=specjax.Sampling(),
                                  eos_id=None, pad_id=0, max_len=max_len, lenience=1.0,
                                  adaptive=specjax.Adaptive()).compile().as_text()
  assert "conditional(" in hlo  # the switch is there
  assert profiling.full_cache_copies(hlo, _cache_shape(target, max_len)) == []


# jitted: an eager forward dispatches hundreds of small ops (the model is a pytree, its module static)
_start = jax.jit(specjax.models.api.start, static_argnums=3)
_forward = jax.jit(specjax.models.api.forward)


@pytest.mark.parametrize("window", [0, 3])
def test_pending_forward_equals_a_writing_forward(window):
  """A forward over a PendingKV (reads the cache, keeps the new keys/values aside) gives the logits
  of a plain cached forward, and write_pending leaves the cache the plain forward leaves; with a
  sliding window too."""
  model = testing.tiny_decoder(vocab_size=64, num_layers=2, num_kv_heads=2,
                               layer_windows=(window, 0) if window else ())
  prompts, lengths = _prompts(model.vocab_size)
  cache, _, _ = _start(model, jnp.asarray(prompts), jnp.asarray(lengths), P + 8)
  new_BxT = jnp.asarray(np.random.default_rng(2).integers(1, 64, (B, 4)), jnp.int32)
  logits, hidden, written = _forward(model, new_BxT, cache)
  pending = kv_cache.PendingKV.start(cache, 4)
  logits_p, hidden_p, pending = _forward(model, new_BxT, pending)
  np.testing.assert_allclose(np.asarray(logits_p), np.asarray(logits), rtol=1e-5, atol=1e-5)
  np.testing.assert_allclose(np.asarray(hidden_p), np.asarray(hidden), rtol=1e-5, atol=1e-5)
  after = kv_cache.write_pending(cache, pending.k_new_LxBxTxAxD, pending.v_new_LxBxTxAxD)
  np.testing.assert_allclose(np.asarray(after.k_LxBxAxSxD), np.asarray(written.k_LxBxAxSxD), rtol=1e-5, atol=1e-5)
  np.testing.assert_allclose(np.asarray(after.v_LxBxAxSxD), np.asarray(written.v_LxBxAxSxD), rtol=1e-5, atol=1e-5)


@pytest.mark.xla_optimized
def test_copy_detector_sees_the_old_per_row_vmap_write(target):
  """The power check: the vmapped dynamic_update_slice the loop used to do is flagged."""
  def old_write(buf, new, start_B):
    one = lambda b, n, s: jax.lax.dynamic_update_slice(b, n[None], (0, s, 0, 0))
    return jax.vmap(one, in_axes=(1, 0, 0), out_axes=1)(buf, new, start_B)
  shape = (2, B, 16, 2, 8)
  body = lambda i, buf: old_write(buf, jnp.ones((B, 1, 2, 8)) * i, jnp.arange(B) + i % 4)
  hlo = jax.jit(lambda buf: jax.lax.fori_loop(0, 3, body, buf)).lower(jnp.zeros(shape)).compile().as_text()
  assert profiling.full_cache_copies(hlo, shape)


def test_write_layer_drops_slots_past_the_end():
  buf = jnp.zeros((1, 2, 1, 4, 1))  # [L, B, K, S, D]
  out = kv_cache.write_layer(buf, 0, jnp.ones((2, 3, 1, 1)), jnp.array([0, 2]))
  np.testing.assert_array_equal(np.asarray(out)[0, :, 0, :, 0], [[1, 1, 1, 0], [0, 0, 1, 1]])


@pytest.mark.xla_optimized
def test_minimal_loop_matches_generate(target):
  prompts = np.random.default_rng(2).integers(1, target.vocab_size, (2, P)).astype(np.int32)
  max_len = P + N + 1
  ref = profiling.minimal_greedy_loop(target, 2, P, N, max_len)(target.params, prompts)
  out = specjax.generate(target, prompts, np.full((2,), P, np.int32), max_new_tokens=N, max_len=max_len)
  np.testing.assert_array_equal(np.asarray(ref), out.tokens)


def test_minimal_loop_refuses_other_families():
  with pytest.raises(ValueError, match="plain Llama-style"):
    profiling.minimal_greedy_loop(testing.tiny_decoder(qk_norm=True), 1, 4, 4, 9)
