"""Magnitude pruning: zero the weights of smallest |W|, with no calibration data and no update.

The baseline of the Wanda and SparseGPT papers (papers.md §4, §7). The reference code
thresholds over the whole matrix (``scope="matrix"``); ``scope="row"`` compares within each
output row, Wanda's comparison group, so the two differ only in their score.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from core.masks import nm_prune_mask, scope_dim, topk_prune_mask
from core.methods import register
from core.methods.base import LinearStats
from core.methods.linear import LinearwiseMethod


def magnitude_mask(
    W: torch.Tensor,
    sparsity: float,
    scope: str = "matrix",
    nm: tuple[int, int] | None = None,
) -> torch.Tensor:
    """Prune mask keeping the top-k |W_ij|: ⌊p·in⌋ zeros per row, ⌊p·numel⌋ per matrix, or N:M.

    W: (out, in). With ``nm`` the pattern alone decides and ``sparsity`` is ignored.
    """
    dim = scope_dim(scope)
    scores = W.abs()
    if nm is not None:
        return nm_prune_mask(scores, *nm)
    return topk_prune_mask(scores, sparsity, dim)


@dataclass(frozen=True)
class MagnitudeOptions:
    """scope: "matrix" (one threshold per weight matrix, as in the reference) or "row"."""

    scope: str = "matrix"

    def __post_init__(self) -> None:
        scope_dim(self.scope)  # validates


@register
class Magnitude(LinearwiseMethod):
    """|W| pruning (per matrix or per row). Calibration data only serves the error report."""

    name = "magnitude"
    options_cls = MagnitudeOptions
    needs_gram = False  # column norms + a token sample suffice (no O(in²) Gram products)
    options: MagnitudeOptions

    def prune_weight(
        self,
        W: torch.Tensor,
        stats: LinearStats | None,
        sparsity: float,
        nm: tuple[int, int] | None,
    ) -> tuple[torch.Tensor, torch.Tensor, dict[str, Any]]:
        mask = magnitude_mask(W, sparsity, self.options.scope, nm)
        return W.masked_fill(mask, 0.0), mask, {}
