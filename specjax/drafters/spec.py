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
class KindSpec:
  """A drafter kind, declared once.

  Required: ``kind`` (an identifier), ``build(options, target) -> Drafter`` and ``options`` (a frozen
  dataclass subclassing :class:`Options`; its defaults are the only defaults). The rest is optional:

  - ``label``: the kind's name in tables and plots (default: ``kind``).
  - ``cases``: the exactness matrix's cells, a sequence of :class:`Case` or a function returning one
    (called when the matrix is built, so a kind's module stays cheap to import).
  - ``demos``: the demo benchmark configurations (:class:`Demo`) that ``bench families``/``batch`` run.
  - ``small_model(options, model) -> Drafter``: the kind drafts with a separate small model; given one
    (a config's ``drafter.model`` fields), this builds the drafter around it.
  - ``head``, ``head_config``: the trained head's module class and its config dataclass (a saved head's
    ``config.json`` names the module's ``family``; :func:`specjax.models.heads.load_head` reads it).
  - ``train``: the module of the kind's ``python -m specjax.train <kind>`` command (``main(argv) -> int``),
    as a dotted name: it is imported only when that command runs.
  """
  kind: str
  build: Callable[[Any, Any], Any]
  options: type = Options
  label: str = ""
  cases: Callable[[], Sequence[Case]] | Sequence[Case] = ()
  demos: tuple = ()
  small_model: Callable | None = None
  head: type | None = None
  head_config: type | None = None
  train: str = ""

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
  if spec.small_model is not None:
    _check_arity(kind, "small_model", spec.small_model, 2, "small_model(options, model)")
  if spec.train and not (isinstance(spec.train, str) and all(p.isidentifier() for p in spec.train.split("."))):
    raise TypeError(f"register({kind!r}): train must be a module's dotted name (its main(argv) trains the kind), "
                    f"got {spec.train!r}")
  for demo in spec.demos:
    if not isinstance(demo, Demo):
      raise TypeError(f"register({kind!r}): demos must be specjax.drafters.Demo, got {demo!r}")
  if (spec.head is None) != (spec.head_config is None):
    raise TypeError(f"register({kind!r}): head and head_config come together (the module class and its config)")
  if spec.head is not None and not isinstance(getattr(spec.head, "family", None), str):
    raise TypeError(f"register({kind!r}): head {spec.head!r} needs a class attribute family (the name its "
                    "checkpoints are saved under)")
  if not callable(spec.cases):
    spec.exactness_cases()  # a tuple is checked now; a function when the matrix calls it
  return spec


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
