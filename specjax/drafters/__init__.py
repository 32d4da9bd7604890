"""Drafters: everything that proposes tokens, behind one declared protocol (base.Drafter), and the
registry every command builds them from (``register_kind``/``build``; a kind's declaration:
spec.KindSpec; the shipped kinds' declarations: ``specjax/kinds``)."""
from specjax.drafters.base import Draft, Drafter, Prefill
from specjax.drafters.spec import Case, Demo, KindSpec, Options, Row
from specjax.drafters.registry import (build, drafter_section, import_modules, kinds, make_options, option_values,
                                       options_class, parse_drafter, register, register_kind, spec, specs)
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

__all__ = ["Case", "Demo", "Draft", "Drafter", "KindSpec", "Prefill", "Options", "Row", "build", "drafter_section",
           "import_modules", "kinds", "make_options", "option_values", "options_class", "parse_drafter", "register", "register_kind", "spec", "specs",
           "DraftModel", "NGram", "SpecInfer", "Medusa", "TableDrafter", "MTP", "DFlash", "Eagle", "DynamicTree",
           "Recycling", "Suffix", "Hybrid"]
