"""The model families specjax ships, one declaration each (a module of this package).

Each module declares its :class:`specjax.models.families.Family` when imported: the module and
config class, the cache and depth fields, and every HF / GGUF architecture it imports with its
importer and quirks. The registry and its lookups live in :mod:`specjax.models.families`, below the
importers, which read it; these declarations sit above the importers, so they can name them. A new
architecture of a family is one :class:`~specjax.models.families.Architecture` in its module plus a
parity test. How to add one: docs/checkpoints.md.
"""
from specjax.families import decoder, t5

__all__ = ["decoder", "t5"]
