"""Synthetic SliceGPT sweeps with a known truth, for the tests of Paper A's statistics.

Window NLLs of a dense model and of points on the primary protocol's grid whose ln PPL / ln
PPL₀ = rel(s), with the noise a real sweep has at both levels:

    dense_w      = MU0 + window_sd·z_w                         (one corpus: shared windows)
    nll_{p,k,w}  = dense_w·rel(s_p)·(1 + seed_sd·g_{p,k})      (calibration seed k of point p)
                   + inter_sd·h_{p,w} + unit_sd·e_{p,k,w}       (point × window, residual)

so E[nll_p] / E[dense] = rel(s_p) exactly, and the true value of any statistic T of the column
means is T at ``truth(rel)``. The defaults are of a real sweep's size (16 windows; a seed moves
ln PPL by about 0.05 nats). ``draws`` batches independent sweeps along a leading axis (one
resampling of all of them is then one call), the way the coverage tests run.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from core.analysis.protocol import GRID as PROTOCOL_GRID

GRID = np.array(PROTOCOL_GRID)
MU0 = 3.0


# Each law's L/L₀ as a function of s, with the parameters it is made with.
def a1(s):
    return 1 / (1 - s)


def line(s):
    return 1 / (0.8 * (1 - s) + 0.15)


def linear(s):
    return 1 + 1.15 * s


def curved(s):
    return 1 + 0.9 * s + 0.5 * s * s / (1 - s)


MAKERS = {  # law -> (true parameters, L/L₀)
    "a1": ({}, a1),
    "line": ({"a": 0.8, "b": 0.15}, line),
    "linear": ({"kappa": 1.15}, linear),
    "curved": ({"kappa": 0.9, "kappa2": 0.5}, curved),
}


def misfit(s: np.ndarray) -> np.ndarray:
    """A curve no candidate law fits (the nesting law plus a wiggle, as real sweeps have
    systematic residuals), so every law's true out-of-sample error is away from 0."""
    return 1 + 1.2 * s + 0.5 * s * s / (1 - s) + 0.03 * np.sin(12 * s)


def sweep(
    rel: Callable[[np.ndarray], np.ndarray],
    draws: int | None = None,
    seed: int = 0,
    s: np.ndarray = GRID,
    n_seeds: int = 5,
    n_windows: int = 16,
    window_sd: float = 0.3,
    seed_sd: float = 0.015,
    inter_sd: float = 0.03,
    unit_sd: float = 0.02,
) -> tuple[list[np.ndarray], np.ndarray]:
    """(points, dense): points[p] (draws, n_seeds, n_windows) window NLLs, dense (draws,
    n_windows); without ``draws`` one sweep ((n_seeds, n_windows) and (n_windows,))."""
    rng = np.random.default_rng(seed)
    lead = () if draws is None else (draws,)
    dense = MU0 + window_sd * rng.standard_normal((*lead, n_windows))
    points = []
    for v in np.asarray(s, dtype=float):
        g = rng.standard_normal((*lead, n_seeds, 1))
        h = rng.standard_normal((*lead, 1, n_windows))
        e = rng.standard_normal((*lead, n_seeds, n_windows))
        scale = rel(v) * (1 + seed_sd * g)
        points.append(dense[..., None, :] * scale + inter_sd * h + unit_sd * e)
    return points, dense


def truth(rel: Callable[[np.ndarray], np.ndarray], s: np.ndarray = GRID) -> np.ndarray:
    """The true column means (points, then the dense model): T(truth(rel)) is the value an
    interval of T should cover."""
    return np.append(MU0 * rel(np.asarray(s, dtype=float)), MU0)


def rate(flags: np.ndarray) -> float:
    """The fraction of draws where a control came out as it should."""
    return float(np.mean(flags))
