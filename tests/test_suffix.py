"""The suffix index against a brute-force numpy reference (matches, frequency ranking, eviction), the
``suffix`` and ``hybrid`` drafters' greedy output against the autoregressive loop, and their memory:
grown by ``remember``, saved with fingerprints, refused for another model."""
import jax.numpy as jnp
import numpy as np
import pytest

import specjax
from specjax import testing
from specjax.drafters import suffix, suffix_index as index


def _rows(rows):
  tokens = np.zeros((len(rows), max(map(len, rows)) + 2), np.int32)
  for i, r in enumerate(rows):
    tokens[i, :len(r)] = r
  return jnp.asarray(tokens), jnp.asarray([len(r) for r in rows], jnp.int32)


def test_pool_ring_matches_the_reference_and_evicts_the_oldest():
  rng = np.random.RandomState(0)
  docs = [rng.randint(0, 9, rng.randint(1, 9)).tolist() for _ in range(12)] + [list(range(30))]  # last: > capacity
  pool = index.Pool.create(23)
  for start in range(0, len(docs), 4):  # several calls, several documents each
    chunk = docs[start:start + 4]
    arr = np.zeros((len(chunk), 30), np.int32)
    for i, d in enumerate(chunk):
      arr[i, :len(d)] = d
    pool = index.add(pool, jnp.asarray(arr), jnp.asarray([len(d) for d in chunk], jnp.int32))
    assert np.asarray(pool.tokens_N).tolist() == index.reference_pool(23, docs[:start + 4])
  assert np.asarray(pool.tokens_N).tolist().count(index.SEP) == 1  # only the tail of the long one is left
  assert set(np.asarray(pool.tokens_N).tolist()) - {index.SEP} == set(range(8, 30))


@pytest.mark.parametrize("settings", [dict(max_n=4), dict(max_n=3, min_match=2, top=3),
                                      dict(max_n=6, factor=0.5, min_prob=0.4)])
def test_longest_match_equals_brute_force(settings):
  rng = np.random.RandomState(1)
  gamma = 5
  for trial in range(6):
    pool = index.Pool.create(40)
    docs = [rng.randint(0, 5, rng.randint(3, 12)) for _ in range(6)]
    arr = np.zeros((6, 12), np.int32)
    for i, d in enumerate(docs):
      arr[i, :len(d)] = d
    pool = index.add(pool, jnp.asarray(arr), jnp.asarray([len(d) for d in docs], jnp.int32))
    rows = [rng.randint(0, 5, rng.randint(1, 14)).tolist() for _ in range(4)]
    tokens, seq_len = _rows(rows)
    for others in (False, True):
      text, own = index.searched_text(pool, tokens, seq_len, others)  # the reference's text: pool first
      m = index.longest_match(pool, tokens, seq_len, gamma, others=others, **settings)
      for b, r in enumerate(rows):
        ref_tokens, ref_num, ref_k = index.reference_match(np.asarray(text[b]), own, len(r), gamma, **settings)
        assert int(m.num_B[b]) == ref_num, (trial, others, b)
        assert np.asarray(m.tokens_BxG[b, :ref_num]).tolist() == ref_tokens, (trial, others, b)
        assert int(m.match_B[b]) == (ref_k if ref_k >= settings.get("min_match", 1) else 0)


def test_the_most_frequent_continuation_wins_and_ties_go_to_the_latest():
  # "1 2" is followed by 3 twice and by 4 once (the latest): frequency beats recency
  pool = suffix.pool_from_corpus(64, [[1, 2, 3, 5], [1, 2, 3, 6], [1, 2, 4, 7]])
  d = suffix.Suffix(pool, max_n=2, min_prob=0.0)
  tokens, seq_len = _rows([[9, 1, 2]])
  _, draft = d.propose((), tokens, seq_len, 3, None, None)
  assert np.asarray(draft.tokens_BxG[0, :2]).tolist() == [3, 6] and int(draft.num_B[0]) == 2  # ceil(1.0 * 2)
  np.testing.assert_allclose(np.asarray(draft.confidence_BxG[0]), [2 / 3, 1 / 2, 0], rtol=1e-6)
  assert int(suffix.Suffix(pool, max_n=2, min_prob=0.6).propose((), tokens, seq_len, 3, None, None)[1].num_B[0]) == 1
  _, none = suffix.Suffix(pool, max_n=2).propose((), *_rows([[8, 11]]), 3, None, None)
  assert int(none.num_B[0]) == 0  # no match: nothing drafted


