"""Paper A's perplexity relation described by candidate laws, each fitted with intervals and
scored by what it predicts out of sample.

With L = ln PPL (the mean NLL in nats), L₀ the dense model's and s the slicing fraction, the
candidates are (papers.md §2)

    a1      L = L₀ / (1 − s)                          (A1) as stated: no parameter
    line    L₀ / L = a·(1 − s) + b                    (A1) read as a line (a = 1, b = 0)
    linear  L = L₀·(1 + κ·s)                          (A1) to first order (κ = 1)
    curved  L = L₀·(1 + κ·s + κ₂·s²/(1 − s))          first order plus (A1)'s own curvature

(A1) is 1/(1 − s) = 1 + s + s²/(1 − s), so the curvature term is the one (A1) itself has:
``curved`` is the nesting law, (A1) exactly at κ = κ₂ = 1 and the linear law at κ₂ = 0. Every
law is linear in its parameters after a transform of L/L₀, so each bootstrap replicate is
fitted by one least-squares solve. The laws *describe* the curve; whether (A1) holds is the
joint test's question (core.analysis.first_order).

Scores (``score_law``, the primary protocol's estimand 3, core.analysis.protocol): fitted on
every point, then (i) each point with s > 0 predicted from a fit on the others (leave one s
out; s = 0 would hand the laws through the origin a free zero), (ii) fitted on nominal
s ≤ ``EXTRAPOLATE_FROM`` = 0.2 and predicting every larger s. An error is relative in
perplexity, PPL_predicted / PPL_measured − 1; a score is the mean |error| over the points it
covers. Every number carries the studentised two-level interval of core.analysis.uncertainty
(a mean |error|'s floored at 0). Laws are compared by paired differences of these scores
(core.analysis.law_compare).

A law *predicts* (``law_verdict``) when the 95% upper bounds of both its out-of-sample mean
|errors| are at most ``PPL_TOL`` = 10%; it is *rejected* when either lower bound exceeds it;
else inconclusive.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from core.analysis.protocol import EXTRAPOLATE_FROM
from core.analysis.uncertainty import DEFAULT_BOOT, Bootstrap, Evaluated, Interval, Resampled
from core.errors import ConfigError

PPL_TOL = 0.1  # a prediction within 10% of the measured perplexity counts as agreeing
_EPS = 1e-9  # s values come from decimal grids: 0.1 + 0.2 must count as <= 0.3
NO_INTERVAL = Interval(math.nan, math.nan, math.nan)


@dataclass(frozen=True)
class Law:
    """One candidate law: y = offset(s) + design(s)·β, with y = L₀/L (``on_ratio``) or
    y = L/L₀ − 1; ``params`` names β."""

    name: str
    formula: str
    params: tuple[str, ...]
    design: Callable[[np.ndarray], np.ndarray]  # (P,) -> (P, len(params))
    on_ratio: bool
    offset: Callable[[np.ndarray], np.ndarray] = np.zeros_like

    def target(self, rel: np.ndarray) -> np.ndarray:
        """y from rel = L/L₀."""
        return 1.0 / rel if self.on_ratio else rel - 1.0

    def rel(self, y: np.ndarray) -> np.ndarray:
        """L/L₀ from a predicted y (NaN where a predicted ratio is not positive)."""
        if not self.on_ratio:
            return 1.0 + y
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.where(y > 0, 1.0 / y, np.nan)


def _cols(*fns: Callable[[np.ndarray], np.ndarray]) -> Callable[[np.ndarray], np.ndarray]:
    return lambda s: np.stack([f(s) for f in fns], axis=-1) if fns else np.zeros((len(s), 0))


A1 = Law("a1", "ln PPL = ln PPL₀ / (1 − s)", (), _cols(), True, lambda s: 1.0 - s)
LINE = Law("line", "ln PPL₀ / ln PPL = a·(1 − s) + b", ("a", "b"),
           _cols(lambda s: 1.0 - s, np.ones_like), True)  # fmt: skip
LINEAR = Law("linear", "ln PPL = ln PPL₀·(1 + κ·s)", ("kappa",), _cols(lambda s: s), False)
CURVED = Law("curved", "ln PPL = ln PPL₀·(1 + κ·s + κ₂·s²/(1 − s))", ("kappa", "kappa2"),
             _cols(lambda s: s, lambda s: s * s / (1.0 - s)), False)  # fmt: skip
LAWS = (A1, LINE, LINEAR, CURVED)
PARAMS = ("a", "b", "kappa", "kappa2")  # every law's parameter names, in table order


def solve(law: Law, s: np.ndarray, y: np.ndarray, fit: np.ndarray) -> np.ndarray:
    """β of ``law`` from the points ``fit`` (bool mask) of y (..., P): (..., k); NaN when
    those points cannot determine β (fewer distinct rows than parameters)."""
    k = len(law.params)
    X = law.design(s)[fit]
    if k == 0:
        return np.zeros((*y.shape[:-1], 0))
    if X.shape[0] == 0 or np.linalg.matrix_rank(X) < k:
        return np.full((*y.shape[:-1], k), np.nan)
    r = y[..., fit] - law.offset(s)[fit]
    return r @ np.linalg.pinv(X).T


def predict(law: Law, s: np.ndarray, beta: np.ndarray) -> np.ndarray:
    """L/L₀ at s (P,) for β (..., k): (..., P)."""
    y = law.offset(s) + beta @ law.design(s).T
    return law.rel(y)


def _errors(law: Law, s: np.ndarray, rel: np.ndarray, log0: np.ndarray, fit: np.ndarray):
    """PPL_pred/PPL − 1 at every point from β fitted on ``fit``: (..., P)."""
    beta = solve(law, s, law.target(rel), fit)
    pred = predict(law, s, beta)
    with np.errstate(over="ignore", invalid="ignore"):
        return np.expm1(log0[..., None] * (pred - rel))


def _loo(law: Law, s: np.ndarray, rel: np.ndarray, log0: np.ndarray, scored: np.ndarray):
    """Leave-one-s-out errors: each point of ``scored`` predicted from a fit on all the other
    points, (..., P) (NaN at the points not scored)."""
    out = np.full(rel.shape, np.nan)
    y = law.target(rel)
    for p in np.flatnonzero(scored):
        beta = solve(law, s, y, np.arange(len(s)) != p)
        pred = predict(law, s[p : p + 1], beta)[..., 0]  # only the point left out
        with np.errstate(over="ignore", invalid="ignore"):
            out[..., p] = np.expm1(log0 * (pred - rel[..., p]))
    return out


def _mean_abs(err: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """Mean |error| over the points in ``mask``; NaN when none or any is not finite."""
    if not mask.any():
        return np.full(err.shape[:-1], np.nan)
    return np.abs(err[..., mask]).mean(axis=-1)


def split(m: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Column means (..., P + 1) (the points, then the dense model) -> (rel = L_p/L₀ (..., P),
    L₀ (...))."""
    with np.errstate(divide="ignore", invalid="ignore"):
        return m[..., :-1] / m[..., -1:], m[..., -1]


