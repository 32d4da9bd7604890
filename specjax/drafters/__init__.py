"""Drafters: everything that proposes tokens, behind one protocol (see base.py)."""
from specjax.drafters.base import Draft, DrafterBase
from specjax.drafters.draft_model import DraftModel
from specjax.drafters.ngram import NGram

__all__ = ["Draft", "DrafterBase", "DraftModel", "NGram"]
