"""The ``dflash`` kind: a block drafter that proposes a whole block in one pass (:class:`specjax.drafters.DFlash`)."""
from __future__ import annotations

import numpy as np

from specjax import drafters
from specjax.drafters import weights
from specjax.drafters.dflash import DFlash
from specjax.kinds.mtp import HeadOptions, head_cases, without_subset
from specjax.models import block_drafter
from specjax.models import heads as heads_lib


def build(options: HeadOptions, target) -> DFlash:
  tc = target.config
  module_fn = lambda: block_drafter.BlockDrafter(block_drafter.BlockDrafterConfig(  # noqa: E731
      vocab_size=tc.vocab_size, d_model=tc.d_model, num_heads=tc.num_heads, num_kv_heads=tc.num_kv_heads,
      head_dim=tc.head_dim, mlp_dim=2 * tc.d_model, target_layers=block_drafter.spaced_layers(tc.num_layers, 3),
      block_size=options.gamma + 1))
  drafter = DFlash(heads_lib.load_or_init(options.checkpoint, module_fn, options.seed + 1, "DFlash drafter"),
                   weights.subset_beside(options.checkpoint))
  if options.gamma != drafter.block_size - 1:
    print(f"NOTE: DFlash trained with block size {drafter.block_size} (gamma {drafter.block_size - 1}) runs "
          f"at gamma {options.gamma}: exact, but expect lower acceptance")
  return drafter


def row_values(values: dict, data) -> dict:
  """A bench row's gamma, unless given: its trained block size less one."""
  del data
  if "gamma" not in values:
    from specjax.models import store  # pylint: disable=import-outside-toplevel
    values = {**values, "gamma": store.read_meta(values["checkpoint"])["config"]["block_size"] - 1}
  return values


def tiny_head(m):
  from specjax.train import heads as train_heads  # pylint: disable=import-outside-toplevel
  head = heads_lib.init_head(block_drafter.BlockDrafter(block_drafter.BlockDrafterConfig(
      vocab_size=m.target.vocab_size, d_model=m.target.config.d_model, num_layers=1, num_heads=4, num_kv_heads=2,
      head_dim=8, mlp_dim=64, target_layers=m.layers, block_size=m.gamma + 1)), 5)
  if not m.greedy:
    return head
  batch = m.features
  width = batch["tokens"].shape[1]
  anchors = np.tile(np.arange(1, width - m.gamma, dtype=np.int32)[None], (len(batch["tokens"]), 1))
  return head.replace(params=m.fit(head.params, train_heads.dflash_loss(head.module, m.target),
                                   dict(batch, anchors=anchors)))


def cases() -> tuple[drafters.Case, ...]:
  return head_cases("dflash", DFlash, tiny_head)



SPEC = drafters.register_kind(drafters.KindSpec(
    kind="dflash", build=build, options=HeadOptions, cases=cases, train="specjax.train.commands.dflash",
    head=block_drafter.BlockDrafter, head_config=block_drafter.BlockDrafterConfig,
    demos=(drafters.Demo("dflash", "dflash_demo.py"),),
    row_values=row_values, full_vocab_twin=without_subset,
    rows=(drafters.Row("dflash", "dflash:runs/smollm2_dflash/head", order=70),)))
