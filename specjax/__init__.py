"""specjax: exact speculative decoding for JAX/Flax."""
from specjax import checkpoint, drafters, hf_import, measure, sharding, testing, theory, tree
from specjax import families  # declares the shipped model families (after hf_import: they name its importers)
from specjax.adaptive import Adaptive
from specjax.decode import GenerateOutput, generate, speculative_generate
from specjax.loading import load_pretrained
from specjax.models.api import logits
from specjax.models.bundle import Model
from specjax.sampling import Sampling
from specjax.sharding import make_mesh, shard
from specjax import kinds  # registers the shipped drafter kinds (after drafters: they build on it)

__all__ = ["Adaptive", "GenerateOutput", "Model", "Sampling", "checkpoint", "drafters", "families", "generate", "hf_import", "kinds", "load_pretrained", "logits",
           "make_mesh", "measure", "shard", "sharding", "speculative_generate", "testing", "theory", "tree"]
