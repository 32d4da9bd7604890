"""Declaring a drafter kind: one :class:`KindSpec` says everything specjax needs to know about it.

A kind is declared once, in its own module (the shipped ones: ``specjax/kinds/<kind>.py`` or a
folder ``specjax/kinds/<kind>/``; a user's: any module named in ``config.imports``), and registered
with :func:`specjax.drafters.register_kind`. Every command reads the registry instead of keeping a
table of its own: ``run`` and every ``bench`` task build through :func:`specjax.drafters.build`,
the exactness matrix runs the kind's :class:`Case` list, tables print its ``label``, the demo
benchmarks run its :class:`Demo` configs. Only ``kind``, ``build`` and ``options`` are required::

    import dataclasses

    import flax

    from specjax import drafters


    @flax.struct.dataclass            # a drafter is a pytree: the loop passes it through jit
    class Repeat(drafters.Drafter):
      n: int = flax.struct.field(pytree_node=False, default=1)  # static: not an array
      kind = "repeat"

      def init(self, target, prompts_BxP, prompt_lengths_B, max_len, prefill=None):
        return ()

      def propose(self, state, tokens_BxS, seq_len_B, gamma, sampling, rng):
        ...


    @dataclasses.dataclass(frozen=True)
    class RepeatOptions(drafters.Options):   # gamma, checkpoint, seed come from Options
      n: int = 1                             # the only place the default is written


    SPEC = drafters.register_kind(drafters.KindSpec(
        kind="repeat",
        build=lambda options, target: Repeat(options.n),
        options=RepeatOptions,
        label="repeat last",                  # tables' name for it
        cases=lambda: (                       # the exactness matrix's cells, on its tiny models
            drafters.Case("repeat/n=1", ("n",), lambda models: Repeat(1)),
        ),
        demos=(drafters.Demo("repeat", "demo.py", {"drafter.kind": "repeat"}),),
    ))

``register(kind, build, options)`` (the older form) still works: it registers a spec with only
those three fields. The registry checks a spec when it is registered (names, options dataclass,
build's signature, cases) and checks every built drafter (a registered pytree with the protocol's
methods), so a mistake is an error naming the fix, not a failure deep inside ``jax.jit``.
"""
from __future__ import annotations

import dataclasses
import inspect
from typing import Any, Callable, Sequence

import jax


@dataclasses.dataclass(frozen=True)
class Options:
  """The fields every drafter kind takes; kinds subclass this (frozen) with their own."""
  gamma: int = 4
  checkpoint: str = ""
  seed: int = 0

  def __post_init__(self):
    if isinstance(self.gamma, bool) or not isinstance(self.gamma, int) or self.gamma < 1:
      raise ValueError(f"gamma must be an integer >= 1, got {self.gamma!r}")


@dataclasses.dataclass(frozen=True)
class Case:
  """One configuration of a kind in the exactness matrix (every sampling and batch shape runs it).

  ``build(models) -> Drafter`` gets the matrix's tiny models (``specjax.conformance.cases.Models``:
  ``models.target``, ``models.small``, ``models.subset_K``, ...); ``options`` names the public options the
  case covers (``"name"`` or ``"name=value"``, plus ``"adaptive"``/``"subset_K"``/``"lenience"``), and
  ``lossy_sampled`` says whether the case must be lossy when sampling (then its sampled cells must be
  refused, and a drafter whose own ``lossy_reason`` disagrees is reported as mislabeled).
  """
  name: str
  options: tuple
  build: Callable = dataclasses.field(compare=False)
  lossy_sampled: bool = False
  lenience: float = 1.0
  adaptive: bool = False  # the loop's adaptive draft length (chains), or node budget (Drafter.tree_budgets)


@dataclasses.dataclass(frozen=True)
class Demo:
  """A demo benchmark row set: ``name`` (the row's family), a config file of ``configs/`` and key overrides."""
  name: str
  config: str
  overrides: dict = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(frozen=True)
