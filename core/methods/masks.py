"""Mask selection shared by every pruning method: pure tensor functions, no modules.

A *prune mask* is a bool tensor shaped like the weight, True where the weight is zeroed.
Every selector prunes an exact count and breaks ties deterministically, as a stable sort
would: among equal scores the lower index is pruned first. This matters for
weights dequantised from 4-bit formats, whose magnitudes take only a few distinct values; a
threshold rule (``score <= thr``, as in the reference code) would prune every tied entry.
"""

from __future__ import annotations

import torch

from core.errors import ConfigError
from core.names import SCOPES
from core.settings.patterns import check_nm, check_sparsity, prune_count


def scope_dim(scope: str) -> int | None:
    """Comparison group -> ``dim`` of ``topk_prune_mask``: "row" -> -1, "matrix" -> None."""
    if scope not in SCOPES:
        raise ConfigError(f"scope must be one of {', '.join(SCOPES)}, got {scope!r}")
    return -1 if scope == "row" else None


def score_mask(
    scores: torch.Tensor, sparsity: float, scope: str, nm: tuple[int, int] | None = None
) -> torch.Tensor:
    """Prune mask of the lowest ``scores`` (out, in): N:M when ``nm`` is given (``sparsity``
    is then ignored), else ``sparsity`` per output row or per matrix (``scope``)."""
    dim = scope_dim(scope)
    if nm is not None:
        return nm_prune_mask(scores, *nm)
    return topk_prune_mask(scores, sparsity, dim)


def lowest_k_mask(scores: torch.Tensor, k: int, dim: int | None = -1) -> torch.Tensor:
    """Bool mask of the ``k`` lowest scores along ``dim`` (per slice), or overall if None.

    Ties go to the lower index (stable sort), so exactly ``k`` entries are True per slice.
    """
    if dim is None:
        return lowest_k_mask(scores.reshape(1, -1), k, dim=-1).reshape(scores.shape)
    size = scores.shape[dim]
    if not 0 <= k <= size:
        raise ValueError(f"cannot prune {k} of {size} entries")
    if k == 0:
        return torch.zeros(scores.shape, dtype=torch.bool, device=scores.device)
    # The first k of a stable sort, without sorting: everything below the k-th smallest
    # value, then the entries equal to it in index order until k are taken. A selection is
    # O(size) where a sort is O(size·log size); the comparisons are exact, so the mask is
    # the stable sort's, bit for bit.
    kth = select_kth(scores, k, dim)
    below = scores < kth
    tied = scores == kth
    room = k - below.sum(dim=dim, keepdim=True)  # >= 1: kth itself is not below
    if bool((tied.sum(dim=dim, keepdim=True) <= room).all()):
        return below | tied  # every tie fits (the usual case)
    return below | (tied & (tied.cumsum(dim=dim) <= room))


def select_kth(scores: torch.Tensor, k: int, dim: int = -1) -> torch.Tensor:
    """The k-th smallest value (k >= 1) along ``dim``, kept as a size-1 dim: the largest of
    the k smallest (a partial selection, several times faster than a sort)."""
    return scores.topk(k, dim=dim, largest=False, sorted=False).values.amax(dim, keepdim=True)


def topk_prune_mask(scores: torch.Tensor, sparsity: float, dim: int | None = -1) -> torch.Tensor:
    """Prune the lowest scores, per output row (``dim=-1``) or over the whole tensor (None).

    scores: (out, in). ``dim=None`` prunes ⌊sparsity·numel⌋ entries: the per-matrix threshold
    of magnitude pruning. ``dim=-1`` is Wanda's per-output-row comparison group: every row
    prunes ⌊sparsity·in⌋ (papers.md §4) and, when sparsity·in is not an integer (OWL's
    per-layer ratios), the remaining ⌊sparsity·numel⌋ − out·⌊sparsity·in⌋ entries go one
    per row to the rows whose next-lowest score is smallest, so the matrix's sparsity is
    exact to one weight and a global target is met instead of undershot by up to 1/in.
    """
    sparsity = check_sparsity(sparsity)
    if dim is None or scores.dim() != 2 or dim not in (-1, 1):
        n = scores.numel() if dim is None else scores.shape[dim]
        return lowest_k_mask(scores, prune_count(n, sparsity), dim)
    rows, cols = scores.shape
    total = prune_count(rows * cols, sparsity)
    k, extra = divmod(total, rows)
    if extra == 0:
        return lowest_k_mask(scores, k, dim=-1)
    mask, next_col, next_score = lowest_k_and_next(scores, k)
    add_cheapest_next(mask, next_col, next_score, extra)
    return mask


def lowest_k_and_next(
    scores: torch.Tensor, k: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per row of scores (rows, n), k < n: the mask of the k lowest (``lowest_k_mask``) and
    the entry next in that order (the (k+1)-th of the stable sort): its column (rows,) and
    its score (rows,). Two selections, no sort."""
    mask = lowest_k_mask(scores, k, dim=-1)
    nxt = lowest_k_mask(scores, k + 1, dim=-1) & ~mask  # one entry per row: both are prefixes
    next_col = nxt.to(torch.uint8).argmax(dim=-1)
    return mask, next_col, scores.gather(-1, next_col[:, None]).squeeze(-1)


def add_cheapest_next(
    mask: torch.Tensor, next_col: torch.Tensor, next_score: torch.Tensor, extra: int
) -> None:
    """Prune one more entry in the ``extra`` rows whose next entry scores lowest overall, ties
    to the lower row (in place): how a count that is not a multiple of the rows is spread."""
    bonus = lowest_k_mask(next_score[None], extra, dim=-1)[0]  # (rows,) bool
    rows = bonus.nonzero().squeeze(-1)
    mask[rows, next_col[rows]] = True


def nm_prune_mask(scores: torch.Tensor, n: int, m: int) -> torch.Tensor:
    """N:M mask: in every group of M consecutive input columns of each row prune the N lowest.

    scores: (out, in) with ``in`` divisible by M. Exactly N entries per group are True.
    """
    check_nm(n, m)
    rows, cols = scores.shape
    if cols % m:
        raise ConfigError(f"N:M pattern {n}:{m} needs a width divisible by {m}, got {cols}")
    groups = scores.reshape(rows, cols // m, m)  # (out, in/M, M)
    return lowest_k_mask(groups, n, dim=-1).reshape(rows, cols)