@dataclass(frozen=True)
class Means:
    """One sweep's points as the laws read them: s (P,) the basis the laws are fitted on (the
    achieved s_eff, or the nominal s), grid (P,) the nominal s (which points a range holds)
    and the resampled column means (points, then the dense model)."""

    s: np.ndarray
    grid: np.ndarray
    r: Resampled

    @classmethod
    def from_units(
        cls,
        s: Sequence[float],
        nll: Sequence[np.ndarray],
        dense: np.ndarray,
        boot: Bootstrap = DEFAULT_BOOT,
        grid: Sequence[float] | None = None,
    ) -> Means:
        """s (P,); nll per point (seeds, windows) window NLLs (or (windows,) for one seed);
        dense (windows,). Leading axes of every array batch independent sweeps."""
        if len(s) != len(nll):
            raise ConfigError(f"{len(s)} sparsities but {len(nll)} points")
        dense = np.asarray(dense, dtype=float)
        cols = [np.asarray(a, dtype=float) for a in nll]
        cols = [a if a.ndim > dense.ndim else a[..., None, :] for a in cols]
        return cls.of(s, boot.resample([*cols, dense[..., None, :]]), grid)

    @classmethod
    def of(cls, s: Sequence[float], r: Resampled, grid: Sequence[float] | None = None) -> Means:
        """The same resampled means read against another s basis."""
        s_arr = np.asarray(s, dtype=float)
        grid_arr = s_arr if grid is None else np.asarray(grid, dtype=float)
        if s_arr.size == 0 or not ((s_arr >= 0) & (s_arr < 1)).all():
            raise ConfigError(f"sparsities must be in [0, 1), got {list(s)}")
        if grid_arr.shape != s_arr.shape:
            raise ConfigError(f"{len(s_arr)} sparsities but {len(grid_arr)} nominal ones")
        if not (r.est[..., -1] > 0).all():
            raise ConfigError("the dense model's mean NLL must be > 0")
        return cls(s_arr, grid_arr, r)

    @property
    def rel(self) -> np.ndarray:
        return split(self.r.est)[0]

    @property
    def log0(self) -> np.ndarray:
        return split(self.r.est)[1]

    @property
    def scored(self) -> np.ndarray:
        """The points out-of-sample scores cover: nominal s > 0."""
        return self.grid > _EPS

    def low(self, s_fit: float) -> np.ndarray:
        """The points an extrapolation is fitted on: nominal s <= s_fit."""
        return self.grid <= s_fit + _EPS


KINDS = ("fit", "loo", "extrap")  # in sample, leave one s out, extrapolated


