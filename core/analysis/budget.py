"""Methods compared at matched budgets, not at equal "sparsity".

A sparsity means different things per method: Wanda's s is the fraction of targeted weights
zeroed, SliceGPT's the fraction of the residual width removed (on a model with tied embeddings
slicing can even *add* parameters, since the head gets its own copy). So every run is placed
by what it keeps:

- ``kept_params``: non-zero parameters of the whole model (embeddings and head included, a
  tied matrix counted once) over the dense model's parameters;
- ``latency``: measured forward time of one window over the dense model's, on this machine
  (unstructured and N:M zeros do not speed up dense kernels; slicing does).

``matched_table`` reads each series' perplexity at common budget levels by interpolating
ln PPL linearly between its two nearest runs (never extrapolating), intervals alike, and
``winner`` names the best series at a level only when its interval clears every other's.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from core.errors import ConfigError

BUDGETS = ("kept_params", "latency")
LEVELS = (0.95, 0.9, 0.85, 0.8, 0.75, 0.7, 0.6, 0.5)


def _interp_log(x: np.ndarray, y: np.ndarray, at: float) -> float:
    """ln-linear interpolation of y at ``at`` inside the range of x (NaN outside)."""
    order = np.argsort(x)
    x, y = x[order], y[order]
    if not x[0] <= at <= x[-1]:
        return float("nan")
    return float(np.exp(np.interp(at, x, np.log(y))))


def matched_table(
    points: pd.DataFrame, budget: str = "kept_params", levels: Sequence[float] = LEVELS
) -> pd.DataFrame:
    """Perplexity of every series at common budget levels.

    points columns: series, ``budget`` (fraction of the dense model kept), ppl, and
    optionally ppl_lo / ppl_hi (its 95% interval). Returns rows {level, series, ppl, ppl_lo,
    ppl_hi}; a series contributes only at levels inside the range its runs cover.
    """
    if budget not in BUDGETS:
        raise ConfigError(f"budget must be one of {BUDGETS}, got {budget!r}")
    missing = {"series", budget, "ppl"} - set(points.columns)
    if missing:
        raise ConfigError(f"points lack columns {sorted(missing)}")
    rows = []
    for series, g in points.dropna(subset=[budget, "ppl"]).groupby("series", sort=True):
        x = g[budget].to_numpy(float)
        for level in levels:
            row = {"level": float(level), "series": series}
            for col in ("ppl", "ppl_lo", "ppl_hi"):
                src = col if col in g else "ppl"
                row[col] = _interp_log(x, g[src].to_numpy(float), level)
            if np.isfinite(row["ppl"]):
                rows.append(row)
    return pd.DataFrame(rows, columns=["level", "series", "ppl", "ppl_lo", "ppl_hi"])


def winner(table: pd.DataFrame, level: float) -> str | None:
    """The series with the lowest perplexity at ``level`` if its interval lies wholly below
    every other series' interval there; None when intervals overlap or fewer than two series
    reach that level (rule written in docs/statistics.md)."""
    at = table[np.isclose(table["level"], level)].sort_values("ppl")
    if len(at) < 2:
        return None
    best, rest = at.iloc[0], at.iloc[1:]
    return str(best["series"]) if (best["ppl_hi"] < rest["ppl_lo"]).all() else None
