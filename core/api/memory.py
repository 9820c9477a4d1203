"""A model a notebook already holds, as the runs see one: its ``LoadedModel`` (the family
adapter, so an unsupported family is refused here with the CLI's ModelLoadError), the
``ModelSpec`` that names it (device and dtype read from its weights), and its geometry read
from its own config. Nothing is loaded by name except by ``load``."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch
from torch import nn

from core.adapters import adapter_for
from core.errors import ConfigError
from core.machine.device import dtype_name, resolve_device, resolve_dtype
from core.models.geometry import Geometry
from core.models.load import LoadedModel, load_model
from core.settings.config import ModelSpec

IN_MEMORY = "memory"  # LoadedModel.source of a model handed over by the caller


def load(name: str, device: str = "auto", dtype: str = "auto") -> tuple[nn.Module, object]:
    """(model, tokenizer) of a named model (a packaged one, a tiny random one, a local folder or
    a Hugging Face id), as ``python -m core`` loads it; ``device``/``dtype`` as its flags."""
    dev = resolve_device(device)
    lm = load_model(name, dev, resolve_dtype(dtype, dev))
    lm.model.config.name_or_path = name  # so a stored run of it names it again
    return lm.model, lm.tokenizer


def device_of(model: nn.Module) -> torch.device:
    """Where the model's weights are: every call runs there."""
    param = next(model.parameters(), None)
    if param is None:
        raise ConfigError("the model has no parameters")
    return param.device


def loaded(model: nn.Module, tokenizer: object, name: str | None = None) -> LoadedModel:
    """The in-memory model with its family's adapter (ModelLoadError for a family PruneScope
    does not cover, or a module that is not a causal LM)."""
    if not isinstance(model, nn.Module) or getattr(model, "config", None) is None:
        raise ConfigError(
            f"expected a Hugging Face causal LM (an nn.Module with a config), got "
            f"{type(model).__name__}"
        )
    if tokenizer is None or not callable(tokenizer):
        raise ConfigError("a tokenizer is needed: pass the model's own (AutoTokenizer)")
    return LoadedModel(model, tokenizer, adapter_for(model), name or model_name(model), IN_MEMORY)


def model_name(model: nn.Module) -> str:
    """The name the model was loaded by (its config's ``name_or_path``), else its type."""
    return str(getattr(model.config, "name_or_path", "") or model.config.model_type)


def spec_of(model: nn.Module, name: str | None = None) -> ModelSpec:
    """The resolved ModelSpec of an in-memory model: its name, device and dtype."""
    dtype = next(model.parameters()).dtype
    return ModelSpec(name or model_name(model), str(device_of(model)), dtype_name(dtype))


def geometry_of(model: nn.Module) -> Geometry:
    """The model's geometry from its own config (ModelLoadError for an unknown family)."""
    return Geometry.from_config(model.config)


@contextmanager
def evaluating(model: nn.Module) -> Iterator[None]:
    """The model in eval mode (no dropout) within the block, its own mode restored after."""
    was = model.training
    model.eval()
    try:
        yield
    finally:
        model.train(was)