def law_statistic(law: Law, m: Means, s_fit: float = EXTRAPOLATE_FROM):
    """The statistic of one law on one sweep: column means (..., P + 1) -> (..., k + 3 + 3P):
    its parameters (fitted on every point), the mean |error| of each of ``KINDS``, and the
    signed errors of each kind per point (NaN where a kind does not cover the point)."""
    s, every, scored, low = m.s, np.ones(len(m.s), dtype=bool), m.scored, m.low(s_fit)
    extrap = scored & ~low

    def fn(x: np.ndarray) -> np.ndarray:
        rel, log0 = split(x)
        beta = solve(law, s, law.target(rel), every)
        fit = _errors(law, s, rel, log0, every)
        loo = _loo(law, s, rel, log0, scored)
        ext = np.where(extrap, _errors(law, s, rel, log0, low), np.nan)
        means = [_mean_abs(e, mask) for e, mask in ((fit, scored), (loo, scored), (ext, extrap))]
        return np.concatenate([beta, np.stack(means, axis=-1), fit, loo, ext], axis=-1)

    return fn


def score_law(
    law: Law, m: Means, s_fit: float = EXTRAPOLATE_FROM, e: Evaluated | None = None
) -> dict[str, Any]:
    """One law on one sweep: parameters, and the mean |error| in sample, leaving one s out
    and extrapolating, with every point's signed errors, each with its interval. ``e``: the
    law's statistic already evaluated (``law_statistic``), else evaluated here."""
    k, n = len(law.params), len(m.s)
    e = m.r.evaluate(law_statistic(law, m, s_fit)) if e is None else e
    ivs = m.r.bands(e).intervals()
    out: dict[str, Any] = {"law": law.name, "formula": law.formula}
    out.update(zip(law.params, ivs[:k], strict=True))
    out.update({kind: iv.at_least(0.0) for kind, iv in zip(KINDS, ivs[k : k + 3], strict=True)})
    points: list[dict[str, Any]] = [
        {"s": float(v), "s_nominal": float(g)} for v, g in zip(m.s, m.grid, strict=True)
    ]
    for i, kind in enumerate(KINDS):
        for p, row in enumerate(points):
            row.update(ivs[k + 3 + i * n + p].as_dict(f"{kind}_error"))
    beta = np.array([out[p].estimate for p in law.params])
    with np.errstate(invalid="ignore"):
        pred = predict(law, m.s, beta)
    log0 = float(m.log0)
    for row, r, pr in zip(points, m.rel, pred, strict=True):
        row.update(ppl=math.exp(log0 * r), predicted_ppl=math.exp(log0 * pr))
    out["points"] = points
    out["verdict"] = law_verdict(out["loo"], out["extrap"])
    return out


def law_verdict(loo: Interval, extrap: Interval, tol: float = PPL_TOL) -> str:
    """*supported* when the 95% upper bounds of the mean |error| out of sample, leave-one-out
    and extrapolation alike, are at most ``tol``; *contradicted* when either lower bound is
    above it; else *inconclusive* (also when a score could not be computed)."""
    known = [iv for iv in (loo, extrap) if math.isfinite(iv.lo) and math.isfinite(iv.hi)]
    if any(iv.lo > tol for iv in known):
        return "contradicted"
    if len(known) == 2 and all(iv.hi <= tol for iv in known):
        return "supported"
    return "inconclusive"


def law_rows(result: dict[str, Any], basis: str) -> list[dict[str, Any]]:
    """One flat row per law (the stored 'laws' table): parameters with intervals (NaN where
    a law has no such parameter), mean |error| in sample, leave-one-out and extrapolation,
    the verdict, and whether the law is best (separated from every other) on each score."""
    rows = []
    for name, sc in result["laws"].items():
        row: dict[str, Any] = {"basis": basis, "law": name, "formula": sc["formula"]}
        for p in PARAMS:
            iv = sc.get(p, NO_INTERVAL)
            row.update(iv.as_dict(p))
        for kind in KINDS:
            row.update(sc[kind].as_dict(f"{kind}_error"))
        row["verdict"] = sc["verdict"]
        for kind in ("loo", "extrap"):
            row[f"best_{kind}"] = result["best"][kind] == [name]
        rows.append(row)
    return rows


def point_rows(result: dict[str, Any], basis: str) -> list[dict[str, Any]]:
    """One row per (law, s): measured and fitted perplexity and the three signed errors."""
    return [
        {"basis": basis, "law": name, **pt}
        for name, sc in result["laws"].items()
        for pt in sc["points"]
    ]


BY_NAME = {law.name: law for law in LAWS}


def law_curve(name: str, params: dict[str, float], s: np.ndarray) -> np.ndarray:
    """L/L₀ of the law ``name`` at s (NaN where it predicts no finite perplexity), with the
    fitted ``params`` (a row of the 'laws' table holds them under the law's parameter names)."""
    law = BY_NAME[name]
    beta = np.array([params[p] for p in law.params], dtype=float)
    with np.errstate(invalid="ignore", divide="ignore"):
        return predict(law, np.asarray(s, dtype=float), beta)
