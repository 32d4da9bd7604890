"""Import Hugging Face ``transformers`` checkpoints into specjax bundles, without torch.

``from_hf(folder)`` reads ``config.json`` plus ``model.safetensors`` (or a sharded
``model.safetensors.index.json`` and its shards) and returns a :class:`specjax.Model`:

* ``LlamaForCausalLM`` / ``MistralForCausalLM`` (its sliding window on every layer) /
  ``Qwen2ForCausalLM`` (q/k/v biases) / ``Qwen3ForCausalLM`` (q/k norms) /
  ``Gemma3ForCausalLM`` (text) -> ``Decoder``, each a few config fields of the one decoder;
* ``T5ForConditionalGeneration`` -> ``T5``: v1.1 / FLAN-T5 (gated-GELU, own head) and the original
  T5 (ReLU, tied head with the ``d_model**-0.5`` rescale).

Anything these families can express but specjax does not model (MLP biases, RoPE scaling, logit
soft-capping, T5 activations other than ReLU and tanh-GELU, ...) is rejected with an error naming
the config key, rather than imported into a silently different model. Which architecture is read
by which importer, with which options, is declared with its family (:mod:`specjax.families`);
``IMPORTERS`` is a view of those declarations. ``from_config`` takes the same config dict with
tensors from anywhere (``specjax.gguf_import`` feeds it dequantized GGUF tensors, HF-named).
"""
from __future__ import annotations

import pathlib

from specjax.checkpoint import CheckpointError
from specjax.hf_import.weights import Weights, array_weights, read_json, read_safetensors_header, safetensors_weights
from specjax.models import families
from specjax.models.bundle import Model

# HF architecture name -> importer(path, source, cfg, weights, overrides), as the families declare them
IMPORTERS = families.DeclaredView(lambda: {n: a.load for n, a in families.hf_architectures().items()})

__all__ = ["IMPORTERS", "array_weights", "from_config", "from_hf", "read_safetensors_header"]


def from_hf(folder, param_dtype: str | None = "auto", mesh=None, **config_overrides) -> Model:
  """Loads a ``transformers`` checkpoint folder as a specjax model, params stored in ``param_dtype``
  (:mod:`specjax.precision`: ``"auto"`` is float32 on CPU, bfloat16 on accelerators), each tensor
  read and cast alone.

  ``mesh``: a ``jax.sharding.Mesh``; each tensor goes to its final sharding as soon as it is read
  (:mod:`specjax.placement`), equal to ``sharding.shard(from_hf(folder), mesh)`` without a whole
  host copy. ``config_overrides`` replace fields of the specjax config (e.g. ``dtype="bfloat16"``
  for compute).
  """
  from specjax import precision  # pylint: disable=import-outside-toplevel
  folder = pathlib.Path(folder)
  if not folder.is_dir():
    raise CheckpointError(f"HF checkpoint folder not found: {folder}")
  cfg = read_json(folder / "config.json")
  _importer(cfg, folder / "config.json")  # an unknown architecture fails before any tensor is read
  weights = safetensors_weights(folder)
  weights.dtype = precision.storage_dtype(param_dtype)
  return from_config(cfg, weights, folder / "config.json", str(folder), mesh=mesh, **config_overrides)


def from_config(cfg: dict, weights: Weights, path, source: str, mesh=None, **config_overrides) -> Model:
  """An HF-style config dict and its HF-named tensors -> a specjax model (on ``mesh`` when given,
  each param placed as it is taken)."""
  weights.mesh = mesh
  return _importer(cfg, path)(pathlib.Path(path), source, cfg, weights, config_overrides)


def _importer(cfg, path):
  arch = (cfg.get("architectures") or [cfg.get("model_type", "<none>")])[0]
  declared = families.hf_architectures()
  if arch not in declared:
    raise CheckpointError(f"{path}: unsupported architecture {arch!r}; supported: {sorted(declared)}")
  return declared[arch].load
