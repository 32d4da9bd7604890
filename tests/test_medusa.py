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

from test_greedy_equality import MAX_NEW, V, _prompts

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


def test_typical_acceptance_is_marked_lossy(trained):
  target, heads = trained[:2]
  t1 = specjax.Sampling(temperature=1.0)
  typical = medusa_lib.Medusa.create(target, heads, acceptance="typical")
  out = specjax.speculative_generate(target, typical, *_prompts(3, seed=3), gamma=3, max_new_tokens=8, sampling=t1)
  assert out.stats["lossy"] is True and out.lengths.min() == 8
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
  """medusa_tree: a chain with branches (sparse, cheap to verify), mc_sim_7b_63, or an error naming it."""
  import ml_collections  # pylint: disable=import-outside-toplevel
  target, heads = trained[:2]
  medusa_lib.save_heads(heads, tmp_path, target="tiny")
  cfg = ml_collections.ConfigDict(dict(medusa_heads=str(tmp_path), medusa_tree="chain3+1x2", gamma=3, seed=0))
  drafter = medusa_lib.from_config(cfg, target)
  assert drafter.tree.num_nodes == 1 + 3 + 2 and drafter.num_params == heads["w_KxExE"].size + heads["b_KxE"].size
  out = specjax.speculative_generate(target, drafter, *_prompts(3, seed=3), gamma=3, max_new_tokens=MAX_NEW)
  base = specjax.generate(target, *_prompts(3, seed=3), max_new_tokens=MAX_NEW)
  np.testing.assert_array_equal(out.tokens, base.tokens)
  cfg.medusa_tree = "chian3"
  with pytest.raises(ValueError, match="chian3"):
    medusa_lib.from_config(cfg, target)
