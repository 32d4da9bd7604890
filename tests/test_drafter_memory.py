"""What a drafter reads from the verify pass (``Drafter.verify_topk``) and the state that outlives a
call (``Drafter.memory``): the top-k ids the loop hands over are the target's own top-k from a
plain forward over the same text; the memory is learned across rows and refills, returned by the
call, carried into the next, saved and loaded with its hashes (a mismatch refused)."""
import flax
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import stats_util  # tests/ is on sys.path under pytest

import specjax
from specjax import testing
from specjax.drafters import memory as memory_lib

V, K, P, N = 64, 3, 6, 12


@flax.struct.dataclass
class LoggingNGram(specjax.drafters.NGram):
  """Prompt lookup that asks for the target's top-k and logs every round's ``Verified`` in its
  memory (rounds x rows: a log, so not batch-free as a real memory would be)."""
  log: tuple = None
  kind = "logging_ngram"

  @property
  def verify_topk(self):
    return K

  @property
  def memory(self):
    return self.log

  def with_memory(self, memory):
    return self.replace(log=memory)

  @staticmethod
  def empty_log(rounds, b, t):
    return (jnp.zeros((), jnp.int32), jnp.zeros((rounds, b, t), jnp.int32), jnp.zeros((rounds, b, t, K), jnp.int32),
            jnp.zeros((rounds, b), jnp.int32))

  def init(self, target, prompts_BxP, prompt_lengths_B, max_len, prefill=None):
    return jnp.zeros((prompts_BxP.shape[0],), jnp.int32)

  def commit(self, state, tokens_BxS, seq_len_B, n_accepted_B, target_hidden_BxTxE, *, verified):
    return state + verified.count_B  # commit takes verified= only because verify_topk > 0

  def learn(self, memory, verified):
    r, fed, top, count = memory
    return (r + 1, fed.at[r].set(verified.fed_BxT), top.at[r].set(verified.topk_BxTxK), count.at[r].set(verified.count_B))


@flax.struct.dataclass
class LoggingNodesNGram(LoggingNGram):
  """The same log, asking for the top-k at every scored node too (``verify_topk_nodes``)."""
  kind = "logging_nodes_ngram"

  @property
  def verify_topk_nodes(self):
    return True

  @staticmethod
  def empty_log(rounds, b, t):
    return LoggingNGram.empty_log(rounds, b, t) + LoggingNGram.empty_log(rounds, b, t)[1:]

  def learn(self, memory, verified):
    r = memory[0]
    nodes = (memory[4].at[r].set(verified.scored_BxN), memory[5].at[r].set(verified.scored_topk_BxNxK),
             memory[6].at[r].set(verified.scored_count_B))
    return LoggingNGram.learn(self, memory[:4], verified) + nodes


@flax.struct.dataclass
class CountingNGram(specjax.drafters.NGram):
  """Prompt lookup with a memory: how often each token was appended, over all rows and calls."""
  counts_V: jax.Array = None
  kind = "counting_ngram"

  @property
  def memory(self):
    return self.counts_V

  def with_memory(self, memory):
    return self.replace(counts_V=memory)

  def learn(self, memory, verified):
    valid_BxT = jnp.arange(verified.new_BxT.shape[1])[None] < verified.count_B[:, None]
    return memory.at[verified.new_BxT].add(valid_BxT.astype(memory.dtype))


@pytest.fixture(scope="module")
def target():
  return testing.tiny_decoder(V, seed=0)


