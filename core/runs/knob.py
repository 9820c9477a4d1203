"""A parameter budget resolved at planning: ``--budget params=F`` becomes the value of the
method's own knob (its sparsity: ShortGPT's fraction of layers, structured Wanda's ratio,
FLAP's fraction, SliceGPT's s), computed by the method's ``budget_knob`` from the decoder's
parameter counts, read off a meta-device copy of the model built from its config (no
weight is read). The resolved config keeps the budget beside the knob, so the run id says
both."""

from __future__ import annotations

import dataclasses
from functools import lru_cache

from core.errors import ConfigError, ModelLoadError
from core.methods.base import Method
from core.methods.structure.budget import DecoderCounts, Knob, config_counts
from core.models.load import model_config
from core.settings.config import ModelSpec, PruneConfig


@lru_cache(maxsize=8)
def _counts(name: str, trust_remote_code: bool, revision: str | None) -> DecoderCounts:
    return config_counts(model_config(name, trust_remote_code, revision))


def decoder_counts(spec: ModelSpec) -> DecoderCounts:
    """The decoder's parameter counts of the model a spec names (cached per process: a
    grid asks once per point). ConfigError when its config cannot be read here."""
    try:
        return _counts(spec.name, spec.trust_remote_code, spec.revision)
    except (OSError, ValueError, ModelLoadError) as exc:
        raise ConfigError(
            f"a parameter budget is counted on the model's config, which cannot be read here: {exc}"
        ) from exc


def budget_knob(prune: PruneConfig, method: Method, model: ModelSpec) -> Knob | None:
    """The knob ``prune.budget`` maps to for ``method`` on ``model`` (None without a budget)."""
    if prune.budget is None:
        return None
    return method.budget_knob(decoder_counts(model), prune.budget)


def with_budget(prune: PruneConfig, method: Method, model: ModelSpec) -> PruneConfig:
    """``prune`` with its sparsity set to the knob its budget maps to (unchanged without)."""
    knob = budget_knob(prune, method, model)
    return prune if knob is None else dataclasses.replace(prune, sparsity=knob.sparsity)
