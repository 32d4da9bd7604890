"""Drafters: everything that proposes tokens, behind one protocol (see base.py)."""
from specjax.drafters.base import Draft, DrafterBase
from specjax.drafters.draft_model import DraftModel
from specjax.drafters.ngram import NGram
from specjax.drafters.specinfer import SpecInfer
from specjax.drafters.medusa import Medusa
from specjax.drafters.table import TableDrafter
from specjax.drafters.mtp import MTP
from specjax.drafters.dflash import DFlash
from specjax.drafters.eagle import DynamicTree, Eagle

__all__ = ["Draft", "DrafterBase", "DraftModel", "NGram", "SpecInfer", "Medusa", "TableDrafter", "MTP", "DFlash", "Eagle", "DynamicTree"]
