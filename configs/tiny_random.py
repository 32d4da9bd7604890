"""A tiny random decoder pair: checks the plumbing in seconds, no weights needed.

  python -m specjax.run --config=configs/tiny_random.py
"""
import ml_collections

from specjax.config_util import sibling_config
from specjax.drafters import drafter_section


def get_config(arg: str | None = None):
  c = sibling_config(__file__, "demo", arg)
  c.target = ml_collections.ConfigDict(dict(family="decoder", vocab_size=264, d_model=64, num_layers=2,
                                            num_heads=4, num_kv_heads=4, head_dim=16, mlp_dim=128))
  c.drafter = drafter_section("draft_model", gamma=4, model=dict(
      family="decoder", vocab_size=264, d_model=32, num_layers=1, num_heads=2, num_kv_heads=2, head_dim=16,
      mlp_dim=64))
  c.prompt_len = 16
  c.max_new_tokens = 32
  c.repeats = 1
  return c
