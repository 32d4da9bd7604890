"""A tiny random decoder pair: checks the plumbing in seconds, no weights needed.

  python -m specjax.run --config=configs/tiny_random.py
"""
import importlib.util
import pathlib

import ml_collections

_spec = importlib.util.spec_from_file_location("demo", pathlib.Path(__file__).with_name("demo.py"))
demo = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(demo)


def get_config(arg: str | None = None):
  c = demo.get_config(arg)
  c.target = ml_collections.ConfigDict(dict(family="decoder", vocab_size=264, d_model=64, num_layers=2,
                                            num_heads=4, num_kv_heads=4, head_dim=16, mlp_dim=128))
  c.drafter = ml_collections.ConfigDict(dict(family="decoder", vocab_size=264, d_model=32, num_layers=1,
                                             num_heads=2, num_kv_heads=2, head_dim=16, mlp_dim=64))
  c.gamma = 4
  c.prompt_len = 16
  c.max_new_tokens = 32
  c.repeats = 1
  return c
