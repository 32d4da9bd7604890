"""Draft-vocabulary truncation (specjax.drafters.vocab): lossless and greedy-exact.

A drafter whose output layer covers K < V ids: q is zero outside the subset, those tokens are never
proposed and the residual emits them. Checked by the chi-squared test of test_exactness (3 tokens
at gamma 2, so fully accepted chains and their bonus token are in the joint; with a power check:
two deliberately wrong rules must fail it) and by greedy equality with generate, on the demo target
with its trained heads and draft model cut to the subset, which accept at every draft depth.
"""
import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import head_fit
import stats_util  # tests/ is on sys.path under pytest

import specjax
from specjax import accept, testing
from specjax import tree as tree_lib
from specjax.drafters import vocab
from specjax.models import draft_lm

V = 8
N = 10_000  # rows per run, as test_exactness: both power checks below still fail by a wide margin
T1 = specjax.Sampling(temperature=1.0)


@pytest.fixture(scope="module")
def setup():
  target = testing.tiny_decoder(V, seed=0, weight_scale=1.0)
  # drop the target's 2nd, 3rd and 5th most likely first tokens: real mass outside the subset
  p1 = np.asarray(T1.probs(specjax.logits(target, stats_util.PROMPT)[0, -1]))
  ranked = np.argsort(-p1)
  subset = np.sort(ranked[[0, 3, 5, 6, 7]]).astype(np.int32)
  assert p1[np.setdiff1d(np.arange(V), subset)].sum() > 0.2
  cfg = draft_lm.DraftLMConfig(vocab_size=V, embed_dim=target.config.d_model, out_vocab=len(subset), d_model=32,
                               num_layers=1, num_heads=2, num_kv_heads=2, head_dim=16, mlp_dim=64)
  drafter = specjax.drafters.DraftModel(draft_lm.init(cfg, target, seed=3), jnp.asarray(subset))
  return target, drafter, subset


def counts_and_joint(target, drafter, sampling=T1):
  counts, st = stats_util.sampled_counts(target, drafter, sampling, N, gamma=2)  # 3 tokens
  stats_util.assert_full_paths(st)
  return counts, st, stats_util.exact_joint(target, sampling, tokens=3)


def test_truncated_draft_lm_is_exact(setup):
  target, drafter, subset = setup
  counts, st, joint = counts_and_joint(target, drafter)
  assert 0.05 < st["acceptance_per_position"][0] < 0.95, "both accept and reject paths must be exercised"
  outside = np.setdiff1d(np.arange(V), subset)
  assert counts[outside, :].sum() > 0.1 * N, "tokens outside the subset must still be emitted (by the residual)"
  assert stats_util.chi2_pvalue(counts, joint) > 1e-3


@pytest.mark.slow
def test_truncating_a_full_vocab_drafter_is_exact(setup):
  """A V-wide drafter cut to the subset (its logits' columns) under top-p: same rule."""
  target, _, subset = setup
  sampling = specjax.Sampling(temperature=1.0, top_p=0.9)
  drafter = specjax.drafters.DraftModel(testing.tiny_decoder(V, seed=3, weight_scale=1.0, num_layers=1),
                                        jnp.asarray(subset))
  counts, st, joint = counts_and_joint(target, drafter, sampling)
  assert 0.05 < st["acceptance_per_position"][0] < 0.95
  assert stats_util.chi2_pvalue(counts, joint) > 1e-3


@pytest.mark.slow
def test_truncated_medusa_tree_is_exact(setup):
  """Medusa heads over the subset's LM-head columns, a 2-wide tree of Gumbel top-k siblings (drawn
  without replacement over K; q scattered to the full vocabulary for recursive rejection sampling)."""
  from specjax.drafters import medusa  # pylint: disable=import-outside-toplevel
  target, _, subset = setup
  drafter = medusa.Medusa.create(target, medusa.init_heads(None, 2, target.config.d_model),
                                 paths=tree_lib.full_paths((2, 1)), subset_K=subset)
  counts, st, joint = counts_and_joint(target, drafter)
  assert 0.05 < st["acceptance_per_position"][0] < 0.95
  assert stats_util.chi2_pvalue(counts, joint) > 1e-3