def _prompts(b, seed=0):
  rng = np.random.default_rng(seed)
  prompts = rng.integers(1, V, (b, P)).astype(np.int32)
  prompts[:, P // 2:] = prompts[:, :P - P // 2]  # a repeat, so prompt lookup drafts and accepts
  return prompts, np.full((b,), P, np.int32)


@pytest.mark.parametrize("nodes", [False, True])
def test_verify_topk_is_the_targets_own_topk(nodes):
  """Along the accepted path; with ``verify_topk_nodes`` also at every scored node, each read off a
  plain forward over the committed text plus the drafts up to that node."""
  target = stats_util.demo_target()  # trained on Python: prompt lookup's drafts get accepted
  prompts, lengths = stats_util.demo_prompts(2, width=24)
  gamma, n = 3, 24
  cls = LoggingNodesNGram if nodes else LoggingNGram
  drafter = cls(2, log=cls.empty_log(n, 2, gamma + 1))
  out = specjax.speculative_generate(target, drafter, prompts, lengths, gamma=gamma, max_new_tokens=n)
  rounds, fed, top, count = (np.asarray(x) for x in out.drafter.memory[:4])
  if nodes:
    _check_scored_nodes(target, prompts, lengths, out, rounds, count, *(np.asarray(x) for x in out.drafter.memory[4:]))
  assert rounds == out.stats["iterations"] and out.stats["accepted_per_position"][1] > 0  # paths past depth 1
  checked = 0
  for b in range(2):
    text = np.concatenate([prompts[b, :lengths[b]], out.tokens[b, :out.lengths[b]]])
    logits = target.module.apply({"params": target.params}, jnp.asarray(text[None]))[0][0]
    want = np.asarray(jax.lax.top_k(logits, K)[1])
    pos = lengths[b] - 1  # the row's last committed token: fed first in every round
    for r in range(rounds):
      for i in range(count[r, b]):
        assert fed[r, b, i] == text[pos + i]
        np.testing.assert_array_equal(top[r, b, i], want[pos + i])
        checked += 1
      pos += count[r, b]
    assert pos == len(text) - 1
  assert checked > rounds  # more positions than rounds: accepted paths were checked, not only roots


def _check_scored_nodes(target, prompts, lengths, out, rounds, count, scored, scored_top, scored_count):
  width = 64  # right padding changes no earlier position's logits (causal)
  forward = jax.jit(lambda params, seq, i: target.module.apply({"params": params}, seq[None])[0][0, i])
  rejected = 0
  for b in range(2):
    text = np.concatenate([prompts[b, :lengths[b]], out.tokens[b, :out.lengths[b]]])
    pos = lengths[b] - 1
    for r in range(rounds):
      assert scored_count[r, b] >= count[r, b] and scored[r, b, 0] == text[pos]
      for j in range(scored_count[r, b]):
        seq = np.concatenate([text[:pos + 1], scored[r, b, 1:j + 1]])
        want = np.asarray(jax.lax.top_k(forward(target.params, np.pad(seq, (0, width - len(seq))), len(seq) - 1), K)[1])
        np.testing.assert_array_equal(scored_top[r, b, j], want)
      rejected += scored_count[r, b] - count[r, b]
      pos += count[r, b]
  assert rejected > 0  # nodes off the accepted path were checked too


def test_memory_survives_refill_and_a_second_call(target, tmp_path):
  prompts, lengths = _prompts(5, seed=1)
  drafter = CountingNGram(2, counts_V=jnp.zeros((V,), jnp.int32))
  ref = specjax.generate(target, prompts, lengths, max_new_tokens=N)
  out = specjax.speculative_generate(target, drafter, prompts, lengths, gamma=3, max_new_tokens=N, batch_size=2)
  np.testing.assert_array_equal(out.tokens, ref.tokens)  # learning changes no output
  want = np.bincount(out.tokens[np.arange(N)[None] < out.lengths[:, None]], minlength=V)
  np.testing.assert_array_equal(np.asarray(out.drafter.memory), want)  # all 5 prompts, across 3 refills
  again = specjax.speculative_generate(target, out.drafter, prompts, lengths, gamma=3, max_new_tokens=N, batch_size=2)
  np.testing.assert_array_equal(np.asarray(again.drafter.memory), 2 * want)
  np.testing.assert_array_equal(np.asarray(drafter.memory), 0)  # the drafter as built: the reset
  # saved and loaded with the hashes; another checkpoint's hash is refused
  ck = memory_lib.params_hash(target)
  path = memory_lib.save(tmp_path / "counts", again.drafter, tokenizer_hash="tok", checkpoint_hash=ck)
  loaded = memory_lib.load(path, drafter, tokenizer_hash="tok", checkpoint_hash=ck)
  np.testing.assert_array_equal(np.asarray(loaded.memory), 2 * want)
  other = memory_lib.params_hash(testing.tiny_decoder(V, seed=1))
  with pytest.raises(ValueError, match="checkpoint_hash"):
    memory_lib.load(path, drafter, tokenizer_hash="tok", checkpoint_hash=other)
  with pytest.raises(ValueError, match="tokenizer_hash"):
    memory_lib.load(path, drafter, tokenizer_hash="another", checkpoint_hash=ck)
  with pytest.raises(ValueError, match="no memory"):
    memory_lib.save(tmp_path / "x", specjax.drafters.NGram(2), tokenizer_hash="tok", checkpoint_hash=ck)
