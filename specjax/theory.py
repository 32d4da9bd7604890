"""Leviathan et al. 2022 §3: expected tokens per iteration, walltime improvement, optimal gamma.

alpha: acceptance rate, E[sum_x min(p(x), q(x))]; gamma: drafts per iteration; c: cost of one
drafter step / one target step; v: cost of the target's verify pass over gamma + 1 tokens / one
target decode step (the paper assumes v = 1; on real hardware it is a bit more, measure it).
"""
from __future__ import annotations

import numpy as np


def expected_tokens(alpha, gamma):
  """(1 - alpha^(gamma+1)) / (1 - alpha): tokens per iteration, i.i.d. acceptance (Eq. 1)."""
  alpha = np.asarray(alpha, np.float64)
  with np.errstate(divide="ignore", invalid="ignore"):
    out = (1 - alpha ** (gamma + 1)) / (1 - alpha)
  return np.where(np.isclose(alpha, 1.0), gamma + 1.0, out)


def expected_tokens_tree(alpha, parents):
  """Tokens per iteration verifying a static token tree (``parents``: -1 for the root, then each
  drafted node's parent, parents before children, siblings in the order they are tried), each
  sibling accepted with probability ``alpha`` independently of the others:
  ``1 + sum over drafted nodes of alpha^depth (1 - alpha)^(sum of sibling ranks on its path)``.
  Reaching a node needs every sibling tried before it on its path rejected and it accepted; a chain
  (every rank 0) gives :func:`expected_tokens`. Deterministic drafts verified against the running
  residual (a greedy argmax, or ``accept.residual_one_hot`` when sampling) fit the model loosely:
  a later sibling is less likely than the first, so it overstates what wide trees bring."""
  alpha = np.asarray(alpha, np.float64)[..., None]
  depth, rank_sum = tree_path_sums(parents)
  return 1.0 + np.sum(alpha ** depth[1:] * (1.0 - alpha) ** rank_sum[1:], axis=-1)


def tree_path_sums(parents):
  """``(depth_N, rank_sum_N)``: each node's depth and the sum of its path's sibling ranks."""
  parents = [int(p) for p in parents]
  depth, rank_sum, seen = np.zeros(len(parents)), np.zeros(len(parents)), {}
  for i, p in enumerate(parents[1:], 1):
    rank = seen.get(p, 0)
    seen[p] = rank + 1
    depth[i], rank_sum[i] = depth[p] + 1, rank_sum[p] + rank
  return depth, rank_sum


def walltime_improvement(alpha, gamma, c, v=1.0):
  """Expected speedup over autoregressive decoding: tokens per iteration / cost per iteration.

  One iteration costs gamma drafter steps and one verify pass: gamma * c + v target steps
  (Theorem 3.8 with v = 1).
  """
  return expected_tokens(alpha, gamma) / (gamma * np.asarray(c, np.float64) + v)


def optimal_gamma(alpha, c, v=1.0, max_gamma=32) -> int:
  gammas = np.arange(1, max_gamma + 1)
  return int(gammas[np.argmax([walltime_improvement(alpha, g, c, v) for g in gammas])])


def alpha_from_acceptance(accepted_per_position, drafted_per_position):
  """alpha from run statistics.

  Overall: under i.i.d. acceptance, P(reach position i and accept it) = alpha^(i+1); the mean
  number accepted per iteration is sum_i alpha^(i+1), which we invert numerically. Per position:
  the conditional rate accepted[i] / accepted[i-1] (accepted[-1] = drafted).
  """
  acc = np.asarray(accepted_per_position, np.float64)
  drafted = np.asarray(drafted_per_position, np.float64)
  reached = np.concatenate([drafted[:1], acc[:-1]])
  per_position = np.divide(acc, reached, out=np.zeros_like(acc), where=reached > 0)
  mean_accepted = acc.sum() / max(drafted[0], 1.0)
  gamma = len(acc)
  lo, hi = 0.0, 1.0
  for _ in range(60):  # sum_{i=1..gamma} a^i is increasing in a: bisect
    mid = (lo + hi) / 2
    if sum(mid ** i for i in range(1, gamma + 1)) < mean_accepted:
      lo = mid
    else:
      hi = mid
  return (lo + hi) / 2, per_position
