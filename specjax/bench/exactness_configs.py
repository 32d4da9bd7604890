"""The drafter configurations of the exactness matrix (:mod:`specjax.bench.exactness`), on tiny models.

One tiny target (vocabulary 8, 2 layers, width 32) and, per drafter family, small random weights
far enough from the target that a wrong accept rule shows in a chi-squared test, yet close enough
that every draft depth is accepted in some rounds (so the bonus token after a fully accepted path
is in the tested joint). Weights are leaves of the drafter pytrees: configurations of one family
that differ only in weights share compiled loops.

Every configuration states the registry kind it stands for, the public options it sets, and
whether it must be lossy when sampling (``lossy_sampled``). That expectation is written here from
the rules in docs/design (deterministic top-k siblings, typical acceptance, lenience < 1 and a
selection by the drawn token's own probability are lossy; everything else is exact), so a drafter
whose own ``lossy_reason`` disagrees is reported as mislabeled, not trusted.
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
  adaptive: bool = False       # the loop's adaptive draft length (chains), or node budget (Drafter.tree_budgets)

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
  """One set of weights per drafter family, built on first use. Sampled cells use random ones, far
  from the target (a wrong rule then shows); greedy cells (``greedy=True``) use ones close to it, or
  heads fitted to its greedy text on the matrix's prompts (their first ``FIT_WIDTH`` tokens), so
  drafts are accepted at every depth, and rejected past what was fitted."""

  def __init__(self, greedy: bool):
    self.greedy = greedy
    self.target = target(greedy)

  @functools.cached_property
  def _batch(self):
    from specjax.train import heads as train_heads  # pylint: disable=import-outside-toplevel
    return train_heads.target_features(self.target, greedy_text(self.target, FIT_WIDTH), LAYERS)

  def _refit(self, head, loss_fn):
    return head.replace(params=_fit(head.params, loss_fn, self._batch)) if self.greedy else head

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
  def mtp(self):
    from specjax.models import heads  # pylint: disable=import-outside-toplevel
    from specjax.train import heads as train_heads  # pylint: disable=import-outside-toplevel
    head = heads.init_head(heads.MTPHead(heads.MTPConfig(vocab_size=V, d_model=self.target.config.d_model,
                                                         mlp_dim=64)), 4)
    return self._refit(head, train_heads.mtp_loss(head.module, self.target, depth=GAMMA))

  @functools.cached_property
  def dflash(self):
    from specjax.models import block_drafter, heads  # pylint: disable=import-outside-toplevel
    from specjax.train import heads as train_heads  # pylint: disable=import-outside-toplevel
    head = heads.init_head(block_drafter.BlockDrafter(block_drafter.BlockDrafterConfig(
        vocab_size=V, d_model=self.target.config.d_model, num_layers=1, num_heads=4, num_kv_heads=2, head_dim=8,
        mlp_dim=64, target_layers=LAYERS, block_size=GAMMA + 1)), 5)
    if not self.greedy:
      return head
    width = self._batch["tokens"].shape[1]
    anchors = np.tile(np.arange(1, width - GAMMA, dtype=np.int32)[None], (len(self._batch["tokens"]), 1))
    return head.replace(params=_fit(head.params, train_heads.dflash_loss(head.module, self.target),
                                    dict(self._batch, anchors=anchors)))

  def _eagle(self, seed, lm_scale, k=0):
    from specjax.models import eagle_head, heads  # pylint: disable=import-outside-toplevel
    from specjax.train import eagle as train_eagle  # pylint: disable=import-outside-toplevel
    head = heads.init_head(eagle_head.EagleHead(eagle_head.EagleConfig(
        vocab_size=V, d_model=self.target.config.d_model, num_heads=4, num_kv_heads=2, head_dim=8, mlp_dim=64,
        target_layers=LAYERS, draft_vocab_size=k)), seed)
    head = head.replace(params=dict(head.params, lm_head=head.params["lm_head"] * lm_scale))
    return self._refit(head, train_eagle.eagle_loss(head.module, self.target, depth=GAMMA,
                                                    subset_K=self.subset_K if k else None))

  @functools.cached_property
  def eagle(self):
    return self._eagle(1, 2.0)

  @functools.cached_property
  def eagle_k(self):  # an EAGLE-3 head with a 5-token draft vocabulary (d2t: subset_K)
    return self._eagle(2, 1.0, k=5)

  @functools.cached_property
  def medusa_heads(self):
    from specjax.drafters import medusa  # pylint: disable=import-outside-toplevel
    from specjax.train import medusa as train_medusa  # pylint: disable=import-outside-toplevel
    heads = medusa.init_heads(None, GAMMA, self.target.config.d_model)
    heads["w_KxExE"] = 0.5 * jax.random.normal(jax.random.PRNGKey(1), heads["w_KxExE"].shape) / 6
    if not self.greedy:
      return heads
    return _fit(heads, train_medusa.medusa_kl_loss(medusa.target_lm_head(self.target), GAMMA),
                {"tokens": self._batch["tokens"], "hidden": self._batch["hidden"]})

  @functools.cached_property
  def corpus(self):  # table drafters count it: random tokens; greedy: the target's greedy text
    return greedy_text(self.target, FIT_WIDTH) if self.greedy else np.random.RandomState(0).randint(0, V, 500)


@functools.lru_cache(maxsize=None)
def models(greedy: bool = False) -> Models:
  """The matrix's tiny models (sampled or greedy weights), one set per process."""
  return Models(greedy)


