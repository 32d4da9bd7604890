"""The drafter kinds specjax ships: each one's options (defaults in one place) and how it is built.

``register_builtin()`` adds them to :mod:`specjax.drafters.registry`; ``specjax.drafters`` calls it
once. A kind's ``checkpoint`` is a folder or a name under ``specjax/assets`` (trained heads, a
``draft_lm`` bundle), or, for ``draft_model``/``specinfer``, anything ``specjax.load_pretrained``
takes (a registered name, a .gguf file, an HF folder).
"""
from __future__ import annotations

import dataclasses

import jax.numpy as jnp

from specjax import tree as tree_lib
from specjax.drafters import vocab
from specjax.drafters.registry import register
from specjax.drafters.spec import Options
from specjax.models import heads as heads_lib
from specjax.models import store


@dataclasses.dataclass(frozen=True)
class DraftModelOptions(Options):
  """A separate small model (``checkpoint``, required)."""


@dataclasses.dataclass(frozen=True)
class TableOptions(Options):
  order: int = 2  # 1: unigram, 2: bigram (counted from the stdlib train split)


@dataclasses.dataclass(frozen=True)
class SpecInferOptions(Options):
  children: tuple = (1, 1, 3, 1, 1, 1, 1, 1)  # per depth; ignored when ``paths`` is set
  paths: str = ""                             # "chainDEPTH[+DxLEN...]" (tree.parse_chain_paths)
  siblings: str = "without_replacement"       # iid | without_replacement | topk (greedy) | topk_lossy


@dataclasses.dataclass(frozen=True)
class MedusaOptions(Options):
  gamma: int = 3
  tree: str = "chain3+1x2"      # "mc_sim_7b_63", "chainDEPTH[+DxLEN...]", or "" (dense, from top_k)
  top_k: tuple = (3, 2, 1)
  acceptance: str = "rejection"  # lossless; "typical" is Medusa's lossy rule
  num_heads: int = 0             # untrained heads only; 0: the tree's depth


@dataclasses.dataclass(frozen=True)
class HeadOptions(Options):
  """MTP / DFlash: a trained head (``checkpoint``) and the truncated vocabulary beside it, if any."""


@dataclasses.dataclass(frozen=True)
class EagleOptions(Options):
  tree: str = "chain"            # chain | static | dynamic
  paths: str = ""                # static: "chainDEPTH[+DxLEN...]" (default: chain plus early branches)
  siblings: str = "without_replacement"
  top_k: int = 4                 # dynamic
  total_tokens: int = 16         # dynamic


def _small_model(options, target):
  """``(model, subset_K)``: a draft_lm bundle over the target's embedding, or any loadable model."""
  from specjax import loading  # pylint: disable=import-outside-toplevel
  from specjax.models import draft_lm  # pylint: disable=import-outside-toplevel
  if not options.checkpoint:
    raise ValueError("this drafter kind needs drafter.checkpoint: a small model sharing the target's tokenizer "
                     "(a registered name, a .gguf file, an HF folder or a specjax bundle)")
  folder = draft_lm.resolve(options.checkpoint)
  if folder is not None:
    model, subset_K = draft_lm.load(folder, target)
    return model, jnp.asarray(subset_K, jnp.int32)
  return loading.load_pretrained(options.checkpoint)[0], None


def build_draft_model(options, target):
  from specjax.drafters.draft_model import DraftModel  # pylint: disable=import-outside-toplevel
  model, subset_K = _small_model(options, target)
  return DraftModel(model, subset_K)


def build_table(options, target):
  from specjax.data import code_corpus  # pylint: disable=import-outside-toplevel
  from specjax.drafters.table import TableDrafter  # pylint: disable=import-outside-toplevel
  return TableDrafter.from_corpus(code_corpus.load_split("train"), target.vocab_size, order=options.order)


def build_specinfer(options, target):
  from specjax.drafters.specinfer import SpecInfer  # pylint: disable=import-outside-toplevel
  model, subset_K = _small_model(options, target)
  paths = tuple(map(tuple, tree_lib.parse_chain_paths(options.paths))) if options.paths else ()
  drafter = SpecInfer(model, tuple(options.children), options.siblings, paths, subset_K)
  _check_depth(options.gamma, drafter.tree.max_depth, "the SpecInfer token tree")
  return drafter


