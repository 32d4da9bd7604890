"""The drafter protocol: everything the speculative loop, validation, sharding and the statistics
read from a drafter is declared on :class:`Drafter`, with its default. Nothing is probed.

A drafter is a pytree (a ``flax.struct.dataclass``: weights are leaves, settings are static
fields). Per generation the loop calls, inside one ``jax.jit``:

* ``init(target, prompts_BxP, prompt_lengths_B, max_len, prefill) -> state``: once per prompt
  batch (and per refilled row). ``prefill`` (:class:`Prefill`) is what the target's own prefill
  already computed over the prompt: its final hidden states and, when ``feature_layers`` is
  non-empty, those layers' outputs; a drafter never runs the target over the prompt again.
  ``prefill`` is ``None`` only when a caller outside the loop starts a drafter by hand
  (:meth:`Drafter.prefill_of` then computes it).
* ``propose(state, tokens_BxS, seq_len_B, gamma, sampling, rng) -> (state, Draft)``: the rows'
  committed text is ``tokens[b, :seq_len[b]]``; propose ``gamma`` tokens after it (a chain), or
  the nodes of ``tree``. ``Draft.num_B`` (optional) says how many of a chain's drafts each row
  submits; ``Draft.confidence_BxG`` (optional) lets the loop's adaptive draft length stop a row at
  its first unconfident draft. Both must be functions of the drafter's own outputs and the past only,
  never of the target's distribution for the positions being verified (that keeps the rule exact);
  a confidence must be read off the drafter's *distribution* at a position (e.g. its largest
  probability), never off the token it drew there (a selection by the drawn token's own q is biased).
  ``num_B`` must be fixed before the round's first draw (n-gram: the match length): when sampling,
  the loop chooses the verify width from ``num_B`` and the first position's confidence alone, since
  every later confidence depends on the drafts before it (:mod:`specjax.adaptive`, Exactness).
* ``commit(state, tokens_BxS, seq_len_B, n_accepted_B, target_hidden_BxTxE) -> state``: after the
  accept rule; ``target_hidden`` holds the verify pass's hidden states (or ``feature_layers``'
  outputs, concatenated) along the accepted path.
  When ``verify_topk > 0`` the loop also passes ``verified=`` (a :class:`Verified`: the tokens fed
  at the verified positions and the target's ``verify_topk`` most likely ids at each); a drafter
  that does not ask gets the call above, unchanged.
* ``learn(memory, verified) -> memory`` (drafters with ``memory``): after each round's tokens are
  appended; ``verified`` as above (``topk_BxTxK`` None unless ``verify_topk > 0``).
* ``learn_outputs(memory, prompts_BxP, prompt_lengths_B, outputs_BxN, output_lengths_B) -> memory``
  (drafters with ``memory``): once after the loop, outside it, with every prompt of the call and its
  output (host arrays): what whole texts teach (the ``suffix`` pool appends each prompt and its
  output as one document, which per-round ``learn`` calls interleaved across rows could not).
* ``idle(state, tokens_BxS, seq_len_B) -> state`` (optional): a round in which the loop decided,
  from the rows' past alone, to verify no draft (the adaptive draft length expects no width to
  pay for its cost): keep the state in step with the committed text without drafting (it may
  defer that to its next ``propose``, as ``DraftModel`` does: the loop calls ``idle`` or
  ``propose`` every round with the committed tokens, and nothing else reads the state). ``None``
  (the default) means the drafter has nothing cheaper than ``propose``, which then runs as usual.

``Draft.q_BxGxV`` is the distribution each draft token was drawn from, after the same
temperature/top-k/top-p as the target; deterministic drafters, and every drafter when greedy,
return ``None`` (one-hot on the token, never built: ``Sampling.draw`` gives ``(token, q)``).

What a drafter reads from the verify pass: ``target_hidden`` (above) and, when it declares
``verify_topk = k > 0``, the target's top-k ids at every verified position (the accepted path's
nodes, whose logits gave the next draft's test, and the last one, whose logits gave the bonus or
correction token), ranked by the target's logits (temperature, top-k and top-p keep that order).
Nothing else: no drafter calls the target itself.

State that outlives one call is explicit. ``memory`` (default None) is a pytree without a batch
axis that the drafter carries as its own field(s): the loop starts from ``drafter.memory``, runs
every round with ``drafter.with_memory(memory)`` (so ``propose`` reads it off ``self``), updates it
with ``learn`` after every round, and keeps it outside the per-row state, so continuous refill
(which re-inits a finished row's state) never resets it. ``speculative_generate`` returns the
drafter carrying what it learned (``GenerateOutput.drafter``); pass that to the next call to go on
learning. A snapshot is that returned value; a reset is the drafter as built;
:mod:`specjax.drafters.memory` saves and loads it with the tokenizer's and checkpoint's hash and
refuses a mismatch. Sampled output depends on the memory only through the drafts, so it stays exact.

Exactness is declared once: :meth:`Drafter.lossy_reason` returns ``None`` when the drafter's
proposal with the loop's accept rule is exact under the given sampling, else a sentence that says
why not. ``speculative_generate`` refuses a lossy configuration unless ``allow_lossy=True``.
"""
from __future__ import annotations