def test_truncated_specinfer_tree_is_exact(setup):
  """SpecInfer over a K-wide small model: a 2-wide first level of Gumbel top-k siblings drawn over K,
  mapped through the subset; q scattered to V for recursive rejection sampling."""
  target, drafter, subset = setup
  tree = specjax.drafters.SpecInfer(drafter.model, children=(2, 1), siblings="without_replacement",
                                    subset_K=drafter.subset_K)
  counts, st, joint = counts_and_joint(target, tree)
  assert 0.05 < st["acceptance_per_position"][0] < 0.95
  outside = np.setdiff1d(np.arange(V), subset)
  assert counts[outside, :].sum() > 0.1 * N
  assert stats_util.chi2_pvalue(counts, joint) > 1e-3


@pytest.mark.slow
def test_truncated_bigram_table_is_exact(setup):
  """A [K + 1, K] bigram table (row K: a previous token outside the subset) at T = 1."""
  target, _, subset = setup
  corpus = np.asarray(jax.random.randint(jax.random.PRNGKey(4), (400,), 0, V))
  table = specjax.drafters.TableDrafter.from_corpus(corpus, V, order=2, subset_K=subset)
  assert table.log_probs.shape == (len(subset) + 1, len(subset)) and table.vocab_size == V
  counts, st, joint = counts_and_joint(target, table)
  assert 0.05 < st["acceptance_per_position"][0] < 0.95
  assert stats_util.chi2_pvalue(counts, joint) > 1e-3


def _with_patch(monkeypatch, obj, name, fn, run):
  monkeypatch.setattr(obj, name, fn)
  jax.clear_caches()  # the loop was traced with the real rule
  try:
    return run()
  finally:
    monkeypatch.undo()
    jax.clear_caches()


def test_check_rejects_renormalising_p_over_the_subset(setup, monkeypatch):
  """Wrong rule: the residual renormalised over the subset (tokens outside it are never emitted)."""
  target, drafter, subset = setup
  inside = jnp.zeros((V,), bool).at[subset].set(True)
  real = accept.residual
  wrong = lambda r_BxV, q_BxV: real(jnp.where(inside, r_BxV, 0.0) / jnp.where(inside, r_BxV, 0.0).sum(-1, keepdims=True),
                                    q_BxV)
  counts, _, joint = _with_patch(monkeypatch, accept, "residual", wrong, lambda: counts_and_joint(target, drafter))
  pvalue = stats_util.chi2_pvalue(counts, joint)
  print("wrong-rule p-value", pvalue)
  assert pvalue < 1e-6


def test_check_rejects_a_missing_d2t_map(setup, monkeypatch):
  """Wrong rule: q's K entries put at ids 0..K-1 instead of the subset's ids (EAGLE-3's d2t forgotten)."""
  target, drafter, subset = setup
  assert not np.array_equal(subset, np.arange(len(subset)))
  wrong = lambda q_xK, subset_K, v: jnp.pad(q_xK, [(0, 0)] * (q_xK.ndim - 1) + [(0, v - q_xK.shape[-1])])
  counts, _, joint = _with_patch(monkeypatch, vocab, "scatter_probs", wrong, lambda: counts_and_joint(target, drafter))
  pvalue = stats_util.chi2_pvalue(counts, joint)
  print("wrong-rule p-value", pvalue)
  assert pvalue < 1e-6


DEMO_K, DEMO_NEW = 64, 32


