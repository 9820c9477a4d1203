"""Wanda: pruning by weights and activations (Sun, Liu, Bair, Kolter; arXiv 2306.11695).

Score S_ij = |W_ij| · ‖X_j‖₂ (paper Eq. 1), X_j being input feature j over all calibration
tokens. Scores are compared within each output row and the lowest ⌊p·C_in⌋ are zeroed; the
kept weights are not updated (papers.md §4). A mask outside a run is
``core.pruning.masks.score_mask(wanda_scores(W, col_sq_norms), sparsity, scope, nm)``.
"""

from __future__ import annotations

import torch

from core.errors import ConfigError
from core.methods import register
from core.methods.base import LinearStats
from core.methods.linear import ScopedOptions, ScoreMethod


def wanda_scores(W: torch.Tensor, col_sq_norms: torch.Tensor) -> torch.Tensor:
    """S = |W| · ‖X_j‖₂ (Wanda Eq. 1). W: (out, in); col_sq_norms: (in,) = ‖X_j‖²₂ = diag(X Xᵀ).

    Any positive rescaling of the norms (the reference keeps a running mean) leaves every
    per-row ranking unchanged. The scores are float64 (|W| of a float32 weight and the
    runner's float64 norms): a float32 product would round two near-equal scores to the
    same value or swap them, and which weights are kept should not hang on that last bit.
    """
    norms = col_sq_norms.to(device=W.device, dtype=torch.float64).clamp_min(0.0).sqrt()
    return W.to(torch.float64).abs() * norms.unsqueeze(0)  # (out, in) float64


# Wanda's options are the scoped ones as they stand: "row", the paper's comparison group, by
# default; "matrix" is the paper's ablation.
WandaOptions = ScopedOptions


@register
class Wanda(ScoreMethod):
    """Wanda pruning: |W|·‖X_j‖ scores compared per output row, no weight update."""

    name = "wanda"
    options_cls = WandaOptions

    def scores(self, W: torch.Tensor, stats: LinearStats | None) -> torch.Tensor:
        if stats is None:
            raise ConfigError("wanda needs calibration statistics (the input column norms)")
        return wanda_scores(W, stats.col_sq_norms)
