"""The drafter configurations of the exactness matrix (:mod:`specjax.conformance.matrix`), on tiny models.

One tiny target (vocabulary 8, 2 layers, width 32) and, per drafter family, small random weights
far enough from the target that a wrong accept rule shows in a chi-squared test, yet close enough
that every draft depth is accepted in some rounds (so the bonus token after a fully accepted path
is in the tested joint). Weights are leaves of the drafter pytrees: configurations of one family
that differ only in weights share compiled loops.

The configurations are the registered kinds' declared cases (``KindSpec.cases``): each states the
kind it stands for, the public options it sets, and whether it must be lossy when sampling
(``lossy_sampled``). That expectation is written with the case from the rules in docs/design
(top-k siblings verified against a softmax q, typical acceptance, lenience < 1 and a selection by
the drawn token's own probability are lossy; everything else is exact), so a drafter whose own
``lossy_reason`` disagrees is reported as mislabeled, not trusted.
"""
from __future__ import annotations

import dataclasses
import functools
from typing import Callable

import jax
import jax.numpy as jnp
import numpy as np

V = 8        # vocabulary of every model in the matrix
GAMMA = 2    # drafts per round (chains) and tree depth: gamma + 1 = 3 tokens are tested
PROMPTS = {  # token ids; "A" is the batch-1 prompt of test_exactness.py
    "A": (1, 2, 3, 1, 2),
    "B": (4, 2, 4),
    "C": (5,),
    "D": (2, 6, 1, 2),
    "E": (7, 3),
}
ADAPTIVE = dict(confidence=0.3, verify_slope=0.0)  # rows stop at unconfident drafts; widths 0, 1, 2
GREEDY_NEW = 12  # tokens per greedy run
FIT_WIDTH = 8    # greedy heads memorise each prompt's first 8 tokens of text: later drafts get rejected too


@dataclasses.dataclass(frozen=True)
class Config:
  """One drafter configuration: ``build(models) -> Drafter`` plus the loop's own options."""
  name: str
  kind: str                    # the registry kind it stands for
  options: tuple               # public options it sets, as "name=value" strings
  build: Callable = dataclasses.field(compare=False)
  lossy_sampled: bool = False  # expected: lossy at temperature > 0 (always exact when greedy)
  lenience: float = 1.0
  adaptive: bool = False       # the loop's adaptive draft length (chains only)

  def drafter(self, greedy: bool = False):
    return self.build(models(greedy))

  def adaptive_obj(self):
    import specjax  # pylint: disable=import-outside-toplevel
    return specjax.Adaptive(**ADAPTIVE) if self.adaptive else None


def _fit(params, loss_fn, batch, steps=300, learning_rate=1e-2):
  """``steps`` Adam steps of ``loss_fn(params, batch) -> (loss, aux)`` on one batch, in one compiled scan."""
  import optax  # pylint: disable=import-outside-toplevel
  opt = optax.adam(learning_rate)

  def one(carry, _):
    p, state = carry
    (loss, _), grads = jax.value_and_grad(loss_fn, has_aux=True)(p, batch)
    updates, state = opt.update(grads, state, p)
    return (optax.apply_updates(p, updates), state), loss

  return jax.jit(lambda p: jax.lax.scan(one, (p, opt.init(p)), None, length=steps)[0][0])(params)


def greedy_text(target, width):
  """Each matrix prompt followed by the target's greedy continuation, cut to ``width`` tokens."""
  import specjax  # pylint: disable=import-outside-toplevel
  rows = [PROMPTS[n] for n in sorted(PROMPTS)]
  prompts = np.zeros((len(rows), max(map(len, rows))), np.int32)
  for i, r in enumerate(rows):
    prompts[i, :len(r)] = r
  lengths = np.array([len(r) for r in rows], np.int32)
  cont = np.asarray(specjax.generate(target, prompts, lengths, max_new_tokens=width).tokens)
  return np.stack([np.concatenate([r, c])[:width] for r, c in zip(rows, cont)]).astype(np.int32)


@functools.lru_cache(maxsize=None)
def target(greedy: bool = False):
  """The sampled cells' target (test_exactness.py's); greedy cells use a sharper one, whose greedy text
  varies instead of repeating one token (repetition would make every drafter right)."""
  from specjax import testing  # pylint: disable=import-outside-toplevel
  return testing.tiny_decoder(V, seed=1, weight_scale=3.0) if greedy else testing.tiny_decoder(V, seed=0,
                                                                                                weight_scale=1.0)


