"""The ``medusa`` kind: heads on the target's last hidden state, verified as a tree (:class:`specjax.drafters.Medusa`)."""
from __future__ import annotations

import dataclasses

import jax

from specjax import drafters
from specjax import tree as tree_lib
from specjax.drafters import medusa, vocab, weights
from specjax.models import heads as heads_lib
from specjax.models import store


@dataclasses.dataclass(frozen=True)
class MedusaOptions(drafters.Options):
  gamma: int = 3
  tree: str = "chain3+1x2"      # "mc_sim_7b_63", "chainDEPTH[+DxLEN...]", or "" (dense, from top_k)
  top_k: tuple = (3, 2, 1)
  acceptance: str = "rejection"  # lossless; "typical" is Medusa's lossy rule
  num_heads: int = 0             # untrained heads only; 0: the tree's depth


def tree_paths(options: MedusaOptions):
  """The tree's node paths, from ``tree`` (or dense from ``top_k``)."""
  if options.tree == "mc_sim_7b_63":
    return medusa.MC_SIM_7B_63
  if options.tree.startswith("chain"):
    return tree_lib.parse_chain_paths(options.tree)
  if options.tree:
    raise ValueError(f"medusa tree={options.tree!r}: expected 'mc_sim_7b_63', 'chainDEPTH[+DxLEN...]' or '' "
                     "(a dense tree from top_k)")
  return tree_lib.full_paths(tuple(options.top_k))


def row_tree(values: dict) -> tuple[str, int]:
  """A bench row's tree: its ``tree`` or dense ``top_k``, and its depth."""
  options = MedusaOptions(**values)
  label = options.tree or "top_k=" + ",".join(map(str, options.top_k))
  return label, max(map(len, tree_paths(options)))


def full_vocab_twin(drafter: medusa.Medusa, target) -> medusa.Medusa:
  """The same heads over the target's whole LM head."""
  return medusa.Medusa.create(target, drafter.heads, drafter.paths)


def build(options: MedusaOptions, target) -> medusa.Medusa:
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
  paths = tree_paths(options)
  depth = max(len(p) for p in paths)
  if heads is None:
    heads = medusa.init_heads(None, max(depth, options.num_heads), target.config.d_model)
  weights.check_depth(options.gamma, depth, "the Medusa tree")
  return medusa.Medusa.create(target, heads, paths, acceptance=options.acceptance, subset_K=subset)


def tiny_heads(m):
  """The matrix's heads: random, far from the target; greedy: fitted to the target's greedy text."""
  from specjax.train import medusa as train_medusa  # pylint: disable=import-outside-toplevel
  heads = medusa.init_heads(None, m.gamma, m.target.config.d_model)
  heads["w_KxExE"] = 0.5 * jax.random.normal(jax.random.PRNGKey(1), heads["w_KxExE"].shape) / 6
  if not m.greedy:
    return heads
  return m.fit(heads, train_medusa.medusa_kl_loss(medusa.target_lm_head(m.target), m.gamma),
               {"tokens": m.features["tokens"], "hidden": m.features["hidden"]})


def _case(m, paths, acceptance="rejection", subset=False):
  return medusa.Medusa.create(m.target, m.weights("medusa", tiny_heads), paths=paths, acceptance=acceptance,
                              subset_K=m.subset_K if subset else None)


def cases() -> tuple[drafters.Case, ...]:
  dense = lambda: tree_lib.full_paths((3, 2))  # noqa: E731
  return (
      drafters.Case("medusa/tree=dense3x2/rejection", ("tree", "top_k", "acceptance=rejection"),
                    lambda m: _case(m, dense())),
      drafters.Case("medusa/tree=chain2+1x1/rejection", ("tree", "acceptance=rejection"),
                    lambda m: _case(m, tree_lib.parse_chain_paths("chain2+1x1"))),
      drafters.Case("medusa/tree=dense3x2/typical", ("tree", "acceptance=typical"),
                    lambda m: _case(m, dense(), acceptance="typical"), lossy_sampled=True),
      drafters.Case("medusa/tree=dense3x2/subset", ("tree", "subset_K"), lambda m: _case(m, dense(), subset=True)),
  )



SPEC = drafters.register_kind(drafters.KindSpec(
    kind="medusa", build=build, options=MedusaOptions, label="Medusa heads", cases=cases, train="specjax.train.commands.medusa",
    head=heads_lib.MedusaHeads, head_config=heads_lib.MedusaConfig, row_tree=row_tree, full_vocab_twin=full_vocab_twin,
    demos=(drafters.Demo("medusa", "medusa_demo.py"),),
    rows=(drafters.Row("medusa", "medusa:smollm2/medusa", ("medusa.tree=chain3+1x2",), order=60),
          drafters.Row("medusa_typical", "medusa:smollm2/medusa", ("medusa.tree=chain3+1x2", "medusa.acceptance=typical"),
                       order=61))))
