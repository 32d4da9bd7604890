"""MTP (shared-weight head, recursive chain): greedy equality, exact sampling, state bookkeeping,
training (loss falls, orbax resume is exact), head checkpoints, clear errors.

Greedy equality runs the demo target with its trained MTP head (specjax/assets/demo/mtp) on held-out
Python: the head's drafts are accepted at every depth (asserted), so the accept and commit steps
run; an untrained head is rejected at once and equality would say little.
"""
import types

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest

import specjax
from specjax import testing
from specjax.checkpoint import CheckpointError
from specjax.models import heads
from specjax.train import heads as train_heads
from specjax.train import loop
import stats_util

V = 64
MAX_NEW = 20
DEMO_NEW = 32  # new tokens per greedy run on the demo target: several rounds even at gamma 7


def make_mtp(target, seed=1, **overrides):
  cfg = dict(vocab_size=target.vocab_size, d_model=target.config.d_model, mlp_dim=64)
  cfg.update(overrides)
  return specjax.drafters.MTP(heads.init_head(heads.MTPHead(heads.MTPConfig(**cfg)), seed))


@pytest.fixture(scope="module")
def target():
  return testing.tiny_decoder(V, seed=0)


@pytest.fixture(scope="module")
def demo():
  return stats_util.demo_target(), stats_util.demo_mtp()


@pytest.mark.parametrize("batch,gamma", [(1, 1), (3, 4), (8, 7)])
def test_greedy_equality(demo, batch, gamma):
  target, drafter = demo
  prompts, lengths = stats_util.demo_prompts(batch, seed=batch * 10 + gamma)
  base = specjax.generate(target, prompts, lengths, max_new_tokens=DEMO_NEW)
  out = specjax.speculative_generate(target, drafter, prompts, lengths, gamma=gamma, max_new_tokens=DEMO_NEW)
  np.testing.assert_array_equal(out.tokens, base.tokens)
  np.testing.assert_array_equal(out.lengths, base.lengths)
  stats_util.assert_accepts_at_every_depth(out.stats)


def test_commit_keeps_the_hidden_state_of_the_second_to_last_token(target):
  """After ragged rounds each row's state equals a fresh full forward's hidden at seq_len - 2."""
  prompts, lengths = stats_util.prompts(4, seed=3)
  rows, state, ns = stats_util.drive_rounds(target, make_mtp(target), prompts, lengths, gamma=3,
                                            sampling=specjax.Sampling(1.0), rounds=4, lenience=0.05)
  assert ns.min() < 3 and ns.max() > 0, "rounds should accept different counts"
  _, hidden_full, _ = target.module.apply({"params": target.params}, rows.tokens_BxS)
  want = jnp.take_along_axis(hidden_full, (rows.seq_len_B - 2)[:, None, None], 1)[:, 0]
  np.testing.assert_allclose(state.hidden_BxE, want, atol=2e-5)


def test_sampled_output_is_exact():
  target = testing.tiny_decoder(8, seed=0, weight_scale=1.0)
  sampling = specjax.Sampling(temperature=1.0)
  # gamma 2, 3 tokens; 10k rows, as test_exactness (same target, prompt and joint), whose power checks fail at it
  counts, st = stats_util.sampled_counts(target, make_mtp(target, seed=4), sampling, n=10_000)
  assert 0.2 < st["acceptance_per_position"][0] < 0.95, "both accept and reject paths must be exercised"
  stats_util.assert_full_paths(st)
  assert stats_util.chi2_pvalue(counts, stats_util.exact_joint(target, sampling)) > 1e-3


@pytest.fixture
def no_captured_arrays():
  """Any array over 1 KB compiled into a program as a constant fails the test (pyproject.toml turns
  jax's warning into an error): here the target's embedding and LM head, were the training step to
  close over them instead of taking them as arguments (specjax.train.heads.with_frozen)."""
  before = jax.config.jax_captured_constants_warn_bytes
  jax.config.update("jax_captured_constants_warn_bytes", 1024)
  yield
  jax.config.update("jax_captured_constants_warn_bytes", before)


def test_training_loss_falls_and_resume_is_exact(target, tmp_path, no_captured_arrays):
  assert target.params["embed"].nbytes > 1024
  head = make_mtp(target).head
  data = np.asarray(specjax.generate(target, *stats_util.prompts(8, seed=5), max_new_tokens=40).tokens)
  batch_fn = lambda step: train_heads.target_features(target, data[(step * 4 + np.arange(4)) % len(data)])
  loss_fn = train_heads.mtp_loss(head.module, target, depth=3)
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


