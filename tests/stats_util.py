"""Shared helpers for the distribution-exactness checks: the exact joint of a target's first tokens,
sampled counts, chi-squared; prompts and the demo assets for the greedy-equality checks.

The exact joint is computed independently of ``specjax.sampling``: float64 numpy, from the target's
logits, by the definitions (:func:`reference_probs`). A bug in ``Sampling.probs`` (temperature,
top-k, top-p) is therefore a disagreement between the two sides, not a bug they share.

Every chi-squared run draws ``gamma + 1`` tokens by default: a row whose whole chain (or tree path)
is accepted also emits the bonus token drawn from p after it, and that token is in the tested joint.
"""
import functools
import pathlib

import jax
import numpy as np
from scipy import stats as scipy_stats

import specjax

PROMPT = np.array([[1, 2, 3, 1, 2]])
# rows per chi-squared run. On 20k rows and the 512 cells of 3 tokens every power check's p-value
# underflows to 0, except test_tree_exactness's stale q (5e-305; 3e-231 on the first 2 tokens); a
# wrong bonus token gives 0 where the first 2 tokens alone give 0.57 and 0.67 (not detected). The
# compiled loop's run time is proportional to N.
N = 20_000
# decisions closer than this to a top-k / top-p boundary could go either way in the loop's float32:
# reference_probs refuses such a setting instead of guessing
BOUNDARY_MARGIN = 1e-5


def reference_probs(logits_xV, temperature, top_k=0, top_p=1.0):
  """The sampling distribution by its definition, float64, with specjax.sampling's conventions.

  1. divide the logits by ``temperature`` (> 0);
  2. top-k (0 or >= V: off): keep every token whose logit is >= the k-th largest, so tokens tied
     with the k-th all stay (``Sampling.probs`` keeps ``logits >= kth``), then softmax over the kept;
  3. top-p (1.0: off): sort the probabilities in decreasing order and keep the smallest prefix whose
     mass reaches ``top_p``: token i (in sorted order) is kept iff the mass strictly before it is
     < top_p, so the token that makes the mass reach top_p is kept and a prefix summing to exactly
     top_p stops there; every token whose probability equals the smallest kept one is kept too (ties at
     the threshold stay: ``top_p_threshold_by_sort``); renormalise.

  Raises if a decision lies within ``BOUNDARY_MARGIN`` of its boundary (there float32 and float64
  may decide differently: pick another prompt or setting).
  """
  if not temperature > 0:
    raise ValueError(f"reference_probs is for sampling, got temperature={temperature}")
  x = np.asarray(logits_xV, np.float64) / temperature
  v = x.shape[-1]
  if 0 < top_k < v:
    srt = -np.sort(-x, -1)
    kth, nxt = srt[..., top_k - 1:top_k], srt[..., top_k:top_k + 1]
    gap = kth - nxt
    assert np.all((gap == 0) | (gap > BOUNDARY_MARGIN)), f"top-k boundary too close: gap {gap.min()}"
    x = np.where(x >= kth, x, -np.inf)
  p = np.exp(x - x.max(-1, keepdims=True))
  p /= p.sum(-1, keepdims=True)
  if top_p < 1.0:
    srt = -np.sort(-p, -1)
    before = np.cumsum(srt, -1) - srt
    assert np.all(np.abs(before - top_p) > BOUNDARY_MARGIN), "top-p boundary too close"
    threshold = np.min(np.where(before < top_p, srt, np.inf), -1, keepdims=True)
    p = np.where(p >= threshold, p, 0.0)
    p /= p.sum(-1, keepdims=True)
  return p


def sampling_probs(logits_xV, sampling):
  """:func:`reference_probs` for a ``specjax.Sampling`` (only its three numbers are read)."""
  return reference_probs(logits_xV, sampling.temperature, sampling.top_k, sampling.top_p)


@functools.partial(jax.jit)
def _last_logits(model, tokens_BxT):
  return specjax.logits(model, tokens_BxT)[:, -1]


