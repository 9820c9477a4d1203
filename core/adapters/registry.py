"""Which adapter serves a model: looked up by ``config.model_type``, before any weight loads."""

from __future__ import annotations

from typing import Any

from torch import nn

from core.adapters.base import ModelAdapter
from core.adapters.gemma import Gemma3Adapter
from core.adapters.llama import LlamaAdapter
from core.adapters.opt import OPTAdapter
from core.adapters.phi3 import Phi3Adapter
from core.adapters.qwen import Qwen2Adapter, Qwen3Adapter
from core.adapters.traits import Traits
from core.errors import ModelLoadError

# One adapter class per family, in the order listings show them.
FAMILIES: tuple[type[ModelAdapter], ...] = (
    LlamaAdapter,
    Qwen2Adapter,
    Qwen3Adapter,
    Gemma3Adapter,
    Phi3Adapter,
    OPTAdapter,
)
_BY_TYPE: dict[str, type[ModelAdapter]] = {t: cls for cls in FAMILIES for t in cls.model_types}


def supported_families() -> str:
    """'llama (llama, mistral), qwen2 (qwen2), ...' for messages and listings."""
    return ", ".join(f"{cls.family} ({', '.join(cls.model_types)})" for cls in FAMILIES)


def adapter_class(config: Any) -> type[ModelAdapter]:
    """The adapter class of a transformers config; ModelLoadError naming the supported
    families when no adapter knows its model_type."""
    model_type = getattr(config, "model_type", None)
    cls = _BY_TYPE.get(model_type) if isinstance(model_type, str) else None
    if cls is None:
        raise ModelLoadError(
            f"no PruneScope adapter for model_type {model_type!r}; supported families: "
            f"{supported_families()}"
        )
    return cls


def family_traits(config: Any) -> Traits:
    return adapter_class(config).traits(config)


def adapter_for(model: Any) -> ModelAdapter:
    """The validated adapter of a causal LM (an nn.Module with a transformers config)."""
    if not isinstance(model, nn.Module):
        raise ModelLoadError(f"expected a causal LM module, got {type(model).__name__}")
    config = getattr(model, "config", None)
    if config is None:
        raise ModelLoadError(
            f"{type(model).__name__} has no transformers config (no decoder layers to find); "
            f"supported families: {supported_families()}"
        )
    return adapter_class(config).from_model(model)
