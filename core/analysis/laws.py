"""Paper A's perplexity relation judged by what it predicts: candidate laws fitted with
bootstrap intervals and scored out of sample.

With L = ln PPL (the mean NLL in nats), L₀ the dense model's and s the slicing fraction, the
candidates are (papers.md §2; issue "Paper A judged by what it predicts")

    a1      L = L₀ / (1 − s)                          (A1) as stated: no parameter
    line    L₀ / L = a·(1 − s) + b                    (A1) read as a line (a = 1, b = 0)
    linear  L = L₀·(1 + κ·s)                          (A1) to first order (κ = 1)
    curved  L = L₀·(1 + κ·s + κ₂·s²/(1 − s))          first order plus (A1)'s own curvature

(A1) is 1/(1 − s) = 1 + s + s²/(1 − s), so the curvature term is the one (A1) itself has:
``curved`` holds (A1) exactly at κ = κ₂ = 1 and the linear law at κ₂ = 0 (to second order in
s it is κ₂·s²). Every law is linear in its parameters after a transform of L/L₀, so each
bootstrap replicate is fitted by one least-squares solve.

Scoring (``score_law``): each law is fitted on every point and, out of sample, (i) leaving
one s out at a time and predicting it, (ii) fitted on s ≤ ``S_FIT`` = 0.3 and predicting the
larger s. An error is relative in perplexity, PPL_predicted / PPL_measured − 1. Intervals
come from the replicates of ``core.analysis.uncertainty``: evaluation windows resampled
(paired across points and the dense model) × calibration seeds resampled per point.

A law *predicts* (``law_verdict``) when the 95% upper bounds of both its mean |error| out of
sample (leave-one-out and extrapolation) are at most ``PPL_TOL`` = 10%; it is *rejected* when
either lower bound exceeds it; else inconclusive. The verdict sentence on (A1) is built in
``core.analysis.law_sentence``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from core.analysis.uncertainty import DEFAULT_BOOT, Bootstrap, Interval, percentile_interval
from core.errors import ConfigError

S_FIT = 0.3  # extrapolation: fit on s <= S_FIT, predict the rest
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


def _loo(law: Law, s: np.ndarray, rel: np.ndarray, log0: np.ndarray) -> np.ndarray:
    """Leave-one-s-out errors: point p predicted from a fit on the others, (..., P)."""
    out = np.full(rel.shape, np.nan)
    for p in range(len(s)):
        keep = np.arange(len(s)) != p
        out[..., p] = _errors(law, s, rel, log0, keep)[..., p]
    return out


def _mean_abs(err: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """Mean |error| over the points in ``mask``; NaN when none or any is not finite."""
    if not mask.any():
        return np.full(err.shape[:-1], np.nan)
    return np.abs(err[..., mask]).mean(axis=-1)


@dataclass(frozen=True)
class Means:
    """The statistic every law is fitted to: rel = L_p / L₀ per point and ln PPL₀, as point
    estimates and as (n_boot, ·) bootstrap replicates."""

    s: np.ndarray
    rel: np.ndarray
    log0: float
    rel_boot: np.ndarray
    log0_boot: np.ndarray
    n_windows: int
    n_seeds: int

    @classmethod
    def from_units(
        cls,
        s: Sequence[float],
        nll: Sequence[np.ndarray],
        dense: np.ndarray,
        boot: Bootstrap = DEFAULT_BOOT,
    ) -> Means:
        """s (P,); nll per point (seeds, windows) window NLLs; dense (windows,)."""
        if len(s) != len(nll):
            raise ConfigError(f"{len(s)} sparsities but {len(nll)} points")
        s_arr = np.asarray(s, dtype=float)
        if s_arr.size == 0 or not ((s_arr >= 0) & (s_arr < 1)).all():
            raise ConfigError(f"sparsities must be in [0, 1), got {list(s)}")
        pts, means = boot.means([*nll, dense])
        est = np.array([a.mean() for a in pts])
        if not est[-1] > 0:
            raise ConfigError(f"the dense model's mean NLL must be > 0, got {est[-1]}")
        return cls(
            s_arr,
            est[:-1] / est[-1],
            float(est[-1]),
            means[:, :-1] / means[:, -1:],
            means[:, -1],
            int(pts[0].shape[1]),
            min(a.shape[0] for a in pts[:-1]),
        )


def _iv(samples: np.ndarray, estimate: float) -> Interval:
    return percentile_interval(samples, estimate)


def score_law(law: Law, m: Means, s_fit: float = S_FIT) -> dict[str, Any]:
    """One law on one sweep: parameters (fitted on every point), in-sample, leave-one-out
    and extrapolation errors per point and their mean |error|, each with its interval."""
    s, every = m.s, np.ones(len(m.s), dtype=bool)
    low = s <= s_fit + _EPS
    out: dict[str, Any] = {"law": law.name, "formula": law.formula}
    beta = solve(law, s, law.target(m.rel), every)
    beta_boot = solve(law, s, law.target(m.rel_boot), every)
    for i, name in enumerate(law.params):
        out[name] = _iv(beta_boot[:, i], float(beta[i]))
    kinds = {
        "fit": (
            _errors(law, s, m.rel, np.asarray(m.log0), every),
            _errors(law, s, m.rel_boot, m.log0_boot, every),
            every,
        ),
        "loo": (
            _loo(law, s, m.rel, np.asarray(m.log0)),
            _loo(law, s, m.rel_boot, m.log0_boot),
            every,
        ),
        "extrap": (
            _errors(law, s, m.rel, np.asarray(m.log0), low),
            _errors(law, s, m.rel_boot, m.log0_boot, low),
            ~low,
        ),
    }
    points: list[dict[str, Any]] = [{"s": float(v)} for v in s]
    for kind, (est, reps, mask) in kinds.items():
        out[kind] = _iv(_mean_abs(reps, mask), float(_mean_abs(est, mask)))
        for p, row in enumerate(points):
            iv = _iv(reps[:, p], float(est[p])) if mask[p] else NO_INTERVAL
            row.update(iv.as_dict(f"{kind}_error"))
    with np.errstate(invalid="ignore"):
        pred = predict(law, s, beta)
    for row, r, pr in zip(points, m.rel, pred, strict=True):
        row.update(ppl=math.exp(m.log0 * r), predicted_ppl=math.exp(m.log0 * pr))
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


def fit_laws(m: Means, laws: Sequence[Law] = LAWS, s_fit: float = S_FIT) -> dict[str, Any]:
    """Every law of ``laws`` scored on one sweep: {law name: score_law(...)} plus the best
    law out of sample (least extrapolation error, else least leave-one-out error)."""
    scores = {law.name: score_law(law, m, s_fit) for law in laws}

    def key(name: str) -> tuple[float, float]:
        sc = scores[name]
        ex, lo = sc["extrap"].estimate, sc["loo"].estimate
        return (ex if math.isfinite(ex) else math.inf, lo if math.isfinite(lo) else math.inf)

    best = min(scores, key=key)
    return {
        "laws": scores,
        "best": best if math.isfinite(min(key(best))) else None,
        "s_fit": s_fit,
        "n_windows": m.n_windows,
        "n_seeds": m.n_seeds,
    }


def law_rows(result: dict[str, Any], basis: str) -> list[dict[str, Any]]:
    """One flat row per law (the stored 'laws' table): parameters with intervals (NaN where
    a law has no such parameter), mean |error| in sample, leave-one-out and extrapolation."""
    rows = []
    for name, sc in result["laws"].items():
        row: dict[str, Any] = {"basis": basis, "law": name, "formula": sc["formula"]}
        for p in PARAMS:
            iv = sc.get(p, NO_INTERVAL)
            row.update(iv.as_dict(p))
        for kind in ("fit", "loo", "extrap"):
            row.update(sc[kind].as_dict(f"{kind}_error"))
        row["verdict"] = sc["verdict"]
        row["best"] = name == result["best"]
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
