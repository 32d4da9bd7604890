"""DFlash (block drafter, target features as extra KV): greedy equality, exact sampling, context-cache
bookkeeping, training (loss falls, orbax resume is exact), block-size mismatch, clear errors.

Greedy equality runs the demo target with its trained block drafter (specjax/assets/demo/dflash, block
size 8) on held-out Python: its drafts are accepted at every depth (asserted), so the accept and
commit steps run. gamma 1 and 4 decode it at block sizes it was not trained for (still exact, fewer
accepted); gamma 7 at its own.
"""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import specjax
from specjax import testing
from specjax.models import block_drafter, heads
from specjax.train import heads as train_heads
from specjax.train import loop
import stats_util

V = 64
MAX_NEW = 20
DEMO_NEW = 32  # new tokens per greedy run on the demo target: several rounds even at gamma 7


def make_dflash(target, seed=2, block_size=5, **overrides):
  tc = target.config
  cfg = dict(vocab_size=tc.vocab_size, d_model=tc.d_model, num_layers=1, num_heads=4, num_kv_heads=2, head_dim=8,
             mlp_dim=64, target_layers=block_drafter.spaced_layers(tc.num_layers, 2), block_size=block_size)
  cfg.update(overrides)
  module = block_drafter.BlockDrafter(block_drafter.BlockDrafterConfig(**cfg))
  return specjax.drafters.DFlash(heads.init_head(module, seed))


@pytest.fixture(scope="module")
def target():
  return testing.tiny_decoder(V, seed=0)


@pytest.fixture(scope="module")
def demo():
  return stats_util.demo_target(), stats_util.demo_dflash()


@pytest.mark.parametrize("batch,gamma", [(1, 1), (3, 4), (8, 7)])
def test_greedy_equality(demo, batch, gamma):
  """(1, 1) and (3, 4) are also the block-size mismatch: trained at 8, decoding blocks of 2 and 5."""
  target, drafter = demo
  assert drafter.block_size == 8
  prompts, lengths = stats_util.demo_prompts(batch, seed=batch * 10 + gamma)
  base = specjax.generate(target, prompts, lengths, max_new_tokens=DEMO_NEW)
  out = specjax.speculative_generate(target, drafter, prompts, lengths, gamma=gamma, max_new_tokens=DEMO_NEW)
  np.testing.assert_array_equal(out.tokens, base.tokens)
  np.testing.assert_array_equal(out.lengths, base.lengths)
  stats_util.assert_accepts_at_every_depth(out.stats)


def test_context_cache_holds_the_features_of_every_committed_position(target):
  """After ragged rounds: ctx_len == seq_len - 1 and the cached extra K/V match a fresh full forward."""
  drafter = make_dflash(target, block_size=4)
  prompts, lengths = stats_util.prompts(4, seed=3)
  rows, state, ns = stats_util.drive_rounds(target, drafter, prompts, lengths, gamma=3,
                                            sampling=specjax.Sampling(1.0), rounds=4, lenience=0.05)
  assert ns.min() < 3 and ns.max() > 0, "rounds should accept different counts"
  np.testing.assert_array_equal(state.ctx_len_B, rows.seq_len_B - 1)
  b, s = rows.tokens_BxS.shape
  batch = train_heads.target_features(target, rows.tokens_BxS, drafter.feature_layers)
  positions = jnp.broadcast_to(jnp.arange(s)[None], (b, s))
  k_want, v_want = drafter._context(batch["feat"], positions)  # pylint: disable=protected-access
  for row in range(b):
    n = int(state.ctx_len_B[row])
    np.testing.assert_allclose(state.ctx_k_LxBxSxAxD[:, row, :n], k_want[:, row, :n], atol=5e-5)
    np.testing.assert_allclose(state.ctx_v_LxBxSxAxD[:, row, :n], v_want[:, row, :n], atol=5e-5)


def test_sampled_output_is_exact():
  target = testing.tiny_decoder(8, seed=0, weight_scale=1.0)
  sampling = specjax.Sampling(temperature=1.0)
  counts, st = stats_util.sampled_counts(target, make_dflash(target, seed=5, block_size=3), sampling)  # 3 tokens
  assert 0.2 < st["acceptance_per_position"][0] < 0.95, "both accept and reject paths must be exercised"
  stats_util.assert_full_paths(st)
  assert stats_util.chi2_pvalue(counts, stats_util.exact_joint(target, sampling)) > 1e-3


def test_training_loss_falls_and_resume_is_exact(target, tmp_path):
  drafter = make_dflash(target, block_size=4)
  head, layers = drafter.head, drafter.feature_layers
  data = np.asarray(specjax.generate(target, *stats_util.prompts(8, seed=5), max_new_tokens=40).tokens)

  def batch_fn(step):
    batch = train_heads.target_features(target, data[(step * 4 + np.arange(4)) % len(data)], layers)
    rng = np.random.default_rng([7, step])  # anchors: a pure function of the step, so resume is exact
    return dict(batch, anchors=train_heads.random_anchors(rng, 4, data.shape[1], 4, n=4))

  loss_fn = train_heads.dflash_loss(head.module, target)
  cfg = loop.TrainConfig(steps=10, learning_rate=1e-2, warmup_steps=1, checkpoint_every=5, log_every=1)
  fresh = lambda: jax.tree_util.tree_map(jnp.copy, head.params)  # the train step donates its input
  straight = loop.train(fresh(), loss_fn, batch_fn, cfg, tmp_path / "straight")
  loop.train(fresh(), loss_fn, batch_fn, cfg, tmp_path / "resumed", stop_after=5)
  resumed = loop.train(fresh(), loss_fn, batch_fn, cfg, tmp_path / "resumed")
  a = [r["loss"] for r in loop.read_metrics(tmp_path / "straight")]
  b = [r["loss"] for r in loop.read_metrics(tmp_path / "resumed")]
  np.testing.assert_array_equal(a, b)
  for x, y in zip(jax.tree_util.tree_leaves(straight), jax.tree_util.tree_leaves(resumed)):
    np.testing.assert_array_equal(x, y)
  assert np.mean(a[-3:]) < 0.7 * a[0], a
  loaded = heads.load_head(heads.save_head(head.replace(params=straight), tmp_path / "dflash"))
  assert loaded.config == head.config and loaded.config.target_layers == layers


def test_errors(target):
  with pytest.raises(ValueError, match="target_layers"):
    make_dflash(target, target_layers=())
  with pytest.raises(ValueError, match="block_size"):
    make_dflash(target, block_size=1)
  p = np.ones((1, 3), np.int32)
  with pytest.raises(ValueError, match="outside the target"):
    specjax.speculative_generate(target, make_dflash(target, target_layers=(0, 5)), p, [3], gamma=2,
                                 max_new_tokens=4)
  drafter = make_dflash(target)
  state = drafter.init(target, jnp.asarray(p), jnp.asarray([3]), 8)
  with pytest.raises(ValueError, match="feature_layers"):  # a loop that ignores feature_layers
    drafter.commit(state, jnp.asarray(p), jnp.asarray([3]), jnp.asarray([0]), jnp.zeros((1, 3, 32)))