def _fitted_draft_lm(target, subset, rows_BxT):
  """A K-wide draft_lm (FR-Spec: frozen target embedding in, the target's LM-head columns of the subset
  out) fitted by cross-entropy to ``rows_BxT`` (the target's own greedy text; tokens outside the subset
  carry no label): a small drafter that accepts."""
  import optax  # pylint: disable=import-outside-toplevel
  cfg = draft_lm.DraftLMConfig(vocab_size=target.vocab_size, embed_dim=target.config.d_model, out_vocab=len(subset),
                               d_model=64, num_layers=1, num_heads=2, num_kv_heads=2, head_dim=32, mlp_dim=128,
                               frozen_head=True)
  model = draft_lm.init(cfg, target, seed=5, subset_K=subset)
  inverse = np.full((target.vocab_size,), -1, np.int32)
  inverse[subset] = np.arange(len(subset))

  def loss_fn(params, tokens):
    logits = model.module.apply({"params": params}, tokens[:, :-1])[0]
    labels = jnp.asarray(inverse)[tokens[:, 1:]]
    weight = (labels >= 0).astype(jnp.float32)
    nll = optax.softmax_cross_entropy_with_integer_labels(logits, jnp.maximum(labels, 0))
    return jnp.sum(nll * weight) / jnp.sum(weight), {}

  params, losses = head_fit.fit(model.params, loss_fn, jnp.asarray(rows_BxT), steps=300, learning_rate=3e-3)
  assert losses[-1] < 0.3 * losses[0], losses[[0, -1]]
  return model.replace(params=params)


@pytest.fixture(scope="module")
def demo_setup():
  """The demo target, its DEMO_K most frequent held-out code tokens as the subset, 3 ragged prompts and
  the reference greedy text."""
  target = stats_util.demo_target()
  prompts, lengths = stats_util.demo_prompts(3, seed=4)
  ref = specjax.generate(target, prompts, lengths, max_new_tokens=DEMO_NEW)
  # the most frequent tokens of held-out code, less the two letters the target emits most here: the
  # drafters can never propose those, the residual must emit them
  emitted = np.argsort(-np.bincount(ref.tokens.ravel(), minlength=target.vocab_size))
  letters = [t for t in emitted if t < 128 and chr(t).isalpha()]
  counts = np.bincount(stats_util.held_out_code(), minlength=target.vocab_size)
  subset = np.setdiff1d(vocab.top_k_subset(counts, DEMO_K + 2), letters[:2])[:DEMO_K].astype(np.int32)
  assert len(subset) == DEMO_K and np.isin(ref.tokens, letters[:2]).sum() >= 2
  rows = head_fit.full_rows(prompts, lengths, ref.tokens, prompts.shape[1] + 12)  # the first 7..19 new tokens
  return target, jnp.asarray(subset), prompts, lengths, ref, _fitted_draft_lm(target, subset, rows)


def _truncated_drafter(name, target, subset, small):
  if name == "draft_lm":  # a K-wide head
    return specjax.drafters.DraftModel(small, subset)
  if name == "cut_model":  # a V-wide model cut to K: the demo's small draft model, far cheaper than the target
    return specjax.drafters.DraftModel(stats_util.demo_drafter_model(), subset)
  if name == "mtp":  # the trained demo heads, reading only the subset's LM-head columns
    return stats_util.demo_mtp(subset)
  if name == "dflash":
    return stats_util.demo_dflash(subset)
  if name == "medusa":
    return stats_util.demo_medusa(tree_lib.full_paths((2, 1, 1)), subset)
  if name == "specinfer":  # the K-wide head expanding a tree
    return specjax.drafters.SpecInfer(small, children=(2, 1, 1), subset_K=subset)
  if name == "bigram":
    return specjax.drafters.TableDrafter.from_corpus(stats_util.held_out_code()[:200_000], target.vocab_size,
                                                     subset_K=np.asarray(subset))
  raise KeyError(name)


@pytest.mark.parametrize("name", ["draft_lm", "cut_model", "mtp", "dflash", "medusa", "specinfer", "bigram"])
def test_greedy_equals_autoregressive(demo_setup, name):
  """Ragged batch of 3 (held-out Python, one full-width row) on the demo target, gamma 3: a K-wide head
  (draft_lm, also expanding a SpecInfer tree), a V-wide model cut to K, the trained MTP / DFlash /
  Medusa heads reading only the subset's LM-head columns, a bigram table; each accepts at every depth."""
  target, subset, prompts, lengths, ref, small = demo_setup
  out = specjax.speculative_generate(target, _truncated_drafter(name, target, subset, small), prompts, lengths,
                                     gamma=3, max_new_tokens=DEMO_NEW)
  np.testing.assert_array_equal(out.tokens, ref.tokens)
  stats_util.assert_accepts_at_every_depth(out.stats)