def exact_joint(target, sampling, prompt=PROMPT, tokens=3):
  """The exact distribution of the first ``tokens`` tokens after ``prompt`` (3: what ``sampled_counts``
  draws at its default gamma 2): ``[V] * tokens``, float64, sums to 1 (scipy checks that observed
  and expected totals agree)."""
  v = target.vocab_size
  prompt = np.asarray(prompt)
  seqs, joint = prompt, np.ones((1,))
  for step in range(tokens):
    probs = sampling_probs(np.asarray(_last_logits(target, seqs)), sampling)  # [V**step, V]
    joint = (joint[:, None] * probs).reshape(-1)  # index: prefix * V + token
    if step + 1 < tokens:
      seqs = np.concatenate([np.repeat(seqs, v, 0), np.tile(np.arange(v), len(seqs))[:, None]], axis=1)
  joint = joint.reshape((v,) * tokens)
  return joint / joint.sum()


def token_counts(tokens_NxT, v):
  counts = np.zeros((v,) * tokens_NxT.shape[1])
  np.add.at(counts, tuple(np.asarray(tokens_NxT).T), 1)
  return counts


def sampled_counts(target, drafter, sampling, n=N, gamma=2, lenience=1.0, seed=0, prompt=PROMPT, tokens=None,
                   batch_size=None):
  """Counts of the first ``tokens`` (default ``gamma + 1``) generated tokens over ``n`` rows that share
  ``prompt``, and the run's statistics."""
  tokens = gamma + 1 if tokens is None else tokens
  prompts = np.repeat(prompt, n, 0)
  lengths = np.full((n,), prompt.shape[1])
  out = specjax.speculative_generate(target, drafter, prompts, lengths, gamma=gamma, max_new_tokens=tokens,
                                     sampling=sampling, rng=jax.random.PRNGKey(seed), lenience=lenience,
                                     batch_size=batch_size, allow_lossy=True)  # the power checks run lossy rules
  return token_counts(out.tokens[:, :tokens], target.vocab_size), out.stats


def chi2_pvalue(counts, joint):
  """Chi-squared goodness of fit of ``counts`` to ``joint``; 0 when a count falls where ``joint`` is 0.
  Counts over more tokens than the joint covers are first summed over the extra (trailing) tokens:
  the marginal of the first tokens."""
  counts = np.asarray(counts, np.float64)
  while counts.ndim > np.ndim(joint):
    counts = counts.sum(-1)
  assert counts.shape == joint.shape, (counts.shape, joint.shape)
  joint = np.asarray(joint, np.float64)
  expected = (joint / joint.sum()).ravel() * counts.sum()  # float32 probabilities sum to 1 only to ~1e-7
  observed = counts.ravel()
  if observed[expected == 0].sum() > 0:  # a sequence the target never emits: impossible under the target
    print(f"chi2_pvalue: {int(observed[expected == 0].sum())} samples the target gives zero probability")
    return 0.0
  big = expected >= 5  # pool the sparse cells so the chi-squared approximation holds
  obs = np.append(observed[big], observed[~big].sum())
  exp = np.append(expected[big], expected[~big].sum())
  if exp[-1] == 0:
    obs, exp = obs[:-1], exp[:-1]
  return scipy_stats.chisquare(obs, exp).pvalue


def assert_full_paths(stats, at_least=0.01):
  """The bonus token is in the tested joint only when a row's first round accepts every draft: the rate
  of accepting the last draft (over all rounds; with gamma + 1 tokens most rows have one) must not be
  tiny."""
  assert stats["acceptance_per_position"][-1] >= at_least, (
      "too few fully accepted paths: the bonus token is barely tested", stats["acceptance_per_position"])


def bonus_rule_patch(rule, kind):
  """A deliberately WRONG version of an accept rule ``(leaf, next) = rule(rng, p, q, tokens, tree, ...)``
  whose token after a fully accepted path (the bonus token, which must be drawn from p there) is
  ``kind``: "zero" -- always token 0; "q" -- drawn from the drafter's q at the leaf (the distribution
  the last draft came from) instead of the target's p after it."""
  import jax.numpy as jnp  # pylint: disable=import-outside-toplevel

  def wrong(rng, p_BxNxV, q_BxNxV, tokens_BxN, tree, *args, **kwargs):
    leaf_B, next_B = rule(rng, p_BxNxV, q_BxNxV, tokens_BxN, tree, *args, **kwargs)
    depth_B = jnp.asarray(np.asarray(tree.depth))[leaf_B]
    full_B = depth_B == tree.max_depth
    if kwargs.get("num_B") is not None:  # a row that submitted fewer drafts ends its path there
      full_B = depth_B == kwargs["num_B"]
    if kind == "zero":
      bad_B = jnp.zeros_like(next_B)
    else:
      q_leaf_BxV = jnp.take_along_axis(q_BxNxV, leaf_B[:, None, None], 1)[:, 0]
      bad_B = specjax.sampling.sample_from(jax.random.fold_in(rng, 7), q_leaf_BxV)
    return leaf_B, jnp.where(full_B, bad_B, next_B)

  return wrong


