"""Structured Wanda ("wanda-sp"), the baseline of FLAP (An et al., AAAI 2024; the reference
``prune_wanda_sp`` of CASIA-IVA-Lab/FLAP): Wanda's score |W_ij|·‖x_j‖ summed over a residual
writer's output rows scores each of its input channels,

    S_j = Σ_i |W_ij|·‖x_j‖₂        (W: o_proj or down_proj, x_j its input channel j),

a KV group's score is the sum over its query heads' channels (a KV head goes with the query
heads that read it: under GQA the group is removed whole), and every layer removes the same
ratio r of its KV groups (⌊r·G⌋, at least one kept) and of its MLP channels (⌊r·I⌋), the
lowest-scoring ones, sequentially: layer i is scored on the inputs the already pruned
layers 0..i−1 produce. No bias is added. Every layer ends alike, so the config states the
smaller model (one head count and MLP width) and plain transformers reloads it.

Deliberate differences from the reference: the reference averages over rows and takes
‖x_j‖ per calibration sequence (a constant factor: the ranking is the same) and removes
query heads of a multi-head model; here whole KV groups, so that GQA models stay GQA.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from core.adapters import ModelAdapter
from core.errors import ConfigError
from core.methods import register
from core.methods.base import ApplyPlan
from core.methods.structure.budget import DecoderCounts, Knob, floor_count
from core.methods.structure.edit import group_size, keep_channels, keep_groups
from core.methods.structure.method import StructuredMethod, width_refusal
from core.methods.structure.stats import WriterMoments, writer_walk
from core.methods.work import LayerWork, WorkShape
from core.settings.field import option
from core.settings.patterns import check_budget


@dataclass(frozen=True)
class WandaSPOptions:
    """batch_size: calibration sequences per forward."""

    batch_size: int = option(
        8, "Sequences per forward", "calibration batch", (1, 1024), expert=True
    )

    def __post_init__(self) -> None:
        if not isinstance(self.batch_size, int) or self.batch_size < 1:
            raise ConfigError(f"batch_size must be a positive integer, got {self.batch_size!r}")


def channel_scores(W: torch.Tensor, sq_norm: torch.Tensor) -> torch.Tensor:
    """S_j = Σ_i |W_ij|·‖x_j‖ for W (out, in) and ‖x_j‖² (in,): (in,) float64."""
    return (W.double().abs() * sq_norm.double().sqrt()[None]).sum(0)


def group_scores(channels: torch.Tensor, n_groups: int) -> torch.Tensor:
    """A KV group's score: the sum over its query heads' o_proj input channels,
    (n_groups · gs · hd,) -> (n_groups,)."""
    return channels.view(n_groups, -1).sum(1)


def lowest_mask(scores: torch.Tensor, n: int) -> torch.Tensor:
    """keep (len,) bool: False at the n lowest scores (ties: the earlier index first)."""
    keep = torch.ones(scores.numel(), dtype=torch.bool)
    keep[torch.sort(scores, stable=True).indices[:n]] = False
    return keep


def uniform_counts(ratio: float, n_groups: int, n_channels: int) -> tuple[int, int]:
    """(KV groups, MLP channels) every layer removes at ratio r: ⌊r·G⌋ and ⌊r·I⌋, keeping
    at least one of each."""
    return min(floor_count(ratio, n_groups), n_groups - 1), min(
        floor_count(ratio, n_channels), n_channels - 1
    )


def wanda_sp_knob(counts: DecoderCounts, budget: float) -> Knob:
    """The uniform ratio r whose groups and channels come nearest the budget (a tie: the
    smaller r). The candidates are every r where a count changes, c/I and k/G."""
    budget = check_budget(budget)
    G, n_ch = counts.n_groups, counts.n_channels
    best: tuple[float, float, float] | None = None  # (distance, ratio, removed)
    for ratio in sorted({c / n_ch for c in range(n_ch)} | {k / G for k in range(G)}):
        g, c = uniform_counts(ratio, G, n_ch)
        removed = (g * counts.group + c * counts.channel) / counts.layer
        if best is None or abs(removed - budget) < best[0] - 1e-12:
            best = (abs(removed - budget), ratio, removed)
    _, ratio, removed = best
    g, c = uniform_counts(ratio, G, n_ch)
    return Knob(ratio, removed, f"{g} of {G} KV groups and {c} of {n_ch} MLP channels per layer")


@register
class WandaSP(StructuredMethod):
    """Structured Wanda: every layer loses the same ratio of KV groups and MLP channels."""

    name = "wanda-sp"
    options_cls = WandaSPOptions
    options: WandaSPOptions
    calib_passes = 2.0  # each layer's statistics, then its pruned outputs for the next one
    removes = "KV groups and MLP channels (uniform)"

    def layer_work(self, shape: WorkShape) -> LayerWork:
        """Per layer: Σx² of the two writers' inputs, 2·tokens·(o_in + I), and their
        scores |W|·‖x‖, 2·d·(o_in + I)."""
        widths = shape.geo.in_features("o") + shape.geo.intermediate_size
        return LayerWork(2.0 * (shape.tokens + shape.geo.hidden_size) * widths)

    def refusal(self, geometry: Any, calib_seqlen: int | None = None) -> str | None:
        return width_refusal(geometry.traits)

    def budget_knob(self, counts: DecoderCounts, budget: float) -> Knob:
        return wanda_sp_knob(counts, budget)

    def shrink(
        self, adapter: ModelAdapter, calib: torch.Tensor, plan: ApplyPlan
    ) -> tuple[list[dict[str, Any]], list[int], str]:
        n_kv, _ = group_size(adapter, adapter.layers[0])
        n_ch = adapter.linears(adapter.layers[0], ("down",))["down"].in_features
        g, c = uniform_counts(plan.sparsity, n_kv, n_ch)
        rows: list[dict[str, Any]] = []

        def edit(i: int, layer: torch.nn.Module, moments: WriterMoments) -> None:
            o, down = adapter.attn_writer(layer), adapter.mlp_writer(layer)
            heads = group_scores(channel_scores(o.weight, moments.attn.sq_norm), n_kv)
            if g:
                keep_groups(adapter, layer, lowest_mask(heads, g))
            if c:
                keep_channels(
                    adapter, layer, lowest_mask(channel_scores(down.weight, moments.mlp.sq_norm), c)
                )
            rows.append({"layer": i, "kept": True, "kv_groups_removed": g, "channels_removed": c})

        writer_walk(adapter, calib, plan.device, self.options.batch_size, edit, plan.on_progress)
        return (
            rows,
            list(range(adapter.n_layers)),
            (f"{g} of {n_kv} KV groups and {c} of {n_ch} MLP channels in every layer"),
        )
