"""The rows of ``bench families --target``: command-line drafters, each a named row of one registered kind.

A ``--drafters`` item is ``[NAME=]BASE[:CHECKPOINT]``. ``BASE`` is a row of :func:`row_table` (the
drafters trained for SmolLM2-135M, each declared by its kind as a :class:`specjax.drafters.Row` of
the ``KIND[:CHECKPOINT]`` and ``KIND.OPTION=VALUE`` strings it stands for) or any registered kind
(at the kind's defaults).
``NAME`` (default: ``BASE``) names the row in real.json; ``CHECKPOINT`` replaces the base's.
A ``--drafter_option=OWNER.OPTION=VALUE`` applies to every row whose kind or name is ``OWNER``
(the row's own name last, so it wins); one that no row takes is an error. Every row is built by
:func:`specjax.drafters.build`.
"""
from __future__ import annotations

import dataclasses

from specjax.bench import common


def declared_rows() -> list:
  """Every registered kind's named rows (``KindSpec.rows``, :class:`specjax.drafters.Row`) by their order."""
  from specjax import drafters  # pylint: disable=import-outside-toplevel
  declared = sorted((row for spec in drafters.specs() for row in spec.rows), key=lambda row: row.order)
  names = [row.name for row in declared]
  for row in declared:
    if names.count(row.name) > 1 or (row.name in drafters.kinds() and row.name != row.drafter.partition(":")[0]):
      raise ValueError(f"drafter row {row.name!r} is declared twice or names another drafter kind; rename one")
  return declared


def row_table() -> dict:
  """row -> (KIND[:CHECKPOINT], KIND.OPTION=VALUE strings), as typed on the command line: :func:`declared_rows`."""
  return {row.name: (row.drafter, tuple(row.options)) for row in declared_rows()}


def default_drafters() -> tuple[str, ...]:
  """The rows measured when ``--drafters`` is not given (``Row.default``)."""
  return tuple(row.name for row in declared_rows() if row.default)


@dataclasses.dataclass(frozen=True)
class Row:
  """One measured drafter: its row name, kind and option values (``specjax.drafters.parse_drafter``'s)."""
  name: str
  kind: str
  values: dict


def split_item(item: str) -> tuple[str, str, str]:
  """``[NAME=]BASE[:CHECKPOINT]`` -> (name, base, checkpoint)."""
  name, eq, rest = item.partition("=")
  base, _, checkpoint = (rest if eq else item).partition(":")
  name = name if eq else base
  if not name.isidentifier() or not base:
    raise common.UsageError(f"--drafters: {item!r} must read [NAME=]ROW_OR_KIND[:CHECKPOINT]")
  return name, base, checkpoint


def option_owner(text: str) -> tuple[str, str]:
  """``OWNER.OPTION=VALUE`` -> (owner, ``OPTION=VALUE``)."""
  head, eq, _ = text.partition("=")
  owner, dot, key = head.partition(".")
  if not (eq and dot and owner and key):
    raise common.UsageError(f"--drafter_option={text}: must read KIND.OPTION=VALUE (or ROW.OPTION=VALUE)")
  return owner, text[len(owner) + 1:]


