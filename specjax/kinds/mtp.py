"""The ``mtp`` kind: a multi-token-prediction head unrolled as a chain (:class:`specjax.drafters.MTP`)."""
from __future__ import annotations

import dataclasses

from specjax import drafters
from specjax.drafters import weights
from specjax.drafters.mtp import MTP
from specjax.models import heads as heads_lib


@dataclasses.dataclass(frozen=True)
class HeadOptions(drafters.Options):
  """MTP / DFlash: a trained head (``checkpoint``) and the truncated vocabulary beside it, if any."""


def build(options: HeadOptions, target) -> MTP:
  tc = target.config
  module_fn = lambda: heads_lib.MTPHead(heads_lib.MTPConfig(vocab_size=tc.vocab_size, d_model=tc.d_model,  # noqa: E731
                                                            mlp_dim=2 * tc.d_model))
  head = heads_lib.load_or_init(options.checkpoint, module_fn, options.seed + 1, "MTP head")
  return MTP(head, weights.subset_beside(options.checkpoint))


def without_subset(drafter, target):
  """The same head over the target's whole vocabulary (MTP, DFlash)."""
  del target
  return drafter.replace(subset_K=None)


def tiny_head(m):
  from specjax.train import heads as train_heads  # pylint: disable=import-outside-toplevel
  head = heads_lib.init_head(heads_lib.MTPHead(heads_lib.MTPConfig(vocab_size=m.target.vocab_size,
                                                                   d_model=m.target.config.d_model, mlp_dim=64)), 4)
  return m.refit(head, train_heads.mtp_loss(head.module, m.target, depth=m.gamma))


def head_cases(kind: str, drafter_cls, make_head) -> tuple[drafters.Case, ...]:
  """A head drafter's cells (``drafter_cls(head, subset_K)``): full vocabulary, truncated, adaptive."""
  head = lambda m: m.weights(kind, make_head)  # noqa: E731
  return (
      drafters.Case(kind, (), lambda m: drafter_cls(head(m))),
      drafters.Case(f"{kind}/subset", ("subset_K",), lambda m: drafter_cls(head(m), m.subset_K)),
      drafters.Case(f"{kind}/adaptive", ("adaptive",), lambda m: drafter_cls(head(m)), adaptive=True),
  )


def cases() -> tuple[drafters.Case, ...]:
  return head_cases("mtp", MTP, tiny_head)



SPEC = drafters.register_kind(drafters.KindSpec(
    kind="mtp", build=build, options=HeadOptions, label="MTP head", cases=cases,
    head=heads_lib.MTPHead, head_config=heads_lib.MTPConfig, train="specjax.train.commands.mtp",
    full_vocab_twin=without_subset,
    demos=(drafters.Demo("mtp", "mtp_demo.py"),),
    rows=(drafters.Row("mtp", "mtp:smollm2/mtp", ("mtp.gamma=3",), order=50),)))