def test_subset_helpers_and_errors(tmp_path):
  counts = np.array([5, 0, 9, 9, 1, 7])
  np.testing.assert_array_equal(vocab.top_k_subset(counts, 3), [2, 3, 5])
  np.testing.assert_array_equal(vocab.top_k_subset(counts, 4), [0, 2, 3, 5])
  assert vocab.coverage(counts, [2, 3]) == pytest.approx(18 / 31)
  with pytest.raises(ValueError, match="k=7"):
    vocab.top_k_subset(counts, 7)
  with pytest.raises(ValueError, match=r"out of range \[0, vocab_size=6\): \[6\]"):
    vocab.check_subset(np.array([0, 6]), 6)
  with pytest.raises(ValueError, match="K=7"):
    vocab.check_subset(np.arange(7), 6)
  with pytest.raises(ValueError, match="repeated"):
    vocab.check_subset(np.array([1, 1]), 6)
  logits = jnp.array([[1.0, 2.0]])
  full = vocab.expand_logits(logits, jnp.array([4, 1]), 6)
  q = vocab.scatter_probs(specjax.Sampling(1.0).probs(logits), jnp.array([4, 1]), 6)
  np.testing.assert_allclose(q, specjax.Sampling(1.0).probs(full), rtol=1e-6)
  target = testing.tiny_decoder(16, seed=0)
  with pytest.raises(ValueError, match="vocab_size=16"):  # a subset id past the target's vocabulary
    specjax.speculative_generate(target, specjax.drafters.DraftModel(target, jnp.array([3, 16])), np.ones((1, 3)),
                                 np.array([3]), gamma=2, max_new_tokens=4)
  cfg = draft_lm.DraftLMConfig(vocab_size=16, embed_dim=32, out_vocab=4, d_model=16, num_layers=1, num_heads=1,
                               num_kv_heads=1, head_dim=16, mlp_dim=32)
  small = draft_lm.init(cfg, target)
  with pytest.raises(ValueError, match="needs its subset_K"):  # K-wide head without its map
    specjax.speculative_generate(target, specjax.drafters.DraftModel(small), np.ones((1, 3)), np.array([3]),
                                 gamma=2, max_new_tokens=4)
  with pytest.raises(ValueError, match="K=3"):
    specjax.speculative_generate(target, specjax.drafters.DraftModel(small, jnp.array([0, 1, 2])), np.ones((1, 3)),
                                 np.array([3]), gamma=2, max_new_tokens=4)
  # a bundle round trip keeps the subset and takes the frozen embedding from the target
  draft_lm.save(small, np.array([1, 5, 7, 9]), tmp_path / "d")
  assert draft_lm.resolve(tmp_path / "d") == tmp_path / "d"
  loaded = specjax.drafters.build("draft_model", {"checkpoint": str(tmp_path / "d")}, target)
  np.testing.assert_array_equal(loaded.subset_K, [1, 5, 7, 9])
  assert loaded.num_params == small.num_params - 16 * 32  # the target's embedding is not the drafter's
  from specjax import experiment  # pylint: disable=import-outside-toplevel
  import ml_collections  # pylint: disable=import-outside-toplevel
  config = experiment.normalize(ml_collections.ConfigDict({"target": {}, "drafter": {"kind": "draft_model",
                                                                                     "checkpoint": str(tmp_path / "d")}}))
  from_run = experiment.make_drafter(config, target)  # what `python -m specjax.run` builds for the bundle
  np.testing.assert_array_equal(from_run.subset_K, [1, 5, 7, 9])
  with pytest.raises(specjax.checkpoint.CheckpointError, match="vocab_size=16 differs"):
    draft_lm.load(tmp_path / "d", testing.tiny_decoder(32, seed=0))
  with pytest.raises(ValueError, match="out_vocab=17"):
    draft_lm.DraftLMConfig(vocab_size=16, out_vocab=17)