# ----------------------------------------------------------------------------- builders
def _d():
  from specjax import drafters  # pylint: disable=import-outside-toplevel
  return drafters


def _tree():
  from specjax import tree  # pylint: disable=import-outside-toplevel
  return tree


def _specinfer(m, children=(2, 2), siblings="without_replacement", paths=(), subset=False, sharp=True):
  return _d().SpecInfer(m.sharp if sharp else m.small, children=children, siblings=siblings, paths=paths,
                        subset_K=m.subset_K if subset else None)


def _medusa(m, paths, acceptance="rejection", subset=False):
  return _d().Medusa.create(m.target, m.medusa_heads, paths=paths, acceptance=acceptance,
                            subset_K=m.subset_K if subset else None)


def _eagle(m, shape, siblings="without_replacement", score="rank", subset=False):
  head, subset_K = (m.eagle_k, m.subset_K) if subset else (m.eagle, None)
  if shape == "chain":
    return _d().Eagle(head, subset_K, siblings=siblings)
  if shape == "static":
    return _d().Eagle(head, subset_K, paths=tuple(_tree().full_paths((3, 2))), siblings=siblings)
  return _d().Eagle(head, subset_K, dynamic=_d().DynamicTree(GAMMA, 3, 4, score=score))


SIBLINGS = ("iid", "without_replacement", "topk", "topk_lossy")
LOSSY_SIBLINGS = ("topk", "topk_lossy")  # deterministic top-k drafts are exact only when greedy