def parse_rows(items, option_texts) -> list[Row]:
  """The rows of ``--drafters`` items with ``--drafter_option`` strings; every string must reach a row."""
  import specjax  # pylint: disable=import-outside-toplevel
  kinds = specjax.drafters.kinds()
  named = row_table()
  owned = [option_owner(t) for t in option_texts]
  rows, used = [], set()
  for item in items:
    name, base, checkpoint = split_item(item)
    spec, defaults = named.get(base, (base, ()))
    kind = spec.partition(":")[0]
    if base not in named and base not in kinds:
      raise common.UsageError(f"--drafters: {base!r} is neither a row ({', '.join(named)}) nor a drafter kind "
                              f"({', '.join(kinds)})")
    if name != kind and name in kinds:
      raise common.UsageError(f"--drafters: row name {name!r} is another drafter kind; give the {kind} row another name")
    if name in (r.name for r in rows):
      raise common.UsageError(f"--drafters: two rows named {name!r}; name one NAME={item}")
    mine = [i for i, (owner, _) in enumerate(owned) if owner == kind] + \
           [i for i, (owner, _) in enumerate(owned) if owner == name and name != kind]
    used.update(mine)
    # the base's checkpoint as an option, so that KIND.checkpoint=... overrides it; :CHECKPOINT wins over both
    base_checkpoint = spec.partition(":")[2]
    texts = [f"{kind}.checkpoint={base_checkpoint}"] * bool(base_checkpoint) + list(defaults)
    texts += [f"{kind}.{owned[i][1]}" for i in mine]
    try:
      kind, values = specjax.drafters.parse_drafter(f"{kind}:{checkpoint}" if checkpoint else kind, texts)
    except ValueError as e:
      raise common.UsageError(f"--drafters {name}: {e}") from e
    rows.append(Row(name, kind, values))
  unused = [option_texts[i] for i in range(len(owned)) if i not in used]
  if unused:
    raise common.UsageError(f"--drafter_option={unused[0]}: no row of --drafters is of that kind or name "
                            f"(rows: {', '.join(f'{r.name} ({r.kind})' for r in rows)})")
  return rows


def order_key(rows: list[Row]):
  """Sort key of row names: the declared rows' order (:func:`row_table`), then the others as given."""
  named = [row.name for row in declared_rows()]
  names = named + [r.name for r in rows if r.name not in named]
  return lambda name: names.index(name) if name in names else len(names)


def resolved_values(row: Row, data) -> dict:
  """The row's options as built: a trained head's folder found (else an error), then completed by its
  kind (``KindSpec.row_values``: e.g. gamma from a tree's depth or a trained block, a corpus from ``data``)."""
  import specjax  # pylint: disable=import-outside-toplevel
  from specjax.models import heads  # pylint: disable=import-outside-toplevel
  values = dict(row.values)
  if specjax.drafters.spec(row.kind).head is not None:
    folder = heads.resolve(values.get("checkpoint", ""))
    if folder is None:
      raise common.UsageError(f"no {row.name} weights at {values.get('checkpoint', '')!r} "
                              f"(python -m specjax.train {row.kind} --data=real)")
    values["checkpoint"] = str(folder)
  depth = tree_depth(row.kind, values)
  if "gamma" not in values and depth is not None:
    values["gamma"] = depth
  complete = specjax.drafters.spec(row.kind).row_values
  return complete(values, data) if complete is not None else values


def build_row(row: Row, values: dict, target) -> tuple:
  """``(drafter, gamma)`` of a row from its :func:`resolved_values`, through :func:`specjax.drafters.build`."""
  import specjax  # pylint: disable=import-outside-toplevel
  options = specjax.drafters.make_options(row.kind, values)
  try:
    return specjax.drafters.build(row.kind, options, target), options.gamma
  except ValueError as e:
    raise common.UsageError(f"--drafters {row.name}: {e}") from e


def tree_label(kind: str, values: dict) -> str | None:
  """A tree row's tree as its options give it (real.json's ``tree``; ``KindSpec.row_tree``), else None."""
  tree = _row_tree(kind, values)
  return None if tree is None else tree[0]


def tree_depth(kind: str, values: dict) -> int | None:
  """The depth of a tree row's tree (its gamma unless given), else None."""
  tree = _row_tree(kind, values)
  return None if tree is None else tree[1]


def _row_tree(kind: str, values: dict):
  import specjax  # pylint: disable=import-outside-toplevel
  row_tree = specjax.drafters.spec(kind).row_tree
  return None if row_tree is None else row_tree(values)


def small_model_of(options_of: dict) -> str:
  """The small model of the rows whose kind drafts with one (``KindSpec.small_model``: draft_model,
  SpecInfer; real.json's ``meta.drafter``), "" when none."""
  import specjax  # pylint: disable=import-outside-toplevel
  return next((v.get("checkpoint", "") for v in options_of.values()
               if specjax.drafters.spec(v["kind"]).small_model is not None), "")
