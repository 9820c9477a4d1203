"""Wanda: pruning by weights and activations (Sun, Liu, Bair, Kolter; arXiv 2306.11695).

Score S_ij = |W_ij| · ‖X_j‖₂ (paper Eq. 1), X_j being input feature j over all calibration
tokens. Scores are compared within each output row and the lowest ⌊p·C_in⌋ are zeroed; the
kept weights are not updated (papers.md §4). A mask outside a run is
``core.methods.masks.score_mask(wanda_scores(W, col_sq_norms), sparsity, scope, nm)``;
``wanda_mask`` is the same mask computed a block of rows at a time.
"""

from __future__ import annotations

import torch

from core.errors import ConfigError
from core.methods import register
from core.methods.base import LinearStats
from core.methods.linear import PrunedWeight, ScopedOptions, ScoreMethod, WeightJob
from core.methods.masks import (
    add_cheapest_next,
    lowest_k_and_next,
    lowest_k_mask,
    nm_prune_mask,
    score_mask,
)
from core.settings.patterns import check_sparsity, prune_count

# float64 scores of one block of rows
SCORE_BLOCK_BYTES = 4 * 2**20


def _column_norms(col_sq_norms: torch.Tensor, device: torch.device) -> torch.Tensor:
    """‖X_j‖₂ (in,) in float64 from the squared norms."""
    return col_sq_norms.to(device=device, dtype=torch.float64).clamp_min(0.0).sqrt()


def wanda_scores(W: torch.Tensor, col_sq_norms: torch.Tensor) -> torch.Tensor:
    """S = |W| · ‖X_j‖₂ (Wanda Eq. 1). W: (out, in); col_sq_norms: (in,) = ‖X_j‖²₂ = diag(X Xᵀ).

    Any positive rescaling of the norms (the reference keeps a running mean) leaves every
    per-row ranking unchanged. The scores are float64 (|W| of a float32 weight and the
    runner's float64 norms): a float32 product would round two near-equal scores to the
    same value or swap them, and which weights are kept should not hang on that last bit.
    """
    norms = _column_norms(col_sq_norms, W.device)
    return W.to(torch.float64).abs() * norms.unsqueeze(0)  # (out, in) float64


def wanda_mask(
    W: torch.Tensor,
    col_sq_norms: torch.Tensor,
    sparsity: float,
    scope: str = "row",
    nm: tuple[int, int] | None = None,
    block_bytes: int = SCORE_BLOCK_BYTES,
) -> torch.Tensor:
    """``score_mask(wanda_scores(W, col_sq_norms), sparsity, scope, nm)``, the same mask bit
    for bit, with at most one block of rows' float64 scores alive at once (about
    ``block_bytes`` each) instead of the whole matrix's: 84 MB of transients for a
    1024 x 3584 weight become ~12 MB, and a streamed run's peak stays near its budget.

    Every row's selection depends on that row alone (per-row comparison, N:M groups), except
    where ``sparsity · in`` is not an integer: the remaining entries then go one per row to
    the rows whose next-lowest score is smallest (``topk_prune_mask``), decided here from each
    row's next-lowest score and its column, kept while the blocks pass. A matrix-wide
    comparison (scope "matrix", unstructured) needs every score at once and takes them so.
    """
    rows, cols = W.shape
    if nm is None and scope != "row":
        return score_mask(wanda_scores(W, col_sq_norms), sparsity, scope)
    norms = _column_norms(col_sq_norms, W.device).unsqueeze(0)  # (1, in)
    step = max(1, block_bytes // (8 * max(cols, 1)))
    mask = torch.zeros(rows, cols, dtype=torch.bool, device=W.device)
    if nm is not None:
        for r in range(0, rows, step):
            mask[r : r + step] = nm_prune_mask(W[r : r + step].to(torch.float64).abs() * norms, *nm)
        return mask
    total = prune_count(rows * cols, check_sparsity(sparsity))
    k, extra = divmod(total, rows)
    if k == 0 and extra == 0:
        return mask
    next_score = torch.empty(rows if extra else 0, dtype=torch.float64, device=W.device)
    next_col = torch.empty(rows if extra else 0, dtype=torch.long, device=W.device)
    for r in range(0, rows, step):
        scores = W[r : r + step].to(torch.float64).abs() * norms  # (block, in)
        if not extra:
            mask[r : r + step] = lowest_k_mask(scores, k, dim=-1)
            continue
        mask[r : r + step], next_col[r : r + step], next_score[r : r + step] = lowest_k_and_next(
            scores, k
        )
    if extra:  # the cheapest (k+1)-th entries overall, ties to lower rows (as topk_prune_mask)
        add_cheapest_next(mask, next_col, next_score, extra)
    return mask


# Wanda's options are the scoped ones as they stand: "row", the paper's comparison group, by
# default; "matrix" is the paper's ablation.
WandaOptions = ScopedOptions


@register
class Wanda(ScoreMethod):
    """Wanda pruning: |W|·‖X_j‖ scores compared per output row, no weight update."""

    name = "wanda"
    options_cls = WandaOptions

    def scores(self, W: torch.Tensor, stats: LinearStats | None) -> torch.Tensor:
        return wanda_scores(W, self._norms(stats))

    def prune_weight(self, job: WeightJob) -> PrunedWeight:
        """The lowest scores zeroed, a block of rows at a time (``wanda_mask``)."""
        norms = self._norms(job.stats)
        mask = wanda_mask(job.W, norms, job.sparsity, self.options.scope, job.nm)
        return PrunedWeight(job.W.masked_fill(mask, 0.0), mask)

    @staticmethod
    def _norms(stats: LinearStats | None) -> torch.Tensor:
        if stats is None:
            raise ConfigError("wanda needs calibration statistics (the input column norms)")
        return stats.col_sq_norms
