"""What the structured methods share: ``StructuredMethod`` (the registered methods' base: run
kind, budget, the frame of ``apply``) and ``StructureReport`` (what one run removed).

A structured method removes whole decoder layers, KV groups or MLP channels and leaves a
smaller dense model; its ``shrink`` edits the model in place and returns one row per dense
layer. ``apply`` measures the decoder's parameters before and after, records the shapes as
``model.structure`` (core.methods.structure.spec) and writes them into the config where it
can state them, so the run's saved folder reloads (core.methods.structure.io).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, ClassVar

import torch

from core.adapters import ModelAdapter
from core.errors import ConfigError
from core.methods.base import ApplyPlan, Method
from core.methods.structure.io import finish_config
from core.methods.structure.spec import spec_of
from core.names import PARAMS_REMOVED, STRUCTURED


@dataclass
class StructureReport:
    """What a structured method did: the decoder's parameters before and after (every layer
    together), one row per dense layer (kept, heads, kv_heads, channels, and the method's
    scores), the structures removed in words, its time and calibration tokens."""

    method: str
    n_layer_params_dense: int
    n_layer_params: int
    rows: list[dict[str, Any]]
    removed: str
    seconds: float
    calib_tokens: int

    @property
    def params_removed(self) -> float:
        return 1.0 - self.n_layer_params / self.n_layer_params_dense

    def summary(self) -> dict[str, Any]:
        """The run's own metrics."""
        return {
            PARAMS_REMOVED: self.params_removed,
            "removed": self.removed,
            "n_layer_params_dense": self.n_layer_params_dense,
            "n_layer_params": self.n_layer_params,
            "n_layers_kept": sum(bool(r["kept"]) for r in self.rows),
            "calib_tokens": self.calib_tokens,
        }


def layer_params(adapter: ModelAdapter) -> int:
    return sum(p.numel() for p in adapter.layers.parameters())


class StructuredMethod(Method):
    """Base of ShortGPT, FLAP and structured Wanda: runs of kind 'structured', one knob (the
    run's sparsity) that a parameter budget maps to (each method's ``budget_knob``), and
    ``shrink``."""

    run_kind = STRUCTURED
    structured = True
    needs_gram = False
    supports_patterns = ("unstructured",)
    calib_passes = 1.0
    adds_bias: ClassVar[bool] = False  # gives the residual writers biases (FLAP)

    def check_knob(self, counts: Any, sparsity: float) -> None:
        """ConfigError for a knob value the model cannot take, from its decoder's parameter
        counts (``DecoderCounts``; planning calls it before any weight loads); nothing by
        default."""

    def shrink(
        self, adapter: ModelAdapter, calib: torch.Tensor, plan: ApplyPlan
    ) -> tuple[list[dict[str, Any]], list[int], str]:
        """Edit the model in place: (one row per dense layer, the kept layers' original
        indices, the structures removed in words)."""
        raise NotImplementedError

    def apply(self, model: Any, calib: torch.Tensor, plan: ApplyPlan) -> StructureReport:
        """Remove structures from ``model`` (a LoadedModel) at the knob ``plan.sparsity``."""
        adapter = model.adapter
        if getattr(adapter.model, "structure", None) is not None:
            raise ConfigError(f"{self.name}: the model is already structured; load the dense one")
        dense_layers, before = adapter.n_layers, layer_params(adapter)
        t0 = time.perf_counter()
        rows, kept, removed = self.shrink(adapter, calib, plan)
        spec = spec_of(adapter, self.name, kept, dense_layers, self.adds_bias)
        adapter.model.structure = finish_config(adapter, spec)
        return StructureReport(
            self.name,
            before,
            layer_params(adapter),
            rows,
            removed,
            time.perf_counter() - t0,
            int(calib.numel()),
        )


def width_refusal(traits: Any) -> str | None:
    """Why a family's layers cannot lose KV groups or MLP channels one layer at a time (the
    methods that narrow widths: FLAP, structured Wanda), or None."""
    if "qkv_proj" in traits.fused:
        return (
            "its fused qkv_proj is split into q, k and v by the config's head counts, so one "
            "layer cannot lose heads on its own"
        )
    return None