from typing import Any, ClassVar

import flax
import jax
import jax.numpy as jnp


@flax.struct.dataclass
class Draft:
  tokens_BxG: jax.Array
  q_BxGxV: jax.Array | None  # None: the draft is deterministic (q is one-hot on the token)
  # Token trees (specjax.tree): the static topology (None: a chain) and how siblings were drawn.
  tree: Any = flax.struct.field(pytree_node=False, default=None)
  siblings: str = flax.struct.field(pytree_node=False, default="iid")
  # An accept rule other than lossless rejection, chosen by the drafter: Medusa's typical
  # acceptance as ("typical", epsilon, delta). None: the lossless rule (greedy match at T = 0).
  rule: Any = flax.struct.field(pytree_node=False, default=None)
  # A different tree in every row (EAGLE-2's dynamic trees, specjax.tree_rows.RowTrees): arrays,
  # so a pytree node; when set it replaces ``tree``.
  row_tree: Any = None
  # Chains only: drafts each row submits (int32 [B], 0..G; None: all G), and the drafter's own
  # confidence in each position ([B, G] float32, its largest probability there; None: no opinion).
  num_B: jax.Array | None = None
  confidence_BxG: jax.Array | None = None


@flax.struct.dataclass
class Verified:
  """What one round's verify pass settled, per row: position ``i`` (``0 <= i < count_B``) was fed
  ``fed_BxT[:, i]`` (the row's last committed token, then its accepted drafts) and the token
  appended after it is ``new_BxT[:, i]`` (an accepted draft, then the bonus or correction token);
  ``topk_BxTxK[:, i]`` holds the target's ``verify_topk`` most likely ids there (None when the
  drafter asked for none). ``count_B`` is 0 for a row that was not active.

  With ``verify_topk_nodes``, also every node the pass scored, accepted or not: ``scored_BxN[:, j]``
  was fed at node ``j`` (the row's last committed token, then the draft's nodes in order) and
  ``scored_topk_BxNxK[:, j]`` holds the target's top-k after it, for ``j < scored_count_B``."""
  fed_BxT: jax.Array
  new_BxT: jax.Array
  count_B: jax.Array
  topk_BxTxK: jax.Array | None = None
  scored_BxN: jax.Array | None = None
  scored_topk_BxNxK: jax.Array | None = None
  scored_count_B: jax.Array | None = None


@flax.struct.dataclass
class Prefill:
  """What the target's prefill computed over the prompt (padded positions hold garbage)."""
  hidden_BxPxE: jax.Array                # final hidden states (after the final norm)
  features_BxPxF: jax.Array | None = None  # ``feature_layers``' outputs, concatenated; None if none