def test_generated_shards_and_counts(tmp_path):
  """The data folder python -m specjax.train data writes: shards read back, counts only inside each row's length."""
  from specjax.data import generated  # pylint: disable=import-outside-toplevel
  (tmp_path / "shards").mkdir()
  np.savez(tmp_path / "shards" / "00000.npz", prompts=np.array([[5, 6, 0], [7, 0, 0]], np.int32),
           prompt_lengths=np.array([2, 1], np.int32), tokens=np.array([[1, 2, 9], [3, 9, 9]], np.int32),
           lengths=np.array([2, 1], np.int32), kinds=np.array(["code", "ende"]), sources=np.array(["a", "b"]),
           seconds=np.float64(1.0))
  d = generated.load_shards(tmp_path)
  assert d["tokens"].shape == (2, 3) and list(d["kinds"]) == ["code", "ende"]
  np.testing.assert_array_equal(generated.token_counts(tmp_path, 10), [0, 1, 1, 1, 0, 0, 0, 0, 0, 0])
  with pytest.raises(FileNotFoundError, match="held_out"):
    generated.load_shards(tmp_path, "held_out")
  rows, _ = generated.crops(tmp_path, "shards", crop=4)  # the last crop // 4 prompt tokens, then the continuation
  np.testing.assert_array_equal(rows, [[6, 1, 2, 0], [7, 3, 0, 0]])
  with pytest.raises(ValueError, match="crop=9"):
    generated.crops(tmp_path, "shards", crop=9)
  np.testing.assert_array_equal(generated.eval_prompts(d, n=2, length=1), [[5], [7]])
  np.savez(tmp_path / "shards" / "00001.npz", prompts=np.array([[4, 4, 4, 4, 4]], np.int32),  # a wider shard
           prompt_lengths=np.array([5], np.int32), tokens=np.array([[8, 9, 9]], np.int32),
           lengths=np.array([1], np.int32), kinds=np.array(["chat"]), sources=np.array(["c"]), seconds=np.float64(1.0))
  assert generated.load_shards(tmp_path)["prompts"].shape == (3, 5)
  docs = generated.corpus_docs(tmp_path)[:2]  # a suffix pool's documents: prompt, then continuation
  assert [d.tolist() for d in docs] == [[5, 6, 1, 2], [7, 3]]
  assert [p.tolist() for p in generated.corpus_prompts(tmp_path)] == [[5, 6], [7], [4, 4, 4, 4, 4]]


def test_data_from_questions_keeps_whole_chat_prompts(tmp_path):
  """``train data --questions``: every first turn chat-templated as specbench encodes it, none cut."""
  from specjax import prompts as prompts_lib  # pylint: disable=import-outside-toplevel
  from specjax.train.commands import data  # pylint: disable=import-outside-toplevel

  class ChatBytes:  # a byte tokenizer with a chat template
    chat_template = "<u>{content}</u>"

    def apply_chat_template(self, messages):
      return "".join(f"<u>{m['content']}</u>" for m in messages)

    def encode(self, text, add_special_tokens=True):
      return list(text.encode())

  tok = ChatBytes()
  lines = [{"question_id": i, "category": "qa", "turns": ["x" * n]} for i, n in enumerate((90, 3, 20))]
  path = tmp_path / "q.jsonl"
  path.write_text("".join(json.dumps(r) + "\n" for r in lines))
  prompts = data.question_prompts(tok, path)
  assert prompts["held_out"] == [] and [r["source"] for r in prompts["train"]] == ["qa/1", "qa/2", "qa/0"]
  assert prompts["train"][2]["ids"] == prompts_lib.encode(tok, "x" * 90, True)
  assert data.batch_width(prompts["train"], 96, whole=True) == 128 >= len(prompts["train"][2]["ids"])
  assert data.batch_width(prompts["train"], 96, whole=False) == 96
