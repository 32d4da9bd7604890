"""specjax: exact speculative decoding for JAX/Flax."""
from specjax import drafters, testing
from specjax.decode import GenerateOutput, generate, speculative_generate
from specjax.models.api import logits
from specjax.models.bundle import Model
from specjax.sampling import Sampling

__all__ = ["GenerateOutput", "Model", "Sampling", "drafters", "generate", "logits", "speculative_generate",
           "testing"]