class Drafter:
  """Base class of every drafter; its defaults describe a drafter that needs nothing special.

  Declared, with defaults:
    kind: the registry name (``specjax.drafters.register``).
    feature_layers: target layers whose outputs the drafter reads (EAGLE-3, DFlash); () reads the
      final hidden state. Decides what ``Prefill.features_BxPxF`` and ``commit``'s hidden hold.
    tree: the static token tree (``specjax.tree.Tree``), a dynamic tree's shape
      (``specjax.tree_rows.Shape``), or None for a chain of ``gamma`` drafts.
    lossy_reason(sampling): None when exact under ``sampling``; else why not.
    num_params: numbers the drafter stores besides the target's weights (0: a lookup).
    draft_models(): the models the drafter runs itself (validated like the target: windows, mesh).
    array_axes: logical axes of the drafter's own array fields, by field name, for sharding;
      fields not named are replicated; ``Model`` fields are sharded by their own rules.
    check_compatible(target): raises a clear error before anything compiles.
    tree_budgets: node budgets a static ``tree`` may be cut to per round (its first b drafted
      nodes, a tree since parents come first; 0: a plain step), chosen by the loop's adaptive rule
      from the rows' past (:mod:`specjax.adaptive`); () (default): every round verifies the whole tree.
    verify_topk: k > 0 asks for the target's top-k ids at the verified positions (``Verified``),
      handed to ``commit(..., verified=)`` and ``learn``; 0 (default) asks for nothing.
    verify_topk_nodes: with ``verify_topk``, True also asks for the top-k at every node the pass
      scored (``Verified.scored_*``: rejected drafts included); False (default): the path only.
    memory: None, or the learned pytree (no batch axis) that outlives a call; ``with_memory``
      returns the drafter carrying another one, ``learn`` updates it after every round.
    idle: None, or a method as above for a drafter whose drafting costs real time (a draft model).
    stopping_below(confidence): this drafter, told that no draft after its first position under
      ``confidence`` (a float, or float32 [B]: a threshold per row, set by the loop each round)
      will be submitted (the loop's adaptive draft length cuts there); one that drafts token by
      token may stop computing there. Default: itself, unchanged.
    drafting_at_most(limit): this drafter, told that at most ``limit`` drafts (an int32 scalar
      the adaptive loop chooses each round from the rows' past, before drafting) will be
      submitted; one whose drafting costs real time per token drafts no more and sets
      ``Draft.num_B`` to at most ``limit``. Default: itself, unchanged.
  """
  kind: ClassVar[str] = "base"
  array_axes: ClassVar[dict] = {}

  @property
  def name(self) -> str:
    return self.kind

  @property
  def feature_layers(self) -> tuple:
    return ()

  @property
  def tree(self):
    return None

  @property
  def num_params(self) -> int:
    return 0

  def lossy_reason(self, sampling) -> str | None:
    del sampling
    return None

  def draft_models(self) -> tuple:
    return ()

  def check_compatible(self, target) -> None:
    del target

  def stopping_below(self, confidence) -> "Drafter":
    del confidence
    return self

  def drafting_at_most(self, limit) -> "Drafter":
    del limit
    return self

  idle = None  # or def idle(self, state, tokens_BxS, seq_len_B) -> state

  @property
  def tree_budgets(self) -> tuple:
    return ()

  @property
  def verify_topk(self) -> int:
    return 0

  @property
  def verify_topk_nodes(self) -> bool:
    return False

  @property
  def memory(self):
    return None

  def with_memory(self, memory) -> "Drafter":
    if memory is not None:
      raise ValueError(f"{type(self).__name__} declares no memory, got one")
    return self

  def learn(self, memory, verified: "Verified"):
    del verified
    return memory

  def learn_outputs(self, memory, prompts_BxP, prompt_lengths_B, outputs_BxN, output_lengths_B):
    del prompts_BxP, prompt_lengths_B, outputs_BxN, output_lengths_B
    return memory

  def init(self, target, prompts_BxP, prompt_lengths_B, max_len, prefill: Prefill | None = None):
    raise NotImplementedError(f"{type(self).__name__} must define init")

  def propose(self, state, tokens_BxS, seq_len_B, gamma, sampling, rng):
    raise NotImplementedError(f"{type(self).__name__} must define propose")

  def commit(self, state, tokens_BxS, seq_len_B, n_accepted_B, target_hidden_BxTxE, *, verified=None):
    del tokens_BxS, seq_len_B, n_accepted_B, target_hidden_BxTxE, verified
    return state

  def prefill_of(self, target, prompts_BxP, prefill: Prefill | None) -> Prefill:
    """``prefill`` itself, or (outside the loop) one computed by a cache-free target pass."""
    if prefill is not None:
      return prefill
    return run_prefill(target, prompts_BxP, self.feature_layers)


def run_prefill(target, prompts_BxP, feature_layers=()) -> Prefill:
  """A cache-free target pass over the prompt: its hidden states and the requested layers."""
  if feature_layers:
    out = target.module.apply({"params": target.params}, prompts_BxP, return_layer_hidden=True)
    return Prefill(out[1], features(out[3], feature_layers))
  return Prefill(target.module.apply({"params": target.params}, prompts_BxP)[1])


def features(layer_hidden, layers) -> jax.Array:
  """The chosen layers' outputs concatenated on the last axis, float32."""
  return jnp.concatenate([layer_hidden[i].astype(jnp.float32) for i in layers], axis=-1)


def hidden_at(hidden_BxPxE, index_B) -> jax.Array:
  """``hidden[b, index[b]]`` as float32 ``[B, E]``."""
  return jnp.take_along_axis(hidden_BxPxE, index_B[:, None, None], 1)[:, 0].astype(jnp.float32)


def top_probability(logits_xV) -> jax.Array:
  """The largest probability of ``softmax(logits)``: a drafter's confidence in a position, read off
  its distribution there (never off the token it drew)."""
  logits_xV = logits_xV.astype(jnp.float32)
  return jnp.exp(jnp.max(logits_xV, -1) - jax.nn.logsumexp(logits_xV, -1))
