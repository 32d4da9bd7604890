"""The drafter kinds specjax ships, one declaration each (a module or a folder of this package).

Every module here registers its :class:`specjax.drafters.KindSpec` when imported; this package
imports them all, so a new kind is its own module plus its tests, and no list names it. A kind
sits above the layers it draws on (drafters, models, train), so its declaration may name its head,
its training command and its exactness cases directly. How to add one: docs/drafters.md.
"""
import importlib
import pkgutil

# a plugin folder: each module is found by its file, not listed (nothing below imports this package)
for _module in sorted(m.name for m in pkgutil.iter_modules(__path__)):
  importlib.import_module(f"{__name__}.{_module}")
