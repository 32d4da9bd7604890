"""Medusa: heads trained on a frozen tiny target (self-distillation), tree verification, greedy equality."""
import numpy as np
import pytest

import specjax
from specjax import testing
from specjax import tree as tree_lib
from specjax.drafters import medusa as medusa_lib
from specjax.train import loop
from specjax.train import heads as train_heads
from specjax.train import medusa as medusa_train

import stats_util
from stats_util import prompts as _prompts

V = 64
MAX_NEW = 20

NUM_HEADS, PROMPT_LEN = 3, 8
SPARSE = ((0,), (1,), (2,), (3,), (0, 0), (0, 1), (1, 0), (0, 0, 0), (0, 1, 0), (1, 0, 0))


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
  target = testing.tiny_decoder(V, seed=0)
  prompts = np.random.RandomState(0).randint(2, V, size=(48, PROMPT_LEN))
  tokens = train_heads.generated_text(target, prompts, 24, batch=48)
  hidden = medusa_train.hidden_states(target, tokens, batch_size=48)
  lm_head = medusa_lib.target_lm_head(target)
  before = medusa_train.head_accuracy(medusa_lib.init_heads(None, NUM_HEADS, 32), lm_head, hidden[:40],
                                      tokens[:40], PROMPT_LEN)
  cfg = loop.TrainConfig(steps=300, learning_rate=1e-2, warmup_steps=10, weight_decay=0.0,
                         checkpoint_every=1000, log_every=100)
  heads = medusa_train.train_heads(target, tokens[:40], hidden[:40], num_heads=NUM_HEADS, label_from=PROMPT_LEN,
                                   cfg=cfg, workdir=tmp_path_factory.mktemp("medusa"), batch_size=16)
  after = medusa_train.head_accuracy(heads, lm_head, hidden[:40], tokens[:40], PROMPT_LEN)
  return target, heads, before, after


def test_training_raises_every_heads_accuracy(trained):
  """A random tiny target's text is nearly chaotic, so the bar is low: every head learns something."""
  _, _, before, after = trained
  assert len(after) == NUM_HEADS
  assert all(a > b + 0.05 for b, a in zip(before, after)), (before, after)


@pytest.fixture(scope="module")
def baselines(trained):
  target = trained[0]
  return {b: specjax.generate(target, *_prompts(b, seed=b), max_new_tokens=MAX_NEW) for b in (1, 3, 8)}


@pytest.mark.parametrize("paths,batch", [(None, 1), (None, 3), (None, 8), (SPARSE, 3)])
def test_medusa_greedy_equality(trained, baselines, paths, batch):
  target, heads = trained[:2]
  drafter = medusa_lib.Medusa.create(target, heads, paths=paths)
  out = specjax.speculative_generate(target, drafter, *_prompts(batch, seed=batch), gamma=drafter.tree.max_depth,
                                     max_new_tokens=MAX_NEW)
  np.testing.assert_array_equal(out.tokens, baselines[batch].tokens)
  np.testing.assert_array_equal(out.lengths, baselines[batch].lengths)
  assert out.stats["mean_accepted"] > 0.2
  assert out.stats["target_calls"] < baselines[batch].stats["target_calls"]
  if batch > 1:  # one row's 20 tokens rarely reach the deepest node; the batched cases must
    stats_util.assert_accepts_at_every_depth(out.stats)


def test_typical_acceptance_is_refused_unless_asked_then_marked_lossy(trained):
  target, heads = trained[:2]
  t1 = specjax.Sampling(temperature=1.0)
  typical = medusa_lib.Medusa.create(target, heads, acceptance="typical")
  with pytest.raises(ValueError, match="typical acceptance"):
    specjax.speculative_generate(target, typical, *_prompts(3, seed=3), gamma=3, max_new_tokens=8, sampling=t1)
  out = specjax.speculative_generate(target, typical, *_prompts(3, seed=3), gamma=3, max_new_tokens=8, sampling=t1,
                                     allow_lossy=True)
  assert out.stats["lossy"] is True and "typical" in out.stats["lossy_reason"] and out.lengths.min() == 8
  greedy = specjax.speculative_generate(target, typical, *_prompts(3, seed=3), gamma=3, max_new_tokens=8)
  assert greedy.stats["lossy"] is False  # at temperature 0 typical acceptance is exact match


def test_bad_trees_and_heads_are_rejected(trained, tmp_path):
  target, heads = trained[:2]
  with pytest.raises(ValueError, match="0..k-1"):
    medusa_lib.Medusa.create(target, heads, paths=[(0,), (1,), (1, 1)])  # (1, 0) missing: not a Gumbel prefix
  medusa_lib.Medusa.create(target, heads, paths=[(0,), (1,), (1, 1)], acceptance="typical")  # fine when deterministic
  deep = medusa_lib.Medusa.create(target, heads, paths=tree_lib.full_paths((1, 1, 1, 1)))
  with pytest.raises(ValueError, match="only 3 heads"):
    specjax.speculative_generate(target, deep, *_prompts(1), gamma=4, max_new_tokens=4)
  medusa_lib.save_heads(heads, tmp_path, target="tiny")
  loaded = medusa_lib.load_heads(tmp_path)
  np.testing.assert_array_equal(loaded["w_KxExE"], heads["w_KxExE"])