def test_the_corpus_drafts_after_the_rows_text_and_the_pool():
  tokens, seq_len = _rows([[9, 1, 2]])
  corpus = suffix.corpus_pool([[1, 2, 5, 5], [7, 7, 8]])
  assert corpus.capacity == 9  # exactly the documents and their separators
  pool = suffix.pool_from_corpus(32, [[1, 2, 6, 6]])
  draft = lambda d: np.asarray(d.propose((), tokens, seq_len, 2, None, None)[1].tokens_BxG[0]).tolist()
  assert draft(suffix.Suffix(index.Pool.create(8), corpus, max_n=2, top=1, min_prob=0.0)) == [5, 5]
  assert draft(suffix.Suffix(pool, corpus, max_n=2, top=1, min_prob=0.0)) == [6, 6]  # the pool's first
  assert draft(suffix.Suffix(None, corpus, scope="row", max_n=2, top=1, min_prob=0.0)) == [5, 5]
  longer = suffix.corpus_pool([[9, 1, 2, 4, 4]])  # a longer match wins wherever it is
  assert draft(suffix.Suffix(pool, longer, max_n=3, top=1, min_prob=0.0)) == [4, 4]
  with pytest.raises(ValueError, match="corpus holds token id 9"):
    suffix.Suffix(None, longer, scope="row").check_compatible(testing.tiny_decoder(8))


def test_scopes_row_batch_run():
  tokens, seq_len = _rows([[5, 6, 7, 8, 5, 6], [1, 2, 3, 4, 1, 2]])
  pool = suffix.pool_from_corpus(32, [[3, 4, 1, 2, 9, 9]])
  for scope, want in (("row", [3, 3]), ("run", [3, 3])):
    d = suffix.Suffix(pool if scope == "run" else None, scope=scope, max_n=2)
    _, draft = d.propose((), tokens, seq_len, 3, None, None)
    assert np.asarray(draft.tokens_BxG[1, :1]).tolist() == [3], scope
  # a row sees another row's text with scope batch, not with scope row
  tokens, seq_len = _rows([[5, 6, 7, 8], [1, 5, 6]])
  assert int(suffix.Suffix(None, scope="row", max_n=2).propose((), tokens, seq_len, 3, None, None)[1].num_B[1]) == 0
  _, draft = suffix.Suffix(None, scope="batch", max_n=2).propose((), tokens, seq_len, 3, None, None)
  assert np.asarray(draft.tokens_BxG[1, :2]).tolist() == [7, 8] and int(draft.num_B[1]) == 2


def test_bad_settings_name_the_value():
  with pytest.raises(ValueError, match="scope"):
    suffix.Suffix(None, scope="global")
  with pytest.raises(ValueError, match="needs a pool"):
    suffix.Suffix(None, scope="run")
  with pytest.raises(ValueError, match="min_match"):
    suffix.Suffix.create(64, min_match=0)
  with pytest.raises(ValueError, match="hybrid fallback"):
    specjax.drafters.build("hybrid", {"fallback": "medusa", "capacity": 64}, testing.tiny_decoder(16))


# ----------------------------------------------------------------------------- in the loop
PROMPTS = np.array([[1, 2, 3, 1, 2, 3, 1, 0], [4, 5, 6, 4, 5, 0, 0, 0], [7, 3, 0, 0, 0, 0, 0, 0]], np.int32)
LENGTHS = np.array([7, 5, 2], np.int32)


