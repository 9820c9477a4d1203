"""ShortGPT (Men et al., 2024, "ShortGPT: Layers in large language models are more redundant
than you expect"): remove the n decoder layers with the lowest Block Influence,

    BI_i = 1 − E_t[ x_{i,t}·x_{i+1,t} / (‖x_{i,t}‖·‖x_{i+1,t}‖) ]          (Eq. 1)

with x_i the hidden state entering layer i and x_{i+1} the one leaving it, the expectation
over every calibration token, measured once on the dense model. A layer that barely turns
the residual stream does little. The knob is the fraction of layers removed; n is the
whole number nearest to it times the layer count, a tie going to fewer layers (a parameter
budget maps to it exactly: every layer holds the same parameters). The smaller model is a
plain transformers model with fewer layers (its config says so).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from core.adapters import ModelAdapter
from core.errors import ConfigError
from core.methods import register
from core.methods.base import ApplyPlan
from core.methods.structure.budget import DecoderCounts, Knob, nearest_count
from core.methods.structure.method import StructuredMethod
from core.methods.structure.stats import block_influence_walk
from core.methods.work import LayerWork, WorkShape
from core.settings.field import option
from core.settings.patterns import check_budget


@dataclass(frozen=True)
class ShortGPTOptions:
    """batch_size: calibration sequences per forward."""

    batch_size: int = option(
        8, "Sequences per forward", "calibration batch", (1, 1024), expert=True
    )

    def __post_init__(self) -> None:
        if not isinstance(self.batch_size, int) or self.batch_size < 1:
            raise ConfigError(f"batch_size must be a positive integer, got {self.batch_size!r}")


def layers_to_remove(fraction: float, n_layers: int) -> int:
    """The whole number of layers nearest to fraction·n_layers (a tie: fewer), at least one
    and at most n_layers − 1 (ConfigError otherwise)."""
    n = nearest_count(fraction * n_layers)
    if not 1 <= n < n_layers:
        raise ConfigError(
            f"removing {fraction:g} of {n_layers} layers is {fraction * n_layers:.2f} layers, "
            f"which rounds to {n}: ShortGPT removes 1 to {n_layers - 1} whole layers"
        )
    return n


def shortgpt_knob(counts: DecoderCounts, budget: float) -> Knob:
    """A budget as a whole number of layers (the nearest; a tie removes fewer): every layer
    holds counts.layer parameters, so removing n of L removes n/L of them."""
    n = layers_to_remove(check_budget(budget), counts.n_layers)
    return Knob(n / counts.n_layers, n / counts.n_layers, f"{n} of {counts.n_layers} layers")


def lowest(scores: list[float], n: int) -> list[int]:
    """Indices of the n lowest scores (ties: the earlier layer first), ascending."""
    order = sorted(range(len(scores)), key=lambda i: (scores[i], i))
    return sorted(order[:n])


@register
class ShortGPT(StructuredMethod):
    """ShortGPT: remove the decoder layers with the lowest Block Influence."""

    name = "shortgpt"
    options_cls = ShortGPTOptions
    options: ShortGPTOptions
    removes = "whole decoder layers"

    def layer_work(self, shape: WorkShape) -> LayerWork:
        """Per layer: the cosine of every calibration token's input and output, 3·tokens·d
        (the forward itself is a calibration pass)."""
        return LayerWork(3.0 * shape.tokens * shape.geo.hidden_size)

    def budget_knob(self, counts: DecoderCounts, budget: float) -> Knob:
        return shortgpt_knob(counts, budget)

    def check_knob(self, counts: DecoderCounts, sparsity: float) -> None:
        layers_to_remove(sparsity, counts.n_layers)

    def shrink(
        self, adapter: ModelAdapter, calib: torch.Tensor, plan: ApplyPlan
    ) -> tuple[list[dict[str, Any]], list[int], str]:
        n_layers = adapter.n_layers
        n = layers_to_remove(plan.sparsity, n_layers)
        bi = block_influence_walk(
            adapter, calib, plan.device, self.options.batch_size, plan.on_progress
        )
        removed = set(lowest(bi, n))
        kept = [i for i in range(n_layers) if i not in removed]
        adapter.drop_layers(kept)
        rows = [
            {"layer": i, "kept": i not in removed, "block_influence": bi[i]}
            for i in range(n_layers)
        ]
        return rows, kept, f"{n} of {n_layers} layers ({', '.join(map(str, sorted(removed)))})"
