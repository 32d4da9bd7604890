"""What the drafters that run a trained head share (MTP, DFlash, EAGLE-3): the head's size and
calls, the target's frozen embedding and LM head it reads, and the checks against a target.

The subclasses are ``flax.struct.dataclass``es that declare the fields read here: ``head`` (a
:class:`specjax.models.bundle.Model` of a registered head family) and ``subset_K`` (the target ids
of a truncated draft vocabulary, :mod:`specjax.drafters.vocab`; None: the whole vocabulary).
"""
from __future__ import annotations

import jax.numpy as jnp

from specjax.drafters import vocab
from specjax.drafters.base import Drafter
from specjax.models import heads


class HeadDrafter(Drafter):
  """A drafter whose only weights are its head's (the embedding and LM head are the target's)."""

  @property
  def num_params(self) -> int:
    return self.head.num_params

  def apply_head(self, *args, **kwargs):
    """The head module called with its params (``method=`` picks another of its methods)."""
    return self.head.module.apply({"params": self.head.params}, *args, **kwargs)

  def embed_and_unembed(self, target):
    """``(embed_VxE, unembed_ExK)``: the target's embedding and LM head, with a truncated
    vocabulary only the subset's LM-head columns."""
    embed, unembed = heads.target_io(target)
    if self.subset_K is not None:
      unembed = jnp.take(unembed, self.subset_K, axis=1)
    return embed, unembed

  def check_head(self, target, head_name: str, name: str) -> None:
    """The head fits ``target`` (``head_name`` in its errors) and the subset its vocabulary (``name``)."""
    heads.check_head(self.head, target, head_name)
    if self.subset_K is not None:
      vocab.check_subset(self.subset_K, target.vocab_size, name)


class FeatureHeadDrafter(HeadDrafter):
  """A head drafter that reads the outputs of its config's ``target_layers`` (DFlash, EAGLE-3)."""

  @property
  def feature_layers(self) -> tuple:
    """Read by the speculative loop: commit then gets these target layers' outputs, concatenated."""
    return self.head.config.target_layers

  def check_feature_layers(self, target, name: str) -> None:
    n = target.config.num_layers
    if any(not 0 <= i < n for i in self.feature_layers):
      raise ValueError(f"{name} target_layers={self.feature_layers} name layers outside the target's 0..{n - 1}")