def test_head_checkpoint_round_trip_and_errors(target, tmp_path):
  head = make_mtp(target).head
  folder = heads.save_head(head, tmp_path / "mtp", dtype="bfloat16")
  loaded = heads.load_head(folder)
  assert loaded.config == head.config
  narrower = False
  for x, y in zip(jax.tree_util.tree_leaves(head.params), jax.tree_util.tree_leaves(loaded.params)):
    rounded = np.asarray(x, np.float32).astype(ml_dtypes.bfloat16).astype(np.float32)  # nearest, ties to even
    np.testing.assert_array_equal(np.asarray(y, np.float32), rounded)  # exactly the bf16 values, no other loss
    narrower |= not np.array_equal(rounded, np.asarray(x, np.float32))
  assert narrower, "bf16 storage should round some weights"
  with pytest.raises(CheckpointError, match="missing"):
    heads.load_head(tmp_path / "nowhere")
  with pytest.raises(CheckpointError, match="shape"):
    heads.load_head(folder, mlp_dim=32)


def test_incompatible_target_is_a_clear_error(target):
  p = np.ones((1, 3), np.int32)
  with pytest.raises(ValueError, match="d_model=16"):
    specjax.speculative_generate(target, make_mtp(target, d_model=16), p, [3], gamma=2, max_new_tokens=4)
  with pytest.raises(ValueError, match="vocab_size=32"):
    specjax.speculative_generate(target, make_mtp(target, vocab_size=32), p, [3], gamma=2, max_new_tokens=4)
  enc_dec = types.SimpleNamespace(is_encoder_decoder=True, config=target.config, vocab_size=V)  # checked first
  with pytest.raises(ValueError, match="decoder-only"):
    specjax.speculative_generate(enc_dec, make_mtp(target), p, [3], gamma=2, max_new_tokens=4)


def test_truncated_head_loads_its_subset_from_config(demo, target, tmp_path):
  """A head folder with vocab_subset.npy (python -m specjax.train mtp --data=real): the mtp kind truncates; greedy stays exact
  and the truncated demo head still accepts at every depth while the target emits tokens outside its
  subset; mtp_loss with the whole vocabulary as its 'subset' equals the untruncated loss."""
  demo_target, demo_head = demo
  counts = np.bincount(stats_util.held_out_code(), minlength=demo_target.vocab_size)
  subset = np.sort(np.argsort(-counts)[:48]).astype(np.int32)  # the 48 most frequent bytes of held-out code
  folder = heads.save_head(demo_head.head, tmp_path / "mtp")
  np.save(folder / "vocab_subset.npy", subset)
  loaded = specjax.drafters.build("mtp", {"checkpoint": str(folder), "gamma": 3}, demo_target)
  np.testing.assert_array_equal(loaded.subset_K, subset)
  prompts = stats_util.demo_prompts(3, seed=2)
  ref = specjax.generate(demo_target, *prompts, max_new_tokens=DEMO_NEW)
  out = specjax.speculative_generate(demo_target, loaded, *prompts, gamma=3, max_new_tokens=DEMO_NEW)
  np.testing.assert_array_equal(out.tokens, ref.tokens)
  stats_util.assert_accepts_at_every_depth(out.stats)
  assert set(np.unique(ref.tokens)) - set(subset), "the target must emit tokens the head cannot propose"
  drafter = make_mtp(target)
  subset = np.arange(0, V, 2, dtype=np.int32)
  data = np.asarray(specjax.generate(target, *stats_util.prompts(4, seed=5), max_new_tokens=20).tokens)
  batch = train_heads.target_features(target, data)
  full = train_heads.mtp_loss(drafter.head.module, target, depth=2)(drafter.head.params, batch)[0]
  everything = train_heads.mtp_loss(drafter.head.module, target, depth=2, subset_K=np.arange(V))(
      drafter.head.params, batch)[0]
  half = train_heads.mtp_loss(drafter.head.module, target, depth=2, subset_K=subset)(drafter.head.params, batch)[0]
  np.testing.assert_allclose(float(everything), float(full), rtol=1e-5)
  assert np.isfinite(float(half)) and abs(float(half) - float(full)) > 1e-4
