"""Sparsity levels, N:M patterns, parameter budgets and zero-shot task names as the user gives
them: checked and counted without tensors, so configs and forms validate them without torch
(``core.methods.masks`` selects the masks; ``core.methods.structure.budget`` maps a budget to
a method's knob)."""

from __future__ import annotations

import math
import numbers
from collections.abc import Iterable
from fractions import Fraction

from core.errors import ConfigError
from core.names import BUDGET_KINDS, TASK_NAMES


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


def check_budget(budget: float) -> float:
    """A parameter budget's range, the one rule: a fraction of the decoder in (0, 1)."""
    if isinstance(budget, bool) or not isinstance(budget, numbers.Real):
        raise ConfigError(f"a parameter budget must be a number in (0, 1), got {budget!r}")
    if not 0.0 < budget < 1.0:  # also rejects NaN
        raise ConfigError(f"a parameter budget is a fraction in (0, 1), got {budget}")
    return float(budget)


def parse_budget(text: str | float | None) -> float | None:
    """``--budget params=0.25`` (the fraction of decoder parameters to remove) -> 0.25;
    None or empty -> None."""
    if text is None or (isinstance(text, str) and not text.strip()):
        return None
    if isinstance(text, numbers.Real) and not isinstance(text, bool):
        return check_budget(text)
    kind, eq, value = str(text).strip().partition("=")
    try:
        if eq and kind.strip() in BUDGET_KINDS:
            return check_budget(float(value))
    except ValueError:
        pass
    raise ConfigError(
        f"--budget takes {'|'.join(BUDGET_KINDS)}=F, the fraction of decoder parameters to "
        f"remove (e.g. params=0.25), got {text!r}"
    )


def parse_tasks(text: str | Iterable[str]) -> tuple[str, ...]:
    """'piqa,arc_easy' (or 'all') -> validated zero-shot task names in the given order,
    duplicates dropped."""
    names = text.split(",") if isinstance(text, str) else list(text)
    names = [n.strip() for n in names if n and n.strip()]
    if names == ["all"]:
        return TASK_NAMES
    if not names:
        raise ConfigError(f"no zero-shot task given; choose from {', '.join(TASK_NAMES)} or all")
    for n in names:
        if n not in TASK_NAMES:
            raise ConfigError(f"unknown task {n!r}; known tasks: {', '.join(TASK_NAMES)} (or all)")
    return tuple(dict.fromkeys(names))
