"""(A1) tested whole, and its first order read where it lives: the primary protocol's
estimands 1, 2 and 4 (docs/statistics.md, core.analysis.protocol).

All three read the nesting law L/L₀ = 1 + κ·s + κ₂·s²/(1 − s) (``core.analysis.laws.CURVED``),
which is (A1) exactly at κ = κ₂ = 1, fitted by least squares on the s basis of a ``Means``
(the achieved s_eff for the headline) on the points whose *nominal* s lies in a range.

1. **Joint test** (``joint_test``), on every s > 0: θ̂ = (κ̂, κ̂₂),
   W = (θ̂ − 1)ᵀ Σ̂⁻¹ (θ̂ − 1), p = P(χ²₂ > W); (A1) is rejected when p < ``ALPHA``. Σ̂ is the
   covariance of θ̂ over the two-level replicates (core.analysis.uncertainty), widened by
   the small-sample factor f = T²₂,ν(1 − α)/χ²₂(1 − α) (core.analysis.small_sample.widening;
   ν the Nel–Van der Merwe degrees of freedom of that covariance, in Krishnamoorthy & Yu's
   scale-invariant form), so that p < α is Hotelling's level-α test with as few seeds as a
   sweep has; f → 1 with many. Beside it, the smallest departure the test detects with 80%
   power: κ off 1 by
   δ_κ = √(λ / (Σ̂⁻¹)_κκ) (κ₂ at 1), and likewise κ₂, λ = 9.63 the non-centrality of that
   power.
2. **Local first order** (``kappa_on_range`` at ``LOCAL_SMAX``): κ fitted on nominal
   0 < s ≤ 0.15 only, with its interval and the range it was fitted on.
3. **κ against fit range** (``kappa_by_range``): the same κ on 0 < s ≤ s_max for every
   s_max of ``FIT_RANGES``: a sensitivity display, not a verdict.

A range with fewer than two points cannot fit two parameters: its κ is NaN (not computable).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from core.analysis.laws import CURVED, Means, solve, split
from core.analysis.protocol import ALPHA, FIT_RANGES, LOCAL_SMAX
from core.analysis.small_sample import chi2_sf, detectable_noncentrality, widening
from core.analysis.uncertainty import Interval

_EPS = 1e-9  # nominal s come from decimal grids: 0.05 + 0.1 must count as <= 0.15
K = 2  # parameters tested: κ and κ₂


def in_range(m: Means, s_max: float) -> np.ndarray:
    """The points a range holds: nominal 0 < s <= s_max."""
    return (m.grid > _EPS) & (m.grid <= s_max + _EPS)


def nesting_fit(m: Means, fit: np.ndarray):
    """The statistic θ = (κ, κ₂) of the nesting law fitted on the points ``fit``: column
    means (..., P + 1) -> (..., 2) (NaN when fewer than two points)."""

    def fn(x: np.ndarray) -> np.ndarray:
        rel, _ = split(x)
        return solve(CURVED, m.s, CURVED.target(rel), fit)

    return fn


def kappa_on_range(m: Means, s_max: float) -> dict[str, Any]:
    """κ and κ₂ of the nesting law fitted on nominal 0 < s <= s_max, with intervals, and the
    range: {s_max, n_points, kappa: Interval, kappa2: Interval}."""
    fit = in_range(m, s_max)
    kappa, kappa2 = m.r.bands(nesting_fit(m, fit)).intervals()
    return {"s_max": float(s_max), "n_points": int(fit.sum()), "kappa": kappa, "kappa2": kappa2}


def kappa_by_range(m: Means, ranges: Sequence[float] = FIT_RANGES) -> list[dict[str, Any]]:
    """κ against fit range: one row per s_max (flat: s_max, n_points, kappa[_lo, _hi])."""
    rows = []
    for s_max in ranges:
        r = kappa_on_range(m, s_max)
        rows.append({"s_max": r["s_max"], "n_points": r["n_points"], **r["kappa"].as_dict("kappa")})
    return rows


def local_first_order(m: Means, s_max: float = LOCAL_SMAX) -> dict[str, Any]:
    """The local first order: κ on nominal 0 < s <= s_max with its interval and range."""
    r = kappa_on_range(m, s_max)
    return {
        **r["kappa"].as_dict("kappa_local"),
        "local_smax": r["s_max"],
        "local_points": r["n_points"],
    }


def wald(m: Means, alpha: float = ALPHA) -> dict[str, np.ndarray]:
    """The joint test's numbers as arrays over the leading (batch) axes of ``m``: θ̂ (..., 2),
    W, p, ν, the widening f, whether rejected, and the departures detected with 80% power
    (NaN where the widened covariance is not positive definite)."""
    theta, cov, nu = m.r.covariance(nesting_fit(m, m.scored))
    f = widening(K, nu, alpha)
    sigma = f[..., None, None] * cov
    ok = np.isfinite(sigma).all(axis=(-2, -1)) & np.isfinite(theta).all(axis=-1)
    safe = np.where(ok[..., None, None], sigma, np.eye(K))
    ok &= np.linalg.det(safe) > 0
    inv = np.linalg.inv(np.where(ok[..., None, None], safe, np.eye(K)))
    d = theta - 1.0
    w = np.where(ok, np.einsum("...i,...ij,...j->...", d, inv, d), np.nan)
    p = chi2_sf(K, w)
    lam = detectable_noncentrality(K, alpha)
    with np.errstate(divide="ignore", invalid="ignore"):
        detect = np.sqrt(lam / np.diagonal(inv, axis1=-2, axis2=-1))
    return {
        "theta": theta,
        "w": w,
        "p": p,
        "df": nu,
        "widening": f,
        "rejected": np.where(ok, p < alpha, False),
        "ok": ok,
        "detect": np.where(ok[..., None], detect, np.nan),
    }


def joint_test(m: Means, alpha: float = ALPHA) -> dict[str, Any]:
    """The Wald test of κ = κ₂ = 1 on every s > 0 (module docstring; ``wald``) of one sweep:
    W, p, the widening f and its degrees of freedom ν, whether (A1) is rejected (None when
    it could not be computed), the smallest departures detected with 80% power, and κ, κ₂
    with their intervals."""
    t = wald(m, alpha)
    kappa, kappa2 = m.r.bands(nesting_fit(m, m.scored)).intervals()
    ok = bool(t["ok"])
    return {
        **kappa.as_dict("kappa"),
        **kappa2.as_dict("kappa2"),
        "joint_df": float(t["df"]),
        "joint_widening": float(t["widening"]),
        "joint_points": int(m.scored.sum()),
        "joint_w": float(t["w"]),
        "joint_p": float(t["p"]),
        "joint_rejected": bool(t["rejected"]) if ok else None,
        "detect_kappa": float(t["detect"][0]),
        "detect_kappa2": float(t["detect"][1]),
    }


def first_order_estimands(m: Means) -> dict[str, Any]:
    """Estimands 1, 2 and 4 on one s basis: the joint test, the local first order and κ
    against fit range."""
    return {**joint_test(m), **local_first_order(m), "kappa_range": kappa_by_range(m)}


def kappa_interval(row: dict[str, Any], name: str = "kappa_local") -> Interval:
    """An Interval back from a flat row or metrics dict ({name, name_lo, name_hi})."""
    return Interval(row[name], row[f"{name}_lo"], row[f"{name}_hi"])