def configs() -> tuple[Config, ...]:
  """Every public drafter kind and option the matrix covers."""
  c = [
      Config("draft_model", "draft_model", (), lambda m: _d().DraftModel(m.small)),
      Config("draft_model/subset", "draft_model", ("subset_K",), lambda m: _d().DraftModel(m.draft_lm, m.subset_K)),
      Config("draft_model/lenience=0.5", "draft_model", ("lenience",), lambda m: _d().DraftModel(m.small),
             lossy_sampled=True, lenience=0.5),
      Config("draft_model/adaptive", "draft_model", ("adaptive",), lambda m: _d().DraftModel(m.small),
             adaptive=True),
      Config("ngram/n=2", "ngram", ("n",), lambda m: _d().NGram(2)),
      Config("ngram/n=2,periodic=False", "ngram", ("n", "periodic"), lambda m: _d().NGram(2, periodic=False)),
      Config("ngram/n=3,min_match=2/adaptive", "ngram", ("n", "min_match", "adaptive"),
             lambda m: _d().NGram(3, 2), adaptive=True),
      Config("table/order=2", "table", ("order",), lambda m: _d().TableDrafter.from_corpus(m.corpus, V, order=2)),
      Config("table/order=1", "table", ("order",), lambda m: _d().TableDrafter.from_corpus(m.corpus, V, order=1)),
      Config("table/order=2/subset", "table", ("order", "subset_K"),
             lambda m: _d().TableDrafter.from_corpus(m.corpus, V, order=2, subset_K=np.asarray(m.subset_K))),
  ]
  for s in SIBLINGS:
    c.append(Config(f"specinfer/children=2x2/siblings={s}", "specinfer", ("children", f"siblings={s}"),
                    functools.partial(_specinfer, siblings=s), lossy_sampled=s in LOSSY_SIBLINGS))
  c += [
      Config("specinfer/chain/siblings=iid", "specinfer", ("children", "siblings=iid"),
             functools.partial(_specinfer, children=(1, 1), siblings="iid", sharp=False)),
      Config("specinfer/paths=chain2+1x1", "specinfer", ("paths", "siblings=without_replacement"),
             lambda m: _specinfer(m, paths=tuple(map(tuple, _tree().parse_chain_paths("chain2+1x1"))))),
      Config("specinfer/children=2x2/subset", "specinfer", ("children", "subset_K"),
             functools.partial(_specinfer, subset=True)),
      Config("medusa/tree=dense3x2/rejection", "medusa", ("tree", "top_k", "acceptance=rejection"),
             lambda m: _medusa(m, _tree().full_paths((3, 2)))),
      Config("medusa/tree=chain2+1x1/rejection", "medusa", ("tree", "acceptance=rejection"),
             lambda m: _medusa(m, _tree().parse_chain_paths("chain2+1x1"))),
      Config("medusa/tree=dense3x2/typical", "medusa", ("tree", "acceptance=typical"),
             lambda m: _medusa(m, _tree().full_paths((3, 2)), acceptance="typical"), lossy_sampled=True),
      Config("medusa/tree=dense3x2/subset", "medusa", ("tree", "subset_K"),
             lambda m: _medusa(m, _tree().full_paths((3, 2)), subset=True)),
      Config("mtp", "mtp", (), lambda m: _d().MTP(m.mtp)),
      Config("mtp/subset", "mtp", ("subset_K",), lambda m: _d().MTP(m.mtp, m.subset_K)),
      Config("mtp/adaptive", "mtp", ("adaptive",), lambda m: _d().MTP(m.mtp), adaptive=True),
      Config("dflash", "dflash", (), lambda m: _d().DFlash(m.dflash)),
      Config("dflash/subset", "dflash", ("subset_K",), lambda m: _d().DFlash(m.dflash, m.subset_K)),
      Config("dflash/adaptive", "dflash", ("adaptive",), lambda m: _d().DFlash(m.dflash), adaptive=True),
  ]
  for shape in ("chain", "static"):
    for s in SIBLINGS:
      c.append(Config(f"eagle/{shape}/siblings={s}", "eagle",
                      (f"tree={shape}", f"siblings={s}") + (("paths",) if shape == "static" else ()),
                      functools.partial(_eagle, shape=shape, siblings=s), lossy_sampled=s in LOSSY_SIBLINGS))
  for score in ("rank", "drawn"):
    c.append(Config(f"eagle/dynamic/score={score}", "eagle", ("tree=dynamic", "top_k", "total_tokens", f"score={score}"),
                    functools.partial(_eagle, shape="dynamic", score=score), lossy_sampled=score == "drawn"))
  c += [
      Config("eagle/dynamic/subset", "eagle", ("tree=dynamic", "subset_K"),
             functools.partial(_eagle, shape="dynamic", subset=True)),
      Config("eagle/chain/subset", "eagle", ("tree=chain", "subset_K"),
             functools.partial(_eagle, shape="chain", subset=True)),
      Config("eagle/chain/adaptive", "eagle", ("tree=chain", "adaptive"), functools.partial(_eagle, shape="chain"),
             adaptive=True),
  ]
  c += recycling_configs()
  c += _suffix_configs()
  return tuple(c)


# Token Recycling: a depth-2 template with two distinct siblings at the root and at its first child
RECYCLING_PATHS = ((0,), (1,), (0, 0), (1, 0), (0, 1))


def recycling_configs() -> list[Config]:
  """The successor table starts as ids 0..k-1 in every row and learns inside each cell's loop (shared
  by every row); with ``adaptive`` each round verifies the first 0, 2 or all 5 nodes."""
  make = lambda k, budgets: lambda m: _d().Recycling.create(V, k, RECYCLING_PATHS, budgets)
  return [
      Config("recycling/k=3", "recycling", ("k", "paths"), make(3, ())),
      Config("recycling/k=2,budgets=0,2,5/adaptive", "recycling", ("k", "paths", "budgets", "adaptive"),
             make(2, (0, 2, 5)), adaptive=True),
  ]


