"""Drafters: everything that proposes tokens, behind one declared protocol (base.Drafter), and the
registry every command builds them from (``register``/``build``; the shipped kinds: builtin.py)."""
from specjax.drafters.base import Draft, Drafter, Prefill
from specjax.drafters.registry import Options, build, kinds, make_options, options_class, register
from specjax.drafters.draft_model import DraftModel
from specjax.drafters.ngram import NGram
from specjax.drafters.specinfer import SpecInfer
from specjax.drafters.medusa import Medusa
from specjax.drafters.table import TableDrafter
from specjax.drafters.mtp import MTP
from specjax.drafters.dflash import DFlash
from specjax.drafters.eagle import DynamicTree, Eagle
from specjax.drafters.recycling import Recycling
from specjax.drafters.suffix import Hybrid, Suffix
from specjax.drafters import builtin as _builtin
from specjax.drafters import recycling as _recycling
from specjax.drafters import suffix_kinds as _suffix_kinds

_builtin.register_builtin()
register("recycling", _recycling.build, _recycling.RecyclingOptions)
_suffix_kinds.register_kinds()

__all__ = ["Draft", "Drafter", "Prefill", "Options", "build", "kinds", "make_options",
           "options_class", "register", "DraftModel", "NGram", "SpecInfer", "Medusa", "TableDrafter", "MTP",
           "DFlash", "Eagle", "DynamicTree", "Recycling", "Suffix", "Hybrid"]
