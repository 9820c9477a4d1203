"""Sparsity levels and N:M patterns as numbers: checked and counted without tensors, so
configs and forms validate them without torch (``core.pruning.masks`` selects the masks)."""

from __future__ import annotations

import math
import numbers
from fractions import Fraction

from core.errors import ConfigError


def check_sparsity(sparsity: float) -> float:
    """Return ``sparsity`` as a float if it lies in [0, 1), else raise ConfigError."""
    if isinstance(sparsity, bool) or not isinstance(sparsity, numbers.Real):
        raise ConfigError(f"sparsity must be a number in [0, 1), got {sparsity!r}")
    if not 0.0 <= sparsity < 1.0:  # also rejects NaN
        raise ConfigError(f"sparsity must be in [0, 1), got {sparsity}")
    return float(sparsity)


def prune_count(n: int, sparsity: float) -> int:
    """Number of entries to prune out of ``n``: ⌊sparsity·n⌋ (Wanda §3, papers.md §4).

    ``sparsity`` is read as the decimal it prints as, so 0.29 of 100 is 29 and not the 28
    that float arithmetic gives (0.29 * 100 == 28.999999999999996).
    """
    return math.floor(Fraction(repr(float(sparsity))) * n)


def parse_pattern(pattern: str) -> tuple[int, int] | None:
    """Parse a sparsity pattern: "unstructured" -> None, "N:M" -> (N, M) with 1 <= N < M."""
    text = pattern.strip().lower()
    if text == "unstructured":
        return None
    parts = text.split(":")
    if len(parts) != 2 or not all(p.strip().isdigit() for p in parts):
        raise ConfigError(f"pattern must be 'unstructured' or 'N:M' (e.g. '2:4'), got {pattern!r}")
    n, m = (int(p) for p in parts)
    check_nm(n, m)
    return n, m


def check_nm(n: int, m: int) -> None:
    """N:M keeps M-N of every M weights, so it needs 1 <= N < M."""
    if not 1 <= n < m:
        raise ConfigError(f"N:M pattern needs 1 <= N < M, got {n}:{m}")