@functools.lru_cache(maxsize=None)
def sampled_text(draws: int = 6, width: int = 6):
  """The sampled cells' target's own text: ``draws`` continuations of every matrix prompt at T = 1,
  so that suffix drafts are accepted at every depth (drafts from random text rarely are)."""
  import specjax  # pylint: disable=import-outside-toplevel
  rows = [PROMPTS[n] for n in sorted(PROMPTS)] * draws
  prompts = np.zeros((len(rows), max(map(len, rows))), np.int32)
  for i, r in enumerate(rows):
    prompts[i, :len(r)] = r
  out = specjax.generate(target(False), prompts, np.array([len(r) for r in rows], np.int32), max_new_tokens=width,
                         sampling=specjax.Sampling(1.0), rng=jax.random.PRNGKey(7))
  return tuple(tuple(r) + tuple(int(x) for x in c) for r, c in zip(rows, np.asarray(out.tokens)))


def _pool(m, capacity=256):
  """A suffix pool of the target's own text (greedy cells: its greedy text; sampled: T = 1 draws)."""
  from specjax.drafters import suffix  # pylint: disable=import-outside-toplevel
  return suffix.pool_from_corpus(capacity, list(m.corpus) if m.greedy else sampled_text())


def _suffix(m, scope="run", **settings):
  from specjax.drafters import suffix  # pylint: disable=import-outside-toplevel
  settings = dict(dict(max_n=4, factor=2.0, min_prob=0.0), **settings)  # factor 2: a 1-token match drafts 2
  return suffix.Suffix(_pool(m) if scope == "run" else None, scope=scope, **settings)


def _from_file(m, kind="suffix", **options):
  """Through the registry: the pool saved with the target's fingerprint, then loaded by ``pool_file``."""
  import tempfile  # pylint: disable=import-outside-toplevel
  from specjax.drafters import suffix  # pylint: disable=import-outside-toplevel
  with tempfile.TemporaryDirectory() as tmp:
    path = suffix.save_pool(f"{tmp}/pool.npz", _d().build(kind, dict(options, capacity=256), m.target).with_memory(
        _pool(m)), suffix.hashes(m.target))
    return _d().build(kind, dict(options, pool_file=str(path), capacity=256, max_n=3, factor=2.0, min_prob=0.0),
                      m.target)


def _hybrid(m, fallback, scope="run"):
  from specjax.drafters import suffix  # pylint: disable=import-outside-toplevel
  fb = _d().DraftModel(m.small) if fallback == "draft_model" else _d().NGram(2)
  return suffix.Hybrid(_suffix(m, scope), fb, min_suffix_match=2)


def _suffix_configs():
  settings = ("max_n", "factor", "min_prob")
  return [
      Config("suffix/scope=row", "suffix", ("scope=row", "min_match") + settings,
             lambda m: _suffix(m, "row", max_n=3, min_match=1)),
      Config("suffix/scope=batch/adaptive", "suffix", ("scope=batch", "adaptive") + settings,
             lambda m: _suffix(m, "batch", max_n=3), adaptive=True),
      Config("suffix/scope=run,corpus", "suffix", ("scope=run", "capacity", "corpus", "top") + settings,
             lambda m: _suffix(m, top=8)),
      Config("suffix/pool_file", "suffix", ("scope=run", "pool_file", "top") + settings,
             lambda m: _from_file(m, top=4)),
      Config("hybrid/fallback=draft_model", "hybrid",
             ("fallback=draft_model", "min_suffix_match", "scope=run", "capacity", "corpus") + settings,
             lambda m: _hybrid(m, "draft_model")),
      Config("hybrid/fallback=draft_model/adaptive", "hybrid", ("fallback=draft_model", "adaptive", "min_suffix_match"),
             lambda m: _hybrid(m, "draft_model"), adaptive=True),
      Config("hybrid/fallback=ngram,pool_file", "hybrid",
             ("fallback=ngram", "scope=run", "min_match", "top", "pool_file", "min_suffix_match") + settings,
             lambda m: _from_file(m, "hybrid", fallback="ngram", min_match=1, top=4, min_suffix_match=2)),
  ]
