"""Cached forward == full forward (decoder-only; T5 is covered in test_t5.py), including rollback."""
import jax
import jax.numpy as jnp
import numpy as np

import specjax
from specjax.models import api, kv_cache
from specjax import testing


# float32: a cached pass over T tokens and a full pass over all of them reduce in different orders
# (matmul blocking depends on T), ~1e-5 on logits of |6| here; a cache or rollback bug moves them O(1)
ATOL = 1e-4


def test_cached_equals_full_with_ragged_rows_and_rollback():
  model = testing.tiny_decoder(64, seed=0, num_kv_heads=2)
  toks = jax.random.randint(jax.random.PRNGKey(1), (2, 12), 0, 64)
  full = specjax.logits(model, toks)
  cfg = model.config
  cache = kv_cache.init_cache(cfg.num_layers, 2, 16, cfg.num_kv_heads, cfg.head_dim)
  logits, _, cache = api.forward(model, toks[:, :5], cache)
  np.testing.assert_allclose(logits, full[:, :5], atol=ATOL)
  # ragged: row 0 commits 5, row 1 commits only 3 (a rollback of two)
  cache = cache.with_length(jnp.array([5, 3]))
  step = jnp.stack([toks[0, 5:9], toks[1, 3:7]])
  logits, _, cache = api.forward(model, step, cache)
  np.testing.assert_allclose(logits[0], full[0, 5:9], atol=ATOL)
  np.testing.assert_allclose(logits[1], full[1, 3:7], atol=ATOL)
  # roll row 0 back over written-but-rejected slots and feed different tokens there
  other = jax.random.randint(jax.random.PRNGKey(2), (1, 3), 0, 64)
  cache = cache.with_length(jnp.array([6, 7]))
  step = jnp.stack([other[0], toks[1, 7:10]])
  logits, _, _ = api.forward(model, step, cache)
  expected0 = specjax.logits(model, jnp.concatenate([toks[:1, :6], other], axis=1))[0, 6:]
  np.testing.assert_allclose(logits[0], expected0, atol=ATOL)
  np.testing.assert_allclose(logits[1], full[1, 7:10], atol=ATOL)


def test_tree_mask_sees_prefix_and_ancestors_only():
  """Two siblings after one committed prefix: each sibling's logits equal a chain's."""
  model = testing.tiny_decoder(64, seed=0)
  prefix = jnp.array([[5, 9, 13]])
  cfg = model.config
  cache = kv_cache.init_cache(cfg.num_layers, 1, 8, cfg.num_kv_heads, cfg.head_dim)
  _, _, cache = api.forward(model, prefix, cache)
  cache = cache.with_length(jnp.array([3]))
  siblings = jnp.array([[20, 30]])
  mask = jnp.eye(2, dtype=bool)  # neither sibling sees the other
  positions = jnp.array([[3, 3]])
  logits, _, _ = api.forward(model, siblings, cache, positions, mask)
  for i, tok in enumerate([20, 30]):
    chain = specjax.logits(model, jnp.concatenate([prefix, jnp.array([[tok]])], axis=1))[0, -1]
    np.testing.assert_allclose(logits[0, i], chain, atol=ATOL)
