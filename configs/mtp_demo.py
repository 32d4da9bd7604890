"""The demo target with its shared-weight MTP head (Nemotron 3 Super style), greedy, gamma 7.

  python -m specjax.run --config=configs/mtp_demo.py
  python -m specjax.run --config=configs/mtp_demo.py --config.drafter.gamma=3 --config.temperature=1.0

The head (specjax/assets/demo/mtp, trained by python -m specjax.train mtp on the frozen target) reads the
target's last hidden state and is applied recursively, so any gamma works; acceptance falls with
depth. Without the trained head a random one runs (exact, rarely accepted); without the demo target
a tiny random pair runs instead, and the run says so. c is measured (gamma head steps / gamma).
"""

from specjax.config_util import sibling_config
from specjax.drafters import drafter_section


def get_config(arg: str | None = None):
  c = sibling_config(__file__, "demo", arg)  # every key not set here is demo.py's
  c.drafter = drafter_section("mtp", checkpoint="demo/mtp", gamma=7)
  return c