def test_config_trees(trained, tmp_path):
  """The medusa kind's tree: a chain with branches (sparse, cheap to verify), mc_sim_7b_63, or an error naming it."""
  target, heads = trained[:2]
  medusa_lib.save_heads(heads, tmp_path, target="tiny")
  cfg = dict(checkpoint=str(tmp_path), tree="chain3+1x2", gamma=3)
  drafter = specjax.drafters.build("medusa", cfg, target)
  assert drafter.tree.num_nodes == 1 + 3 + 2 and drafter.num_params == heads["w_KxExE"].size + heads["b_KxE"].size
  out = specjax.speculative_generate(target, drafter, *_prompts(3, seed=3), gamma=3, max_new_tokens=MAX_NEW)
  base = specjax.generate(target, *_prompts(3, seed=3), max_new_tokens=MAX_NEW)
  np.testing.assert_array_equal(out.tokens, base.tokens)
  with pytest.raises(ValueError, match="chian3"):
    specjax.drafters.build("medusa", dict(cfg, tree="chian3"), target)


def test_truncated_heads_load_with_their_subset(trained, tmp_path):
  """float16 heads + vocab_subset.npy (the layout of python -m specjax.train medusa --data=real): the medusa kind truncates, exactly."""
  target, heads = trained[:2]
  subset = np.sort(np.random.RandomState(0).choice(V, V // 2, replace=False)).astype(np.int32)
  medusa_lib.save_heads(heads, tmp_path, dtype="float16")
  np.save(tmp_path / "vocab_subset.npy", subset)
  drafter = specjax.drafters.build("medusa", dict(checkpoint=str(tmp_path), tree="chain3+1x2", gamma=3), target)
  np.testing.assert_array_equal(drafter.subset_K, subset)
  assert drafter.lm_head_ExV.shape == (32, V // 2) and drafter.heads["w_KxExE"].dtype == np.float32
  out = specjax.speculative_generate(target, drafter, *_prompts(3, seed=3), gamma=3, max_new_tokens=MAX_NEW)
  base = specjax.generate(target, *_prompts(3, seed=3), max_new_tokens=MAX_NEW)
  np.testing.assert_array_equal(out.tokens, base.tokens)
  assert out.stats["mean_accepted"] > 0


def test_kl_loss_matches_its_definition_and_trains(trained, tmp_path):
  """medusa_kl_loss: head k at t vs the target's distribution at t + k + 1, by hand; training lowers it."""
  import jax  # pylint: disable=import-outside-toplevel
  import jax.numpy as jnp  # pylint: disable=import-outside-toplevel
  target = trained[0]
  tokens = train_heads.generated_text(target, np.random.RandomState(1).randint(2, V, size=(16, PROMPT_LEN)), 24)
  pool = train_heads.feature_pool(target, tokens, dtype="float32")
  lm_head = medusa_lib.target_lm_head(target)
  heads = medusa_lib.init_heads(None, NUM_HEADS, 32)
  heads["w_KxExE"] = 0.1 * jax.random.normal(jax.random.PRNGKey(0), heads["w_KxExE"].shape)
  loss_fn = medusa_train.medusa_kl_loss(lm_head, NUM_HEADS, decay=0.5)
  batch = {k: jnp.asarray(v[:4]) for k, v in pool.items()}
  loss, metrics = loss_fn(heads, batch)
  hid = np.asarray(batch["hidden"], np.float64)
  t = hid.shape[1] - NUM_HEADS - 1
  s = np.asarray(medusa_lib.head_logits(heads, lm_head, batch["hidden"][:, :t]), np.float64)  # [B, t, K, V]
  kls = []
  for k in range(NUM_HEADS):
    tl = hid[:, k + 1:k + 1 + t] @ np.asarray(lm_head, np.float64)
    tp = np.exp(tl - tl.max(-1, keepdims=True))
    tp /= tp.sum(-1, keepdims=True)
    sl = s[:, :, k] - s[:, :, k].max(-1, keepdims=True)
    s_logp = sl - np.log(np.exp(sl).sum(-1, keepdims=True))
    kls.append(np.mean(np.sum(tp * (np.log(tp) - s_logp), -1)))
  np.testing.assert_allclose(float(loss), np.dot(0.5 ** np.arange(NUM_HEADS), kls) / (0.5 ** np.arange(NUM_HEADS)).sum(),
                             rtol=1e-4)
  cfg = loop.TrainConfig(steps=40, learning_rate=1e-2, warmup_steps=2, weight_decay=0.0, checkpoint_every=1000,
                         log_every=10)
  trained_heads = loop.train(medusa_lib.init_heads(None, NUM_HEADS, 32), loss_fn,
                             lambda step: train_heads.pool_batch(pool, step, 8, 0), cfg, tmp_path)
  after, m_after = loss_fn(trained_heads, batch)
  zero_loss, m_zero = loss_fn(medusa_lib.init_heads(None, NUM_HEADS, 32), batch)
  assert float(after) < 0.8 * float(zero_loss), (float(after), float(zero_loss))
  assert float(m_after["head0_top1"]) > float(m_zero["head0_top1"])
  assert np.isfinite(float(metrics["accept_len"]))
