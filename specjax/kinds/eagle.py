"""The ``eagle`` kind: an EAGLE-3 head, as a chain, a static tree or an EAGLE-2 dynamic tree (:class:`specjax.drafters.Eagle`)."""
from __future__ import annotations

import dataclasses
import functools

from specjax import drafters
from specjax import tree as tree_lib
from specjax.drafters import eagle, weights
from specjax.models import eagle_head
from specjax.models import heads as heads_lib
from specjax.models import store

LOSSY_SIBLINGS = ("topk", "topk_lossy")  # top-k drafts tested against the softmax q: exact only when greedy


@dataclasses.dataclass(frozen=True)
class EagleOptions(drafters.Options):
  tree: str = "chain"            # chain | static | dynamic
  paths: str = ""                # static: "chainDEPTH[+DxLEN...]" (default: chain plus early branches)
  siblings: str = "without_replacement"
  top_k: int = 4                 # dynamic
  total_tokens: int = 16         # dynamic


def build(options: EagleOptions, target) -> eagle.Eagle:
  tc = target.config
  module_fn = lambda: eagle_head.EagleHead(eagle_head.EagleConfig(  # noqa: E731
      vocab_size=tc.vocab_size, d_model=tc.d_model, num_heads=tc.num_heads, num_kv_heads=tc.num_kv_heads,
      head_dim=tc.head_dim, mlp_dim=2 * tc.d_model, target_layers=eagle_head.eagle3_layers(tc.num_layers)))
  head = heads_lib.load_or_init(options.checkpoint, module_fn, options.seed + 1, "EAGLE head")
  subset = weights.subset_beside(options.checkpoint) if head.config.draft_vocab_size else None
  if head.config.draft_vocab_size and subset is None:
    raise ValueError(f"{options.checkpoint}: a truncated EAGLE head needs its d2t map {store.SUBSET_FILE} beside it")
  gamma = options.gamma
  if options.tree == "chain":
    return eagle.Eagle(head, subset, siblings=options.siblings)
  if options.tree == "static":
    paths = tree_lib.parse_chain_paths(options.paths or eagle.default_static_paths(gamma))
    drafter = eagle.Eagle(head, subset, paths=tuple(map(tuple, paths)), siblings=options.siblings)
    weights.check_depth(gamma, drafter.tree.max_depth, "the static EAGLE tree")
    return drafter
  if options.tree == "dynamic":
    return eagle.Eagle(head, subset, dynamic=eagle.DynamicTree(gamma, options.top_k, options.total_tokens))
  raise ValueError(f"unknown eagle tree {options.tree!r}; expected 'chain', 'static' or 'dynamic'")


def tiny_head(m, seed, lm_scale, k=0):
  """An EAGLE-3 head on the matrix's target (``k``: a k-token draft vocabulary, d2t ``m.subset_K``)."""
  from specjax.train import eagle as train_eagle  # pylint: disable=import-outside-toplevel
  head = heads_lib.init_head(eagle_head.EagleHead(eagle_head.EagleConfig(
      vocab_size=m.target.vocab_size, d_model=m.target.config.d_model, num_heads=4, num_kv_heads=2, head_dim=8,
      mlp_dim=64, target_layers=m.layers, draft_vocab_size=k)), seed)
  head = head.replace(params=dict(head.params, lm_head=head.params["lm_head"] * lm_scale))
  return m.refit(head, train_eagle.eagle_loss(head.module, m.target, depth=m.gamma,
                                              subset_K=m.subset_K if k else None))


def _case(m, shape, siblings="without_replacement", score="rank", subset=False):
  if subset:  # a head with a 5-token draft vocabulary
    head, subset_K = m.weights("eagle_k", functools.partial(tiny_head, seed=2, lm_scale=1.0, k=5)), m.subset_K
  else:
    head, subset_K = m.weights("eagle", functools.partial(tiny_head, seed=1, lm_scale=2.0)), None
  if shape == "chain":
    return eagle.Eagle(head, subset_K, siblings=siblings)
  if shape == "static":
    return eagle.Eagle(head, subset_K, paths=tuple(tree_lib.full_paths((3, 2))), siblings=siblings)
  return eagle.Eagle(head, subset_K, dynamic=eagle.DynamicTree(m.gamma, 3, 4, score=score))


def cases() -> tuple[drafters.Case, ...]:
  c = []
  for shape in ("chain", "static"):
    for s in tree_lib.SIBLINGS:
      c.append(drafters.Case(f"eagle/{shape}/siblings={s}",
                             (f"tree={shape}", f"siblings={s}") + (("paths",) if shape == "static" else ()),
                             functools.partial(_case, shape=shape, siblings=s), lossy_sampled=s in LOSSY_SIBLINGS))
  for score in ("rank", "drawn"):
    c.append(drafters.Case(f"eagle/dynamic/score={score}", ("tree=dynamic", "top_k", "total_tokens", f"score={score}"),
                           functools.partial(_case, shape="dynamic", score=score), lossy_sampled=score == "drawn"))
  return tuple(c) + (
      drafters.Case("eagle/dynamic/subset", ("tree=dynamic", "subset_K"),
                    functools.partial(_case, shape="dynamic", subset=True)),
      drafters.Case("eagle/chain/subset", ("tree=chain", "subset_K"), functools.partial(_case, shape="chain", subset=True)),
      drafters.Case("eagle/chain/adaptive", ("tree=chain", "adaptive"), functools.partial(_case, shape="chain"),
                    adaptive=True),
  )



def full_vocab_twin(drafter, target):
  """The head's architecture over the whole vocabulary (random: a cost, not a draft)."""
  del target
  module = drafter.head.module
  twin = heads_lib.init_head(type(module)(dataclasses.replace(module.cfg, draft_vocab_size=0)), 0)
  return drafter.replace(head=twin, subset_K=None)


SPEC = drafters.register_kind(drafters.KindSpec(
    kind="eagle", build=build, options=EagleOptions, cases=cases, train="specjax.train.commands.eagle",
    head=eagle_head.EagleHead, head_config=eagle_head.EagleConfig, full_vocab_twin=full_vocab_twin,
    demos=(drafters.Demo("eagle", "eagle_demo.py"), drafters.Demo("eagle_static", "eagle_demo.py", {"drafter.tree": "static"}),
           drafters.Demo("eagle_dynamic", "eagle_demo.py", {"drafter.tree": "dynamic"})),
    rows=(drafters.Row("eagle", "eagle:smollm2/eagle", ("eagle.tree=chain", "eagle.gamma=4"), order=80),
          drafters.Row("eagle_dynamic", "eagle:smollm2/eagle",
                       ("eagle.tree=dynamic", "eagle.gamma=4", "eagle.top_k=4", "eagle.total_tokens=8"), order=81))))
