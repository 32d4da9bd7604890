"""The speculative loop's statistics: the counters it carries through its rounds (:class:`Stats`)
and the summary a call reports (:func:`summarize`)."""
from __future__ import annotations

from typing import Any

import flax
import jax
import jax.numpy as jnp
import numpy as np


@flax.struct.dataclass
class Stats:
  iterations: jax.Array
  row_iterations: jax.Array            # sum over iterations of active rows
  drafted_per_position: jax.Array      # [G] submitted drafts
  accepted_per_position: jax.Array     # [G]
  overlap_sum: jax.Array               # sum over verified positions of sum_x min(p, q)
  verified_positions: jax.Array
  submitted_hist: jax.Array            # [G + 1]: rows' submitted draft counts per round
  width_hist: jax.Array                # [len(widths)]: verify widths the rounds ran at
  idle_rounds: jax.Array               # rounds the drafter did not draft (Drafter.idle)

  @classmethod
  def zeros(cls, gamma, num_widths):
    z = jnp.zeros((), jnp.float32)
    return cls(jnp.zeros((), jnp.int32), z, jnp.zeros((gamma,)), jnp.zeros((gamma,)), z, z,
               jnp.zeros((gamma + 1,)), jnp.zeros((num_widths,)), jnp.zeros((), jnp.int32))



def summarize(stats: Stats, lengths, gamma: int, rows: int | None = None) -> dict[str, Any]:
  rows = rows or len(lengths)
  s = jax.device_get(stats)
  row_iters = max(float(s.row_iterations), 1.0)
  accepted = np.asarray(s.accepted_per_position, np.float64)
  drafted = np.asarray(s.drafted_per_position, np.float64)
  mean_accepted = float(accepted.sum() / row_iters)
  return {
      "iterations": int(s.iterations),
      "target_calls": int(s.iterations),
      "row_iterations": int(s.row_iterations),
      # share of row slots doing work: a static batch runs until its slowest row is done
      "batch_size": rows,
      "batch_utilization": round(float(s.row_iterations) / max(int(s.iterations) * rows, 1), 4),
      "generated_tokens": int(np.sum(lengths)),
      "gamma": gamma,
      "drafted_per_position": drafted.astype(int).tolist(),
      "accepted_per_position": accepted.astype(int).tolist(),
      # P(draft i kept | submitted); the conditional rate is accepted[i] / accepted[i-1]
      "acceptance_per_position": (accepted / np.maximum(drafted, 1)).round(4).tolist(),
      "conditional_acceptance_per_position": (
          accepted / np.maximum(np.concatenate([drafted[:1], accepted[:-1]]), 1)).round(4).tolist(),
      "mean_accepted": round(mean_accepted, 4),          # drafts kept per row-iteration
      "mean_submitted": round(float(drafted.sum() / row_iters), 4),
      "tokens_per_iteration": round(mean_accepted + 1, 4),  # plus the target's own token
      "alpha": round(float(s.overlap_sum / max(float(s.verified_positions), 1.0)), 4),
      "verified_positions": int(s.verified_positions),  # drafts the accept rule tested (alpha's weight)
      # rows' submitted draft counts (0..gamma) over all row-rounds, and rounds per verify width
      "submitted_histogram": np.asarray(s.submitted_hist).astype(int).tolist(),
      "width_histogram": np.asarray(s.width_hist).astype(int).tolist(),
      "idle_rounds": int(s.idle_rounds),  # rounds in which the drafter did not draft at all
  }