def test_greedy_equals_autoregressive_and_memory_carries_over():
  target = testing.tiny_decoder(16, seed=1, weight_scale=3.0)
  base = specjax.generate(target, PROMPTS, LENGTHS, max_new_tokens=20)
  drafter = suffix.Suffix.create(256)
  first = specjax.speculative_generate(target, drafter, PROMPTS, LENGTHS, gamma=4, max_new_tokens=20)
  np.testing.assert_array_equal(first.tokens, base.tokens)
  assert int((np.asarray(drafter.pool.tokens_N) != index.SEP).sum()) == 0  # the input is never changed
  learned = first.drafter  # the call's memory: every prompt and its output
  assert int((np.asarray(learned.pool.tokens_N) != index.SEP).sum()) == int(LENGTHS.sum() + first.lengths.sum())
  again = specjax.speculative_generate(target, learned, PROMPTS, LENGTHS, gamma=4, max_new_tokens=20,
                                       batch_size=2, adaptive=specjax.Adaptive())
  np.testing.assert_array_equal(again.tokens, base.tokens)
  # the second call drafts from the first call's outputs: more drafts accepted per round
  assert again.stats["tokens_per_iteration"] > first.stats["tokens_per_iteration"]
  assert min(again.stats["accepted_per_position"]) > 0
  assert int((np.asarray(learned.reset().pool.tokens_N) != index.SEP).sum()) == 0


def test_hybrid_greedy_equals_autoregressive():
  target = testing.tiny_decoder(16, seed=1, weight_scale=3.0)
  base = specjax.generate(target, PROMPTS, LENGTHS, max_new_tokens=20)
  small = testing.perturbed(target, 0.3, seed=2)
  for fallback in (specjax.drafters.DraftModel(small), specjax.drafters.NGram(2)):
    h = suffix.Hybrid(suffix.Suffix.create(256), fallback, min_suffix_match=2)
    out = specjax.speculative_generate(target, h, PROMPTS, LENGTHS, gamma=3, max_new_tokens=20,
                                       adaptive=specjax.Adaptive())
    np.testing.assert_array_equal(out.tokens, base.tokens)
    out = specjax.speculative_generate(target, out.drafter, PROMPTS, LENGTHS, gamma=3, max_new_tokens=20,
                                       batch_size=2)
    np.testing.assert_array_equal(out.tokens, base.tokens)
    assert min(out.stats["accepted_per_position"]) > 0


def test_saved_pool_reloads_and_another_model_is_refused(tmp_path):
  target = testing.tiny_decoder(16, seed=1)
  d = suffix.Suffix(suffix.pool_from_corpus(64, [[1, 2, 3], [4, 5]]))
  path = suffix.save_pool(tmp_path / "pool.npz", d, suffix.hashes(target))
  loaded = specjax.drafters.build("suffix", {"pool_file": str(path), "capacity": 64}, target)
  np.testing.assert_array_equal(np.asarray(loaded.pool.tokens_N), np.asarray(d.pool.tokens_N))
  with pytest.raises(ValueError, match="checkpoint_hash"):
    specjax.drafters.build("suffix", {"pool_file": str(path), "capacity": 64}, testing.tiny_decoder(16, seed=2))
  with pytest.raises(ValueError, match="tokenizer_hash"):
    suffix.load_pool(path, d, dict(suffix.hashes(target), tokenizer_hash="another"))
  with pytest.raises(ValueError, match="outside the target's vocabulary"):
    loaded.check_compatible(testing.tiny_decoder(4))


def test_specbench_carries_the_pool_and_never_drafts_from_the_question_itself(tmp_path, monkeypatch):
  from specjax.bench import specbench
  from specjax.data import specbench_prompts as sp
  from specjax.data.tokenizer import ByteTokenizer
  target = testing.tiny_decoder(vocab_size=264)
  records = [dict(r, turns=[r["turns"][0][:60]]) for r in sp.head(sp.read(sp.SHIPPED), 1)][:3]
  seen, real = [], specbench.measure_call

  def measure(target, drafter, *args, **kwargs):
    m, learned = real(target, drafter, *args, **kwargs)
    seen.append((int((np.asarray(drafter.pool.tokens_N) != index.SEP).sum()), sum(m["prompt_tokens"]) + m["tokens"],
                 int((np.asarray(learned.pool.tokens_N) != index.SEP).sum())))
    return m, learned

  monkeypatch.setattr(specbench, "measure_call", measure)
  result = specbench.benchmark(records, target, ByteTokenizer(), ["suffix"], max_new_tokens=8, chat=False,
                               adaptive=("off",), progress=False, min_prompt_width=64)
  assert result["drafters"]["suffix"]["overall"]["identical_to_autoregressive"] is True
  assert [s[0] for s in seen] == [0, seen[0][1], seen[0][1] + seen[1][1]]  # each question: the ones before it
  assert all(after == before + own for before, own, after in seen)
