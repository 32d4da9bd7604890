"""Shared helpers for the distribution-exactness checks (a copy of tests/test_exactness.py's, which
is not importable as a package): the exact 2-token joint of a target, sampled counts, chi-squared."""
import jax
import numpy as np
from scipy import stats as scipy_stats

import specjax

PROMPT = np.array([[1, 2, 3, 1, 2]])
# rows per chi-squared run. 20k (was 50k) keeps the wrong rules far past the 1e-6 line on 64 cells:
# on 20k rows, accepting every draft, lenience 0.5 and resampling from p give p-values that
# underflow to 0, and the subtlest one, test_tree_exactness's stale q, gives 3e-231 (10k: 4e-108);
# the compiled loop's run time is proportional to it.
N = 20_000


def exact_joint(target, sampling, prompt=PROMPT):
  v = target.vocab_size
  p1 = sampling.probs(specjax.logits(target, prompt)[0, -1])
  seqs = np.concatenate([np.repeat(prompt, v, 0), np.arange(v)[:, None]], axis=1)
  p2 = sampling.probs(specjax.logits(target, seqs)[:, -1])
  joint = np.asarray(p1, np.float64)[:, None] * np.asarray(p2, np.float64)
  return joint / joint.sum()  # float64, sums to 1: scipy checks observed and expected totals agree


def sampled_counts(target, drafter, sampling, n=N, gamma=2, lenience=1.0, seed=0, prompt=PROMPT):
  v = target.vocab_size
  prompts = np.repeat(prompt, n, 0)
  lengths = np.full((n,), prompt.shape[1])
  out = specjax.speculative_generate(target, drafter, prompts, lengths, gamma=gamma, max_new_tokens=2,
                                     sampling=sampling, rng=jax.random.PRNGKey(seed), lenience=lenience)
  counts = np.zeros((v, v))
  np.add.at(counts, (out.tokens[:, 0], out.tokens[:, 1]), 1)
  return counts, out.stats


def chi2_pvalue(counts, joint):
  expected = joint.ravel() * counts.sum()
  observed = counts.ravel()
  assert observed[expected == 0].sum() == 0, "sampled a token the target gives zero probability"
  big = expected >= 5  # pool the sparse cells so the chi-squared approximation holds
  obs = np.append(observed[big], observed[~big].sum())
  exp = np.append(expected[big], expected[~big].sum())
  if exp[-1] == 0:
    obs, exp = obs[:-1], exp[:-1]
  return scipy_stats.chisquare(obs, exp).pvalue


def prompts(batch, width=9, seed=0, vocab=64):
  """Ragged right-padded prompts, at least one full-width row (as in test_greedy_equality)."""
  rs = np.random.RandomState(seed)
  lengths = rs.randint(1, width + 1, size=batch)
  lengths[0] = width
  out = rs.randint(2, vocab, size=(batch, width))
  out[np.arange(width)[None] >= lengths[:, None]] = 0
  return out, lengths


def drive_rounds(target, drafter, prompts_BxP, lengths_B, gamma, sampling, rounds, lenience=1.0, seed=0):
  """Runs the speculative loop's steps by hand (init, propose, verify, commit, append) so a test can
  inspect the drafter state; returns (rows, drafter_state, accepted counts per round)."""
  import functools  # pylint: disable=import-outside-toplevel
  import jax.numpy as jnp  # pylint: disable=import-outside-toplevel
  from specjax import decode  # pylint: disable=import-outside-toplevel
  from specjax import tree as tree_lib  # pylint: disable=import-outside-toplevel
  from specjax.models import api  # pylint: disable=import-outside-toplevel
  prompts_BxP, lengths_B = jnp.asarray(prompts_BxP, jnp.int32), jnp.asarray(lengths_B, jnp.int32)
  max_len = prompts_BxP.shape[1] + (rounds + 1) * (gamma + 1)

  @jax.jit
  def start(target, drafter):
    cache, tokens, seq_len = api.start(target, prompts_BxP, lengths_B, max_len)
    rows = decode.Rows(tokens, seq_len, jnp.zeros_like(seq_len), jnp.zeros_like(seq_len, bool))
    return rows, cache, drafter.init(target, prompts_BxP, lengths_B, max_len)

  @functools.partial(jax.jit, static_argnums=(5,))
  def one_round(target, drafter, rows, cache, state, sampling, rng):
    draft_rng, accept_rng = jax.random.split(rng)
    state, draft = drafter.propose(state, rows.tokens_BxS, rows.seq_len_B, gamma, sampling, draft_rng)
    last_B = jnp.take_along_axis(rows.tokens_BxS, (rows.seq_len_B - 1)[:, None], 1)[:, 0]
    cache, hidden, new, n, _ = tree_lib.verify_and_accept(
        target, cache, last_B, draft, sampling, accept_rng, lenience, getattr(drafter, "feature_layers", ()))
    state = drafter.commit(state, rows.tokens_BxS, rows.seq_len_B, n, hidden)
    rows, _ = decode._append(rows, new, n + 1, 10 ** 6, None)  # pylint: disable=protected-access
    return rows, cache.with_length(rows.seq_len_B - 1), state, n

  rows, cache, state = start(target, drafter)
  ns = []
  for r in range(rounds):
    rows, cache, state, n = one_round(target, drafter, rows, cache, state, sampling, jax.random.PRNGKey(seed + r))
    ns.append(np.asarray(n))
  return rows, state, np.stack(ns)