def build_medusa(options, target):
  from specjax.drafters import medusa  # pylint: disable=import-outside-toplevel
  folder = heads_lib.resolve(options.checkpoint)
  trained = folder is not None and ((folder / store.CONFIG_FILE).is_file() or (folder / "heads.npz").is_file())
  heads = medusa.load_heads(folder) if trained else None
  subset = vocab.load_subset(folder) if heads is not None else None
  if heads is not None and heads["w_KxExE"].shape[1] != target.config.d_model:
    print(f"NOTE: Medusa heads at {folder} do not fit this target (d_model {heads['w_KxExE'].shape[1]} vs "
          f"{target.config.d_model}); using untrained heads.")
    heads, subset = None, None
  elif heads is None:
    print(f"NOTE: no Medusa heads at {options.checkpoint!r}; using untrained heads (exact, rarely accepted).")
  if options.tree == "mc_sim_7b_63":
    paths = medusa.MC_SIM_7B_63
  elif options.tree.startswith("chain"):
    paths = tree_lib.parse_chain_paths(options.tree)
  elif options.tree:
    raise ValueError(f"medusa tree={options.tree!r}: expected 'mc_sim_7b_63', 'chainDEPTH[+DxLEN...]' or '' "
                     "(a dense tree from top_k)")
  else:
    paths = tree_lib.full_paths(tuple(options.top_k))
  depth = max(len(p) for p in paths)
  if heads is None:
    heads = medusa.init_heads(None, max(depth, options.num_heads), target.config.d_model)
  _check_depth(options.gamma, depth, "the Medusa tree")
  return medusa.Medusa.create(target, heads, paths, acceptance=options.acceptance, subset_K=subset)


def build_mtp(options, target):
  from specjax.drafters.mtp import MTP  # pylint: disable=import-outside-toplevel
  tc = target.config
  module_fn = lambda: heads_lib.MTPHead(heads_lib.MTPConfig(vocab_size=tc.vocab_size, d_model=tc.d_model,
                                                            mlp_dim=2 * tc.d_model))
  head = heads_lib.load_or_init(options.checkpoint, module_fn, options.seed + 1, "MTP head")
  return MTP(head, _subset_beside(options.checkpoint))


def build_dflash(options, target):
  from specjax.drafters.dflash import DFlash  # pylint: disable=import-outside-toplevel
  from specjax.models import block_drafter  # pylint: disable=import-outside-toplevel
  tc = target.config
  module_fn = lambda: block_drafter.BlockDrafter(block_drafter.BlockDrafterConfig(
      vocab_size=tc.vocab_size, d_model=tc.d_model, num_heads=tc.num_heads, num_kv_heads=tc.num_kv_heads,
      head_dim=tc.head_dim, mlp_dim=2 * tc.d_model, target_layers=block_drafter.spaced_layers(tc.num_layers, 3),
      block_size=options.gamma + 1))
  drafter = DFlash(heads_lib.load_or_init(options.checkpoint, module_fn, options.seed + 1, "DFlash drafter"),
                   _subset_beside(options.checkpoint))
  if options.gamma != drafter.block_size - 1:
    print(f"NOTE: DFlash trained with block size {drafter.block_size} (gamma {drafter.block_size - 1}) runs "
          f"at gamma {options.gamma}: exact, but expect lower acceptance")
  return drafter


def build_eagle(options, target):
  from specjax.drafters import eagle  # pylint: disable=import-outside-toplevel
  from specjax.models import eagle_head  # pylint: disable=import-outside-toplevel
  tc = target.config
  module_fn = lambda: eagle_head.EagleHead(eagle_head.EagleConfig(
      vocab_size=tc.vocab_size, d_model=tc.d_model, num_heads=tc.num_heads, num_kv_heads=tc.num_kv_heads,
      head_dim=tc.head_dim, mlp_dim=2 * tc.d_model, target_layers=eagle_head.eagle3_layers(tc.num_layers)))
  head = heads_lib.load_or_init(options.checkpoint, module_fn, options.seed + 1, "EAGLE head")
  subset = _subset_beside(options.checkpoint) if head.config.draft_vocab_size else None
  if head.config.draft_vocab_size and subset is None:
    raise ValueError(f"{options.checkpoint}: a truncated EAGLE head needs its d2t map {store.SUBSET_FILE} beside it")
  gamma = options.gamma
  if options.tree == "chain":
    return eagle.Eagle(head, subset, siblings=options.siblings)
  if options.tree == "static":
    paths = tree_lib.parse_chain_paths(options.paths or eagle.default_static_paths(gamma))
    drafter = eagle.Eagle(head, subset, paths=tuple(map(tuple, paths)), siblings=options.siblings)
    _check_depth(gamma, drafter.tree.max_depth, "the static EAGLE tree")
    return drafter
  if options.tree == "dynamic":
    return eagle.Eagle(head, subset, dynamic=eagle.DynamicTree(gamma, options.top_k, options.total_tokens))
  raise ValueError(f"unknown eagle tree {options.tree!r}; expected 'chain', 'static' or 'dynamic'")


def _subset_beside(checkpoint):
  folder = heads_lib.resolve(checkpoint)
  return None if folder is None else vocab.load_subset(folder)


def _check_depth(gamma: int, depth: int, what: str) -> None:
  if gamma != depth:
    raise ValueError(f"drafter gamma={gamma} must equal the depth of {what} ({depth}); set drafter.gamma={depth}")


def register_builtin() -> None:
  for kind, build, options in (("draft_model", build_draft_model, DraftModelOptions),
                               ("table", build_table, TableOptions),
                               ("specinfer", build_specinfer, SpecInferOptions),
                               ("medusa", build_medusa, MedusaOptions),
                               ("mtp", build_mtp, HeadOptions),
                               ("dflash", build_dflash, HeadOptions),
                               ("eagle", build_eagle, EagleOptions)):
    register(kind, build, options)