class Row:
  """A named row of ``bench families --target`` (:mod:`specjax.bench.real_rows`): a drafter trained for
  SmolLM2-135M at its trained settings, as typed on the command line (``drafter``: ``KIND[:CHECKPOINT]``,
  ``options``: ``KIND.OPTION=VALUE`` strings). ``order``: where the row stands among every kind's rows
  (ascending; equal orders keep registration order); ``default``: measured when ``--drafters`` is not given."""
  name: str
  drafter: str
  options: tuple = ()
  order: int = 100
  default: bool = False


@dataclasses.dataclass(frozen=True)
class KindSpec:
  """A drafter kind, declared once.

  Required: ``kind`` (an identifier), ``build(options, target) -> Drafter`` and ``options`` (a frozen
  dataclass subclassing :class:`Options`; its defaults are the only defaults). The rest is optional:

  - ``label``: the kind's name in tables and plots (default: ``kind``).
  - ``cases``: the exactness matrix's cells, a sequence of :class:`Case` or a function returning one
    (called when the matrix is built, so a kind's module stays cheap to import).
  - ``demos``: the demo benchmark configurations (:class:`Demo`) that ``bench families``/``batch`` run.
  - ``rows``: the named rows (:class:`Row`) of the kind's trained drafters that ``bench families --target`` knows.
  - ``small_model(options, model) -> Drafter``: the kind drafts with a separate small model; given one
    (a config's ``drafter.model`` fields), this builds the drafter around it.
  - ``head``, ``head_config``: the trained head's module class and its config dataclass (a saved head's
    ``config.json`` names the module's ``family``; :func:`specjax.models.heads.load_head` reads it).
  - ``train``: the module of the kind's ``python -m specjax.train <kind>`` command (``main(argv) -> int``),
    as a dotted name: it is imported only when that command runs.
  - ``row_tree(values) -> (label, depth)``: a tree kind's tree as a ``bench families --target`` row's
    options give it (real.json's ``tree``; the depth is the row's gamma unless it sets one).
  - ``row_values(values, data) -> values``: a row's option values completed for the run (``data``: the
    target's ``train data`` folder), e.g. a corpus, or gamma from a trained block.
  - ``full_vocab_twin(drafter, target) -> Drafter``: the drafter without its truncated vocabulary (its
    draft cost over the whole vocabulary, real.json's ``c_full_vocab``); called only when it has one.
  """
  kind: str
  build: Callable[[Any, Any], Any]
  options: type = Options
  label: str = ""
  cases: Callable[[], Sequence[Case]] | Sequence[Case] = ()
  demos: tuple = ()
  rows: tuple = ()
  small_model: Callable | None = None
  head: type | None = None
  head_config: type | None = None
  train: str = ""
  row_tree: Callable | None = None
  row_values: Callable | None = None
  full_vocab_twin: Callable | None = None

  @property
  def display(self) -> str:
    return self.label or self.kind

  def exactness_cases(self) -> tuple[Case, ...]:
    cases = self.cases() if callable(self.cases) else self.cases
    cases = tuple(cases)
    for case in cases:
      if not isinstance(case, Case):
        raise TypeError(f"drafter kind {self.kind!r}: cases must be specjax.drafters.Case, got {case!r}")
      if case.name.split("/")[0] != self.kind:
        raise ValueError(f"drafter kind {self.kind!r}: case {case.name!r} must be named '{self.kind}' or "
                         f"'{self.kind}/...'")
    return cases


