"""Small-sample reference distributions for Paper A's intervals and its joint test.

A sweep point has 3 to 5 calibration seeds, so a variance estimated from them has 2 to 4
degrees of freedom, and the normal / χ² quantiles a large sample would use are too small. The
remedies here are the textbook ones (the formulas are in core.analysis.uncertainty's docstring
and docs/statistics.md):

- the degrees of freedom of a variance (or a k × k covariance) that is a sum of independently
  estimated parts V_i, each on ν_i degrees of freedom: Satterthwaite (1946) for k = 1 and its
  matrix form by Nel & Van der Merwe (1986) as Krishnamoorthy & Yu (2004) made it invariant to
  the parameters' scales, ν = (k + k²) / Σ_i (tr((V_i S⁻¹)²) + tr(V_i S⁻¹)²)/ν_i with
  S = Σ_i V_i, which reduces to Satterthwaite's (Σ v_i)² / Σ v_i²/ν_i when k = 1 (on
  synthetic (A1) sweeps the invariant form holds the joint test's level at 5.1% with three
  seeds where the raw form gave 6.7%);
- Hotelling's T² critical value for k parameters on ν degrees of freedom,
  T²_{k,ν} = k·ν/(ν − k + 1)·F_{k, ν−k+1}(1 − α) (for k = 1 it is t²_ν), and the factor
  f = T²_{k,ν} / χ²_k(1 − α) by which a covariance estimated on ν degrees of freedom is widened
  so that the large-sample rule (|t| > z, or a Wald statistic above χ²_k) has level α;
- the non-centrality at which a χ²_k test of level α has a given power (the smallest departure
  the joint test would detect).

Everything is vectorised over numpy arrays; ν = inf gives the large-sample values.
"""

from __future__ import annotations

import numpy as np
from scipy import special

ALPHA = 0.05
POWER = 0.8  # the power at which "the smallest departure the test would detect" is quoted


def t_quantile(nu: np.ndarray | float, level: float = 1 - ALPHA) -> np.ndarray:
    """The two-sided ``level`` quantile t_ν((1 + level)/2) of Student's t (ν = inf: normal).
    ν below 1 is taken as 1 (a Satterthwaite ν is at least the smallest part's)."""
    nu = np.maximum(np.asarray(nu, dtype=float), 1.0)
    return special.stdtrit(nu, (1 + level) / 2)


def chi2_sf(k: int, x: np.ndarray | float) -> np.ndarray:
    """P(χ²_k > x)."""
    return special.chdtrc(k, np.asarray(x, dtype=float))


def chi2_quantile(k: int, alpha: float = ALPHA) -> float:
    """χ²_k(1 − α): the critical value of a level-α χ² test."""
    return float(special.chdtri(k, alpha))


def widening(k: int, nu: np.ndarray | float, alpha: float = ALPHA) -> np.ndarray:
    """f = T²_{k,ν}(1 − α) / χ²_k(1 − α) ≥ 1: a covariance estimated on ν degrees of freedom,
    multiplied by f, makes the χ²_k rule a level-α Hotelling test (k = 1: f = (t_ν/z)²).
    1 for ν = inf; NaN where ν ≤ k − 1 (Hotelling's T² is not defined there)."""
    nu = np.asarray(nu, dtype=float)
    big = ~np.isfinite(nu)
    m = np.where(big | (nu <= k - 1), np.nan, nu - k + 1)  # the F's second df
    with np.errstate(invalid="ignore"):
        t2 = k * nu / m * special.fdtri(k, m, 1 - alpha)
    return np.where(big, 1.0, t2 / chi2_quantile(k, alpha))


def effective_df(parts: np.ndarray, dfs: np.ndarray) -> np.ndarray:
    """Degrees of freedom of S = Σ_i V_i: parts (..., I, k, k) are the estimated covariance
    contributions, dfs (I,) their degrees of freedom; Krishnamoorthy & Yu's (2004) form of
    Nel & Van der Merwe's, ν = (k + k²) / Σ_i (tr((V_i S⁻¹)²) + tr(V_i S⁻¹)²)/ν_i (invariant
    to the parameters' scales; Satterthwaite's for k = 1). (...,); inf where S is 0."""
    total = parts.sum(axis=-3)
    k = total.shape[-1]
    ok = np.linalg.det(total) > 0
    inv = np.linalg.inv(np.where(ok[..., None, None], total, np.eye(k)))
    a = parts @ inv[..., None, :, :]  # V_i S⁻¹
    q = np.einsum("...ij,...ji->...", a, a) + np.trace(a, axis1=-2, axis2=-1) ** 2
    den = (q / np.asarray(dfs, dtype=float)).sum(axis=-1)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(ok & (den > 0), (k + k * k) / np.where(den > 0, den, 1.0), np.inf)


def detectable_noncentrality(k: int, alpha: float = ALPHA, power: float = POWER) -> float:
    """λ with P(χ²_k(λ) > χ²_k(1 − α)) = power: a departure δ is detected with that power
    when δᵀ Σ⁻¹ δ = λ (about 9.63 for k = 2, α = 0.05, power 0.8)."""
    return float(special.chndtrinc(chi2_quantile(k, alpha), k, 1 - power))
