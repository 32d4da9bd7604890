"""The demo target with its EAGLE-3 head: a chain, a static tree, or an EAGLE-2 dynamic tree; gamma 5.

  python -m specjax.run --config=configs/eagle_demo.py                    # chain of 5, greedy
  python -m specjax.run --config=configs/eagle_demo.py:static             # chain5+1x4+2x2 static tree (11 nodes)
  python -m specjax.run --config=configs/eagle_demo.py:dynamic            # depth 5, top-4, best 11 nodes per row
  python -m specjax.run --config=configs/eagle_demo.py:dynamic --config.temperature=1.0   # lossless sampling

The head (specjax/assets/demo/eagle, trained by python -m specjax.train eagle with EAGLE-3's training-time
test on the frozen target) reads the target's layers (0, 2, 5) and feeds back its own hidden state,
so any gamma works. Without the trained head a random one runs (exact, rarely accepted).
"""

from specjax.config_util import sibling_config
from specjax.drafters import drafter_section


def get_config(arg: str | None = None):
  shape = arg or "chain"
  if shape not in ("chain", "static", "dynamic"):
    raise ValueError(f"unknown eagle_demo argument {arg!r}; use chain, static or dynamic")
  c = sibling_config(__file__, "demo", None)  # every key not set here is demo.py's
  # paths (static): "" = specjax.drafters.eagle.default_static_paths(gamma); top_k (dynamic): children per
  # expanded node and expanded nodes per level; total_tokens (dynamic): draft nodes verified per row
  c.drafter = drafter_section("eagle", checkpoint="demo/eagle", tree=shape, gamma=5, top_k=4, total_tokens=11)
  return c
