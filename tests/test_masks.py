"""Mask selectors: exact counts, deterministic ties, N:M groups, input validation."""

from __future__ import annotations

import math

import pytest
import torch

from core.errors import ConfigError
from core.methods.masks import (
    check_sparsity,
    lowest_k_mask,
    nm_prune_mask,
    prune_count,
    scope_dim,
    topk_prune_mask,
)
from core.methods.wanda import wanda_mask
from core.settings.patterns import parse_pattern


def tied_scores(rows: int, cols: int, levels: int = 3, seed: int = 0) -> torch.Tensor:
    """Scores with only ``levels`` distinct values, like |W| of 4-bit dequantised weights."""
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, levels, (rows, cols), generator=g).float()


@pytest.mark.parametrize(
    ("text", "expected"),
    [("unstructured", None), ("2:4", (2, 4)), (" 4:8 ", (4, 8)), ("1:3", (1, 3))],
)
def test_parse_pattern(text: str, expected: tuple[int, int] | None) -> None:
    assert parse_pattern(text) == expected


@pytest.mark.parametrize("text", ["4:2", "2:2", "0:4", "2:4:8", "half", "a:b", ""])
def test_parse_pattern_rejects(text: str) -> None:
    with pytest.raises(ConfigError):
        parse_pattern(text)


@pytest.mark.parametrize("bad", [1.0, -0.1, math.nan, 1.5, "0.5", True])
def test_check_sparsity_rejects(bad: object) -> None:
    with pytest.raises(ConfigError):
        check_sparsity(bad)  # type: ignore[arg-type]


def test_check_sparsity_accepts() -> None:
    assert check_sparsity(0) == 0.0
    assert check_sparsity(0.5) == 0.5


def test_prune_count_reads_the_decimal() -> None:
    assert 0.29 * 100 < 29  # the float trap prune_count avoids
    assert prune_count(100, 0.29) == 29
    assert prune_count(10, 0.7) == 7
    assert prune_count(7, 0.5) == 3
    assert prune_count(5, 0.0) == 0


@pytest.mark.parametrize("sparsity", [0.0, 0.25, 0.5, 0.7, 0.9])
def test_topk_per_row_exact_with_ties(sparsity: float) -> None:
    scores = tied_scores(16, 40)
    mask = topk_prune_mask(scores, sparsity, dim=-1)
    k = prune_count(40, sparsity)
    assert mask.dtype == torch.bool and mask.shape == scores.shape
    assert (mask.sum(dim=1) == k).all()
    if 0 < k < 40:  # every pruned score is <= every kept score of the same row
        pruned_max = scores.masked_fill(~mask, -math.inf).amax(dim=1)
        kept_min = scores.masked_fill(mask, math.inf).amin(dim=1)
        assert (pruned_max <= kept_min).all()


def test_topk_all_equal_prunes_lowest_indices() -> None:
    mask = topk_prune_mask(torch.ones(3, 8), 0.5)
    assert mask[:, :4].all() and not mask[:, 4:].any()


def test_topk_matrix_scope_exact_with_ties() -> None:
    scores = tied_scores(16, 40, levels=2)
    mask = topk_prune_mask(scores, 0.37, dim=None)
    assert mask.sum().item() == prune_count(16 * 40, 0.37)
    assert scores[mask].max() <= scores[~mask].min()


def test_topk_is_deterministic() -> None:
    scores = tied_scores(8, 64, levels=2, seed=3)
    assert torch.equal(topk_prune_mask(scores, 0.5), topk_prune_mask(scores.clone(), 0.5))


@pytest.mark.parametrize(("n", "m", "width"), [(2, 4, 16), (4, 8, 32), (1, 3, 12), (3, 4, 8)])
def test_nm_exact_per_group_with_ties(n: int, m: int, width: int) -> None:
    scores = tied_scores(10, width, levels=2)
    mask = nm_prune_mask(scores, n, m)
    groups = mask.reshape(10, width // m, m)
    assert (groups.sum(dim=-1) == n).all()
    s = scores.reshape(10, width // m, m)
    pruned_max = s.masked_fill(~groups, -math.inf).amax(dim=-1)
    kept_min = s.masked_fill(groups, math.inf).amin(dim=-1)
    assert (pruned_max <= kept_min).all()


def test_nm_rejects_bad_width_and_pattern() -> None:
    with pytest.raises(ConfigError):
        nm_prune_mask(torch.rand(4, 8), 2, 3)  # 3 does not divide 8
    with pytest.raises(ConfigError):
        nm_prune_mask(torch.rand(4, 8), 4, 2)


def test_lowest_k_mask_bounds() -> None:
    scores = torch.tensor([[3.0, 1.0, 2.0]])
    assert lowest_k_mask(scores, 3).all()
    assert lowest_k_mask(scores, 1).tolist() == [[False, True, False]]
    with pytest.raises(ValueError, match="cannot prune 4 of 3"):
        lowest_k_mask(scores, 4)


def test_scope_dim() -> None:
    assert scope_dim("row") == -1
    assert scope_dim("matrix") is None
    with pytest.raises(ConfigError):
        scope_dim("column")


def test_row_mask_fractional_count_goes_to_cheapest_rows() -> None:
    scores = torch.tensor([[1.0, 2.0, 3.0], [0.5, 0.6, 9.0], [4.0, 5.0, 6.0]])
    mask = topk_prune_mask(scores, 0.5, dim=-1)  # ⌊0.5·9⌋ = 4: one per row + one extra
    assert mask.sum(1).tolist() == [1, 2, 1]  # row 1's second entry (0.6) is the cheapest
    assert mask[1, :2].all() and mask[0, 0] and mask[2, 0]


def sorted_row_mask(scores: torch.Tensor, sparsity: float) -> torch.Tensor:
    """The per-row rule by sorting (the definition ``topk_prune_mask`` selects without
    sorting): each row's ⌊p·in⌋ first in stable order, then one more in the rows whose next
    entry is cheapest overall, ties to the lower row."""
    rows, cols = scores.shape
    k, extra = divmod(prune_count(rows * cols, sparsity), rows)
    ordered, order = torch.sort(scores, dim=-1, stable=True)
    counts = torch.full((rows,), k)
    if extra:
        counts[torch.sort(ordered[:, k], stable=True).indices[:extra]] += 1
    ranks = torch.arange(cols).expand(rows, cols)
    return torch.zeros_like(scores, dtype=torch.bool).scatter_(-1, order, ranks < counts[:, None])


@pytest.mark.parametrize("sparsity", [0.3, 0.37, 0.5, 0.61])
@pytest.mark.parametrize("levels", [2, 5, 0])
def test_row_mask_fractional_count_is_the_stable_sorts(sparsity: float, levels: int) -> None:
    """OWL's per-layer ratios leave counts that are not a multiple of the rows: the selection
    path equals the sort's mask bit for bit, heavy ties included (levels 0: no ties)."""
    scores = tied_scores(13, 37, levels=levels, seed=5) if levels else torch.rand(13, 37)
    expected = sorted_row_mask(scores, sparsity)
    assert prune_count(13 * 37, sparsity) % 13  # the fractional path is taken
    assert torch.equal(topk_prune_mask(scores, sparsity, dim=-1), expected)
    signs = torch.randint(0, 2, scores.shape, generator=torch.Generator().manual_seed(1)) * 2 - 1
    W = scores * signs  # Wanda's scores |W|·‖X_j‖ with unit norms are the scores
    ones = torch.ones(37, dtype=torch.float64)
    assert torch.equal(wanda_mask(W, ones, sparsity, block_bytes=8 * 37 * 4), expected)
