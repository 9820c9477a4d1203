"""Paper A's accuracy relation (A2) with intervals: ln(acc_p/acc₀) = κ·(1 − s_p) + c by
weighted least squares, and its error predicting an s left out.

Items play the role windows play for perplexity: each replicate draws the items once (paired
across the points and the dense model) and the calibration seeds per point, and every
interval is the studentised one of core.analysis.uncertainty. The verdict that reads them is
core.analysis.verdicts.accuracy_verdict.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from core.analysis.uncertainty import DEFAULT_BOOT, Bootstrap
from core.errors import ConfigError


def line_fits(x: np.ndarray, y: np.ndarray, w: np.ndarray | None = None) -> np.ndarray:
    """Weighted least squares y ≈ a·x + b along the last axis. x: (P,), y: (..., P) ->
    (..., 2) of (a, b); NaN where x has fewer than two distinct values."""
    x = np.asarray(x, dtype=float)
    w = np.ones_like(x) if w is None else np.asarray(w, dtype=float)
    sw = w.sum()
    xm = (w * x).sum() / sw
    sxx = (w * (x - xm) ** 2).sum()
    if np.unique(x).size < 2 or sxx <= 0:
        return np.full((*np.shape(y)[:-1], 2), np.nan)
    ym = (y * w).sum(axis=-1) / sw
    a = ((y - ym[..., None]) * (w * (x - xm))).sum(axis=-1) / sxx
    return np.stack([a, ym - a * xm], axis=-1)


def accuracy_loo(x: np.ndarray, acc: np.ndarray, acc0: np.ndarray, w: np.ndarray) -> np.ndarray:
    """Mean |acc_pred − acc| over the points, each predicted by the (A2) line fitted on the
    others (leave-one-s-out). acc: (..., P), acc0: (...,); NaN with fewer than 3 points (two
    are needed to fit and one to predict) or where an accuracy is 0."""
    acc = np.asarray(acc, dtype=float)
    acc0 = np.asarray(acc0, dtype=float)
    n = len(x)
    if n < 3:
        return np.full(acc.shape[:-1], np.nan)
    with np.errstate(divide="ignore", invalid="ignore"):
        y = np.log(acc / acc0[..., None])
    y = np.where(np.isfinite(y), y, np.nan)
    errs = []
    for p in range(n):
        keep = np.arange(n) != p
        fit = line_fits(x[keep], y[..., keep], w[keep])
        pred = acc0 * np.exp(fit[..., 0] * x[p] + fit[..., 1])
        errs.append(np.abs(pred - acc[..., p]))
    return np.mean(errs, axis=0)


def accuracy_intervals(
    s: Sequence[float],
    correct: Sequence[np.ndarray],
    dense: np.ndarray,
    boot: Bootstrap = DEFAULT_BOOT,
) -> dict[str, Any]:
    """(A2) with intervals: ln(acc_p/acc₀) = κ·(1 − s_p) + c by weighted least squares.

    correct: per pruned point (seeds, items) 0/1 (or acc_norm) scores on one task; dense:
    (items,). Weights 1/SE² of ln(acc_p/acc₀) by the delta method, SE² = var_p/(n·acc_p²)
    + var₀/(n·acc₀²), from the point estimates. Replicates where an accuracy is 0 give NaN
    (dropped). Returns κ, c, acc₀ and the leave-one-s-out error with intervals, and the rows.
    """
    if len(s) != len(correct):
        raise ConfigError(f"{len(s)} sparsities but {len(correct)} points")
    cols = [np.atleast_2d(np.asarray(a, dtype=float)) for a in [*correct, dense]]
    r = boot.resample(cols)
    x = 1.0 - np.asarray(s, dtype=float)
    n, p = cols[0].shape[-1], len(s)
    acc = r.est
    var = np.array([a.var() for a in cols])
    with np.errstate(divide="ignore", invalid="ignore"):
        se2 = var[:-1] / (n * acc[:-1] ** 2) + var[-1] / (n * acc[-1] ** 2)
    w = np.where(se2 > 0, 1.0 / np.where(se2 > 0, se2, 1.0), 1.0)

    def stat(m: np.ndarray) -> np.ndarray:
        with np.errstate(divide="ignore", invalid="ignore"):
            y = np.log(m[..., :p] / m[..., p:])
        fit = line_fits(x, np.where(np.isfinite(y), y, np.nan), w)
        loo = accuracy_loo(x, m[..., :p], m[..., p], w)
        return np.concatenate([fit, m[..., p:], loo[..., None], m[..., :p]], axis=-1)

    kappa, intercept, *rest = r.bands(stat).intervals()
    acc0, loo, *rows = (iv.at_least(0.0) for iv in rest)  # accuracies and errors are >= 0
    return {
        "kappa": kappa,
        "intercept": intercept,
        "acc0": acc0,
        "loo": loo,
        "rows": [{"s": float(v), **iv.as_dict("acc")} for v, iv in zip(s, rows, strict=True)],
    }