def run_patched(monkeypatch, obj, name, value, fn):
  """``fn()`` with ``obj.name`` replaced; the compiled loops are dropped before and after (the
  loop was traced with the real code)."""
  monkeypatch.setattr(obj, name, value)
  jax.clear_caches()
  try:
    return fn()
  finally:
    monkeypatch.undo()
    jax.clear_caches()


def prompts(batch, width=9, seed=0, vocab=64):
  """Ragged right-padded prompts, at least one full-width row (as in test_greedy_equality)."""
  rs = np.random.RandomState(seed)
  lengths = rs.randint(1, width + 1, size=batch)
  lengths[0] = width
  out = rs.randint(2, vocab, size=(batch, width))
  out[np.arange(width)[None] >= lengths[:, None]] = 0
  return out, lengths


def assert_accepts_at_every_depth(stats, rejected=True):
  """Greedy equality says little when nothing is accepted: every draft depth must be accepted in some
  row and round, so the accept and commit steps run at every depth; and (``rejected``) some round must
  reject a draft, so the rollback runs too."""
  acc, drafted = stats["accepted_per_position"], stats["drafted_per_position"]
  assert min(acc) > 0, f"a draft depth was never accepted: accepted_per_position={acc}"
  if rejected:
    assert acc[-1] < drafted[-1], f"no draft was ever rejected: accepted {acc} of {drafted}"


# ----------------------------------------------------------------------------- demo assets
DEMO = pathlib.Path(specjax.__file__).parent / "assets" / "demo"


@functools.lru_cache(maxsize=None)
def demo_target():
  """The demo target (6 layers, d_model 384, a 264-token byte vocabulary) trained on Python code."""
  return specjax.checkpoint.load_model(DEMO / "target")


@functools.lru_cache(maxsize=None)
def held_out_code():
  from specjax.data import code_corpus  # pylint: disable=import-outside-toplevel
  return code_corpus.load_split("held_out")


def demo_prompts(batch, width=32, seed=3):
  """Held-out Python, cut at line starts (as ``code_corpus.held_out_prompts``), ragged (every other row
  shorter), right padded: the demo drafters were trained on this kind of text, so they accept."""
  data = held_out_code()
  starts = np.flatnonzero(data[:-width - 1] == ord("\n")) + 1
  chosen = np.sort(np.random.default_rng(seed).choice(starts, size=batch, replace=False))
  out = np.stack([data[s:s + width] for s in chosen]).astype(np.int32)
  lengths = np.full((batch,), width, np.int32)
  lengths[1::2] = np.maximum(width - 7 * np.arange(1, len(lengths[1::2]) + 1), 4)
  out[np.arange(width)[None] >= lengths[:, None]] = 0
  return out, lengths


def demo_drafter_model():
  """The demo's small draft model (1 layer, d_model 192) distilled from the demo target."""
  return specjax.checkpoint.load_model(DEMO / "drafter")


def demo_mtp(subset_K=None):
  from specjax.models import heads  # pylint: disable=import-outside-toplevel
  return specjax.drafters.MTP(heads.load_head(DEMO / "mtp"), subset_K)


def demo_dflash(subset_K=None):
  from specjax.models import heads  # pylint: disable=import-outside-toplevel
  return specjax.drafters.DFlash(heads.load_head(DEMO / "dflash"), subset_K)


def demo_medusa(paths, subset_K=None):
  from specjax.drafters import medusa  # pylint: disable=import-outside-toplevel
  return medusa.Medusa.create(demo_target(), medusa.load_heads(DEMO / "medusa"), paths=paths, subset_K=subset_K)


def drive_rounds(target, drafter, prompts_BxP, lengths_B, gamma, sampling, rounds, lenience=1.0, seed=0):
  """Runs the speculative loop's steps by hand (init, propose, verify, commit, append) so a test can
  inspect the drafter state; returns (rows, drafter_state, accepted counts per round)."""
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