def check(spec: KindSpec) -> KindSpec:
  """``spec`` if it is well formed; else an error that names the field and the fix."""
  if not isinstance(spec, KindSpec):
    raise TypeError(f"expected a specjax.drafters.KindSpec, got {spec!r}")
  kind = spec.kind
  if not isinstance(kind, str) or not kind.isidentifier():
    raise ValueError(f"drafter kind must be an identifier-like string, got {kind!r}")
  options = spec.options
  if not (isinstance(options, type) and dataclasses.is_dataclass(options) and issubclass(options, Options)):
    raise TypeError(f"register({kind!r}): options must be a dataclass subclassing "
                    f"specjax.drafters.Options, got {options!r}")
  if not options.__dataclass_params__.frozen:
    raise TypeError(f"register({kind!r}): options class {options.__name__} must be frozen: "
                    "@dataclasses.dataclass(frozen=True)")
  _check_arity(kind, "build", spec.build, 2, "build(options, target)")
  for field, n, form in (("small_model", 2, "small_model(options, model)"),
                         ("row_tree", 1, "row_tree(values)"), ("row_values", 2, "row_values(values, data)"),
                         ("full_vocab_twin", 2, "full_vocab_twin(drafter, target)")):
    if getattr(spec, field) is not None:
      _check_arity(kind, field, getattr(spec, field), n, form)
  if spec.train and not (isinstance(spec.train, str) and all(p.isidentifier() for p in spec.train.split("."))):
    raise TypeError(f"register({kind!r}): train must be a module's dotted name (its main(argv) trains the kind), "
                    f"got {spec.train!r}")
  for demo in spec.demos:
    if not isinstance(demo, Demo):
      raise TypeError(f"register({kind!r}): demos must be specjax.drafters.Demo, got {demo!r}")
  for row in spec.rows:
    _check_row(kind, options, row)
  if (spec.head is None) != (spec.head_config is None):
    raise TypeError(f"register({kind!r}): head and head_config come together (the module class and its config)")
  if spec.head is not None and not isinstance(getattr(spec.head, "family", None), str):
    raise TypeError(f"register({kind!r}): head {spec.head!r} needs a class attribute family (the name its "
                    "checkpoints are saved under)")
  if not callable(spec.cases):
    spec.exactness_cases()  # a tuple is checked now; a function when the matrix calls it
  return spec


def _check_row(kind, options, row):
  if not isinstance(row, Row):
    raise TypeError(f"register({kind!r}): rows must be specjax.drafters.Row, got {row!r}")
  if not row.name.isidentifier() or row.drafter.partition(":")[0] != kind:
    raise ValueError(f"register({kind!r}): row {row.name!r} must have an identifier for a name and a drafter "
                     f"of its own kind ('{kind}[:CHECKPOINT]'), got {row.drafter!r}")
  names = [f.name for f in dataclasses.fields(options)]
  for text in row.options:
    head, eq, _ = text.partition("=")
    owner, _, key = head.partition(".")
    if not eq or owner != kind or key not in names:
      raise ValueError(f"register({kind!r}): row {row.name!r}: option {text!r} must read {kind}.OPTION=VALUE "
                       f"with OPTION one of {', '.join(names)}")


def _check_arity(kind, field, fn, n, form):
  if not callable(fn):
    raise TypeError(f"register({kind!r}): {field} must be a function {form}, got {fn!r}")
  try:
    inspect.signature(fn).bind(*range(n))
  except TypeError as e:
    raise TypeError(f"register({kind!r}): {field} must take {n} positional argument(s): {form}") from e
  except ValueError:  # a builtin without a signature: trust it
    pass


def check_drafter(kind: str, drafter) -> None:
  """A built drafter must be a registered pytree (the loop jits over it) with the protocol's methods."""
  for method in ("init", "propose", "check_compatible"):
    if not callable(getattr(drafter, method, None)):
      raise TypeError(f"drafter kind {kind!r} built {type(drafter).__name__}, which has no {method}(); "
                      "subclass specjax.drafters.Drafter")
  leaves, _ = jax.tree_util.tree_flatten(drafter)
  if len(leaves) == 1 and leaves[0] is drafter:
    raise TypeError(f"drafter kind {kind!r} built {type(drafter).__name__}, which is not a registered pytree: "
                    "decorate the class with @flax.struct.dataclass (static fields: "
                    "flax.struct.field(pytree_node=False)) or register it with "
                    "jax.tree_util.register_pytree_node_class")
