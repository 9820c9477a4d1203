"""Magnitude pruning: zero the weights of smallest |W|, with no calibration data and no update.

The baseline of the Wanda and SparseGPT papers (papers.md §4, §7). The reference code
thresholds over the whole matrix (``scope="matrix"``); ``scope="row"`` compares within each
output row, Wanda's comparison group, so the two differ only in their score. A mask outside a
run is ``core.methods.masks.score_mask(W.abs(), sparsity, scope, nm)``.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from core.methods import register
from core.methods.base import LinearStats
from core.methods.linear import ScopedOptions, ScoreMethod, scope_option


@dataclass(frozen=True)
class MagnitudeOptions(ScopedOptions):
    """scope: "matrix" (one threshold per weight matrix, as in the reference) or "row"."""

    scope: str = scope_option("matrix")


@register
class Magnitude(ScoreMethod):
    """|W| pruning (per matrix or per row). Calibration data only serves the error report."""

    name = "magnitude"
    options_cls = MagnitudeOptions

    def scores(self, W: torch.Tensor, stats: LinearStats | None) -> torch.Tensor:
        return W.abs()