LAYERS = (0, 1)  # the target layers EAGLE and DFlash read


class Models:
  """The matrix's tiny models, built on first use: the target, a small model, a truncated vocabulary
  and a corpus; a kind's own weights (its heads) come from its cases through :meth:`weights`, once
  per set. Sampled cells use random weights, far from the target (a wrong rule then shows); greedy
  cells (``greedy=True``) use ones close to it, or heads fitted to its greedy text on the matrix's
  prompts (their first ``FIT_WIDTH`` tokens, :meth:`refit`), so drafts are accepted at every depth,
  and rejected past what was fitted."""
  gamma = GAMMA    # drafts per round and tree depth
  layers = LAYERS  # target layers a feature-reading head fuses

  def __init__(self, greedy: bool):
    self.greedy = greedy
    self.target = target(greedy)
    self._weights = {}

  def weights(self, name: str, make: Callable):
    """``make(self)``, built once per set of models (a kind's heads: ``m.weights("mtp", tiny_head)``)."""
    if name not in self._weights:
      self._weights[name] = make(self)
    return self._weights[name]

  @functools.cached_property
  def features(self):
    """The target's features over its greedy text (``tokens``, ``hidden`` and ``layers``' outputs)."""
    from specjax.train import heads as train_heads  # pylint: disable=import-outside-toplevel
    return train_heads.target_features(self.target, greedy_text(self.target, FIT_WIDTH), LAYERS)

  def fit(self, params, loss_fn, batch):
    """``params`` after Adam steps of ``loss_fn(params, batch)`` (greedy heads)."""
    return _fit(params, loss_fn, batch)

  def refit(self, head, loss_fn):
    """A head fitted on :attr:`features` when greedy, else as it is."""
    return head.replace(params=_fit(head.params, loss_fn, self.features)) if self.greedy else head

  @functools.cached_property
  def small(self):  # draft model: 1 layer, random; greedy: the target perturbed by 15%
    from specjax import testing  # pylint: disable=import-outside-toplevel
    if self.greedy:
      return testing.perturbed(self.target, 0.15, seed=2)
    return testing.tiny_decoder(V, seed=3, weight_scale=1.0, num_layers=1)

  @functools.cached_property
  def sharp(self):  # SpecInfer's small model: a peaked q, so siblings differ a lot
    from specjax import testing  # pylint: disable=import-outside-toplevel
    return self.small if self.greedy else testing.tiny_decoder(V, seed=3, weight_scale=1.6, num_layers=1)

  @functools.cached_property
  def subset_K(self):  # 5 of the 8 ids, without the target's 2nd, 3rd and 5th likeliest first tokens
    import specjax  # pylint: disable=import-outside-toplevel
    p1 = np.asarray(specjax.Sampling(1.0).probs(specjax.logits(self.target, np.array([PROMPTS["A"]]))[0, -1]))
    return jnp.asarray(np.sort(np.argsort(-p1)[[0, 3, 5, 6, 7]]).astype(np.int32))

  @functools.cached_property
  def draft_lm(self):  # a K-wide draft model over subset_K
    from specjax.models import draft_lm  # pylint: disable=import-outside-toplevel
    cfg = draft_lm.DraftLMConfig(vocab_size=V, embed_dim=self.target.config.d_model, out_vocab=5, d_model=32,
                                 num_layers=1, num_heads=2, num_kv_heads=2, head_dim=16, mlp_dim=64)
    return draft_lm.init(cfg, self.target, seed=3)

  @functools.cached_property
  def corpus(self):  # table drafters count it: random tokens; greedy: the target's greedy text
    return greedy_text(self.target, FIT_WIDTH) if self.greedy else np.random.RandomState(0).randint(0, V, 500)


@functools.lru_cache(maxsize=None)
def models(greedy: bool = False) -> Models:
  """The matrix's tiny models (sampled or greedy weights), one set per process."""
  return Models(greedy)


def configs() -> tuple[Config, ...]:
  """Every registered kind's cases (its ``KindSpec.cases``), in registration order."""
  from specjax import drafters  # pylint: disable=import-outside-toplevel
  return tuple(Config(c.name, spec.kind, tuple(c.options), c.build, lossy_sampled=c.lossy_sampled,
                      lenience=c.lenience, adaptive=c.adaptive)
               for spec in drafters.specs() for c in spec.exactness_cases())
