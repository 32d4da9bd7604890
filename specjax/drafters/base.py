"""The drafter protocol: everything the speculative loop knows about a drafter.

A drafter is a pytree (a ``flax.struct.dataclass``: weights are leaves, settings are static).

* ``init(target, prompts_BxP, prompt_lengths_B, max_len) -> state``: once per generation.
* ``propose(state, tokens_BxS, seq_len_B, gamma, sampling, rng) -> (state, Draft)``: the rows'
  committed text is ``tokens[b, :seq_len[b]]``; propose ``gamma`` tokens after it.
* ``commit(state, tokens_BxS, seq_len_B, n_accepted_B, target_hidden_BxTxE) -> state``: after the
  accept rule; heads that read the target's hidden states take them here.

``Draft.q_BxGxV`` is the distribution each draft token was drawn from, after the same
temperature/top-k/top-p as the target; deterministic drafters, and every drafter when greedy,
return ``None`` (one-hot on the token, never built: ``Sampling.draw`` gives ``(token, q)``).
"""
from __future__ import annotations

from typing import Any

import flax
import jax


@flax.struct.dataclass
class Draft:
  tokens_BxG: jax.Array
  q_BxGxV: jax.Array | None  # None: the draft is deterministic (q is one-hot on the token)
  # Token trees (specjax.tree): the static topology (None: a chain), how siblings were drawn, and
  # Medusa's lossy typical rule as (epsilon, delta) or None.
  tree: Any = flax.struct.field(pytree_node=False, default=None)
  siblings: str = flax.struct.field(pytree_node=False, default="iid")
  typical: Any = flax.struct.field(pytree_node=False, default=None)
  # A different tree in every row (EAGLE-2's dynamic trees, specjax.tree_rows.RowTrees): arrays,
  # so a pytree node; when set it replaces ``tree``.
  row_tree: Any = None


class DrafterBase:
  """Default hooks; concrete drafters override what they need."""
  name = "base"
  lossless = True

  @property
  def num_params(self) -> int:
    """Numbers the drafter stores besides the target's own weights (0: a lookup like n-gram)."""
    return 0

  def check_compatible(self, target) -> None:
    pass

  def commit(self, state, tokens_BxS, seq_len_B, n_accepted_B, target_hidden_BxTxE):
    del tokens_BxS, seq_len_B, n_accepted_B, target_hidden_BxTxE
    return state
