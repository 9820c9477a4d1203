"""Intervals for every fitted number of Paper A: two-level bootstrap replicates, widened for
small samples, and the studentised interval every statistic of them gets.

The construction was fixed before the primary protocol's sweeps were looked at
(docs/statistics.md, "Intervals: seeds, then windows"). Notation: a *column* c is a sweep
point (or the dense model, the last column); x_{k,w} is the mean NLL of window w (of W)
under calibration seed k (of n_c); x̄_k = mean_w x_{k,w}, x̄ = mean_k x̄_k = m_c, the
column's mean. A statistic T = T(m_1, …, m_C) is any function of the column means (a law's
parameter, a held-out error, a difference of two errors, a perplexity exp(m_c)).

1. **Small-sample widening.** Before resampling, deviations at each level are rescaled so
   that the bootstrap variance of a mean is the unbiased one (s²/n, not (n − 1)/n·s²/n):
   x′_{k,w} = x̄ + c_n·(x̄_k − x̄) + c_W·(x_{k,w} − x̄_k), c_n = √(n_c/(n_c − 1)) (1 for one
   seed), c_W = √(W/(W − 1)).
2. **Replicates, seeds then windows.** Replicate b draws the W windows with replacement
   once (the same draw for every column: the points and the dense model are evaluated on the
   same windows) and, independently per column, its n_c seeds with replacement:
   m*_{b,c} = mean over the drawn seeds of the window-weighted x′. ``N_BOOT`` = 2000
   replicates from a generator seeded with ``BOOT_SEED``, so the same stored runs always
   print the same interval. The *windows-only* replicates average the seeds instead of
   drawing them (the earlier protocols' construction; a test's negative control).
3. **Interval.** T̂ ± t_ν(0.975)·SD*, SD* the standard deviation of T over the replicates
   (non-finite replicates dropped), t_ν Student's quantile on Satterthwaite's degrees of
   freedom ν = (Σ_c v_c + v_W)² / (Σ_c v_c²/(n_c − 1) + v_W²/(W − 1)), where
   v_c = (∂T/∂m_c)²·S²_c/n_c is column c's seed part (S²_c the unbiased variance of its seed
   means; the derivative by a forward difference) and v_W the variance of T over the
   windows-only replicates. With three seeds and the seed part dominant ν is about 2 per
   point it reads, so t_ν, not 1.96, sets the width. A perplexity's interval is this
   interval of ln PPL = m_c, exponentiated; a mean |error| is floored at 0.
4. **Covariance of a vector statistic** (the joint test): the replicates' covariance and the
   matrix form of ν (core.analysis.small_sample.effective_df).

Verdicts read these intervals against tolerances fixed in advance (core.analysis.verdicts);
with thousands of tokens any model departs from a predicted slope by *something*.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from core.analysis.small_sample import effective_df, t_quantile
from core.errors import ConfigError

LEVEL = 0.95
N_BOOT = 2000
BOOT_SEED = 0
Statistic = Callable[[np.ndarray], np.ndarray]  # column means (..., C) -> (..., K)


@dataclass(frozen=True)
class Interval:
    """A point estimate with its interval at ``level``: lo and hi are NaN when no interval
    could be computed, and the verdicts then read "inconclusive"."""

    estimate: float
    lo: float
    hi: float
    level: float = LEVEL

    def contains(self, value: float) -> bool:
        return bool(self.lo <= value <= self.hi)

    @property
    def half_width(self) -> float:
        return (self.hi - self.lo) / 2

    def as_dict(self, name: str) -> dict[str, float]:
        """{name, name_lo, name_hi}: the flat form stored in tables and metrics."""
        return {name: self.estimate, f"{name}_lo": self.lo, f"{name}_hi": self.hi}

    def at_least(self, floor: float) -> Interval:
        """The interval cut at ``floor`` (a mean |error| or an accuracy cannot be below 0)."""
        return Interval(self.estimate, self.lo if not self.lo < floor else floor, self.hi)

    def __str__(self) -> str:
        return f"{self.estimate:.4g} [{self.lo:.4g}, {self.hi:.4g}]"


def percentile_interval(samples: np.ndarray, estimate: float, level: float = LEVEL) -> Interval:
    """Percentile interval of bootstrap ``samples`` (NaN replicates dropped)."""
    finite = np.asarray(samples, dtype=float)
    finite = finite[np.isfinite(finite)]
    if finite.size == 0:
        return Interval(float(estimate), math.nan, math.nan, level)
    tail = (1 - level) / 2 * 100
    lo, hi = np.percentile(finite, [tail, 100 - tail])
    return Interval(float(estimate), float(lo), float(hi), level)


def unit_weights(rng: np.random.Generator, n_units: int, n_boot: int) -> np.ndarray:
    """(n_boot, n_units) resampling weights: counts of each unit in a draw, divided by n_units,
    so ``weights @ values`` is the resampled mean."""
    draws = rng.integers(0, n_units, size=(n_boot, n_units))
    flat = (draws + n_units * np.arange(n_boot)[:, None]).ravel()  # one bin per (b, unit)
    counts = np.bincount(flat, minlength=n_boot * n_units).reshape(n_boot, n_units)
    return counts / n_units


def widened(units: np.ndarray) -> np.ndarray:
    """(..., n, W) unit values with seed deviations scaled by √(n/(n − 1)) and window
    deviations by √(W/(W − 1)) (step 1 of the module docstring); means unchanged."""
    n, w = units.shape[-2:]
    row = units.mean(axis=-1, keepdims=True)
    grand = row.mean(axis=-2, keepdims=True)
    c_n = math.sqrt(n / (n - 1)) if n > 1 else 1.0
    c_w = math.sqrt(w / (w - 1)) if w > 1 else 1.0
    return grand + c_n * (row - grand) + c_w * (units - row)


@dataclass(frozen=True)
class Bands:
    """Intervals of K statistics as arrays (..., K): estimate, bounds and the degrees of
    freedom of their t quantile."""

    est: np.ndarray
    lo: np.ndarray
    hi: np.ndarray
    nu: np.ndarray

    def covers(self, truth: np.ndarray) -> np.ndarray:
        return (self.lo <= truth) & (truth <= self.hi)

    def intervals(self) -> list[Interval]:
        """One Interval per statistic of an unbatched result."""
        return [
            Interval(float(e), float(lo), float(hi))
            for e, lo, hi in zip(self.est, self.lo, self.hi, strict=True)
        ]


def _sd(x: np.ndarray) -> np.ndarray:
    """Standard deviation over the replicate axis (-2) of the finite replicates (NaN with
    fewer than two)."""
    ok = np.isfinite(x)
    n = ok.sum(axis=-2)
    xs = np.where(ok, x, 0.0)
    mean = xs.sum(axis=-2) / np.maximum(n, 1)
    dev = np.where(ok, x - mean[..., None, :], 0.0)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(n >= 2, np.sqrt((dev * dev).sum(axis=-2) / (n - 1)), np.nan)


@dataclass(frozen=True)
class Evaluated:
    """A statistic of K outputs evaluated on a Resampled: at the estimate (..., K), its
    gradient in the column means (..., C, K), on the replicates and on the windows-only
    replicates (..., B, K). Outputs combine linearly (a difference of two laws' errors is
    the difference of their Evaluated), so a statistic is computed once and read many ways."""

    est: np.ndarray
    grad: np.ndarray
    reps: np.ndarray
    wreps: np.ndarray

    def take(self, cols: Sequence[int] | slice) -> Evaluated:
        return Evaluated(*(a[..., cols] for a in (self.est, self.grad, self.reps, self.wreps)))

    def __sub__(self, other: Evaluated) -> Evaluated:
        return Evaluated(*(a - b for a, b in zip(self.parts(), other.parts(), strict=True)))

    def parts(self) -> tuple[np.ndarray, ...]:
        return self.est, self.grad, self.reps, self.wreps

    @staticmethod
    def stack(items: Sequence[Evaluated]) -> Evaluated:
        """The outputs of several Evaluated side by side (K axis)."""
        columns = zip(*(e.parts() for e in items), strict=True)  # est's, grad's, ...
        return Evaluated(*(np.concatenate(arrays, axis=-1) for arrays in columns))


@dataclass(frozen=True)
class Resampled:
    """Column means and their replicates (module docstring). est (..., C); reps and
    window_reps (..., B, C); seed_var (..., C) = S²_c/n_c (0 with one seed); seed_df (C,)
    = max(n_c − 1, 1); n_seeds (C,); n_windows W. Leading axes batch independent sweeps (the
    coverage tests): every statistic is a function of the last axis."""

    est: np.ndarray
    reps: np.ndarray
    window_reps: np.ndarray
    seed_var: np.ndarray
    seed_df: np.ndarray
    n_seeds: tuple[int, ...]
    n_windows: int

    def evaluate(self, fn: Statistic) -> Evaluated:
        """fn at the estimate, at C forward-difference steps, on the replicates and on the
        windows-only replicates, in one call."""
        c, b = self.est.shape[-1], self.reps.shape[-2]
        h = 1e-6 * np.maximum(1.0, np.abs(self.est))  # (..., C)
        steps = self.est[..., None, :] + h[..., None, :] * np.eye(c)  # (..., C, C)
        rows = [self.est[..., None, :], steps, self.reps, self.window_reps]
        with np.errstate(all="ignore"):
            out = np.asarray(fn(np.concatenate(rows, axis=-2)), dtype=float)
        if out.ndim == self.est.ndim:  # a scalar statistic
            out = out[..., None]
        est, grad = out[..., 0, :], out[..., 1 : c + 1, :]
        with np.errstate(all="ignore"):
            grad = (grad - est[..., None, :]) / h[..., :, None]
        return Evaluated(est, grad, out[..., c + 1 : c + 1 + b, :], out[..., c + 1 + b :, :])

    def _df(self, parts: np.ndarray) -> np.ndarray:
        """effective_df of per-column seed parts and the window part (last along -3)."""
        return effective_df(parts, np.append(self.seed_df, max(self.n_windows - 1, 1)))

    def bands(self, stat: Statistic | Evaluated, floor: float | None = None) -> Bands:
        """The interval of every output of a statistic (a function of the column means, or
        one already evaluated): T̂ ± t_ν·SD* (module docstring)."""
        e = stat if isinstance(stat, Evaluated) else self.evaluate(stat)
        v_seed = np.where(np.isfinite(e.grad), e.grad, 0.0) ** 2 * self.seed_var[..., :, None]
        v_win = np.nan_to_num(_sd(e.wreps) ** 2)
        parts = np.concatenate([v_seed, v_win[..., None, :]], axis=-2)  # (..., C + 1, K)
        nu = self._df(np.moveaxis(parts, -2, -1)[..., None, None])
        half = t_quantile(nu) * _sd(e.reps)
        lo, hi = e.est - half, e.est + half
        if floor is not None:
            lo = np.maximum(lo, floor)
        return Bands(e.est, lo, hi, nu)

    def windows_only(self, stat: Statistic | Evaluated) -> Bands:
        """The interval a windows-only bootstrap gives (seeds averaged, never drawn): the
        negative control of the tests, T̂ ± t_{W−1}·SD over the windows-only replicates."""
        e = stat if isinstance(stat, Evaluated) else self.evaluate(stat)
        nu = np.full(e.est.shape, float(max(self.n_windows - 1, 1)))
        half = t_quantile(nu) * _sd(e.wreps)
        return Bands(e.est, e.est - half, e.est + half, nu)

    def covariance(self, fn: Statistic) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(θ̂ (..., k), the replicates' covariance (..., k, k), its effective degrees
        of freedom (...)) of a vector statistic; replicates with a non-finite entry dropped."""
        e = self.evaluate(fn)
        g = np.where(np.isfinite(e.grad), e.grad, 0.0)
        v_seed = np.einsum("...ci,...cj->...cij", g, g) * self.seed_var[..., :, None, None]
        v_win = np.nan_to_num(_cov(e.wreps))[..., None, :, :]
        return e.est, _cov(e.reps), self._df(np.concatenate([v_seed, v_win], axis=-3))


def _cov(x: np.ndarray) -> np.ndarray:
    """(..., k, k) covariance over the replicate axis (-2) of the rows with every entry finite."""
    ok = np.isfinite(x).all(axis=-1, keepdims=True)
    n = ok.sum(axis=-2)[..., None]
    xs = np.where(ok, x, 0.0)
    dev = np.where(ok, xs - xs.sum(axis=-2, keepdims=True) / np.maximum(n, 1), 0.0)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.einsum("...bi,...bj->...ij", dev, dev) / np.where(n >= 2, n - 1, np.nan)


@dataclass(frozen=True)
class Bootstrap:
    """How every interval here is resampled: ``n_boot`` replicates drawn by a generator
    seeded with ``seed`` (fixed, so the same stored runs always print the same interval)."""

    n_boot: int = N_BOOT
    seed: int = BOOT_SEED

    def resample(self, columns: Sequence[np.ndarray]) -> Resampled:
        """Columns (..., n_c, W) of unit values (windows, or zero-shot items) -> Resampled:
        units drawn once for every column (paired), seeds independently per column."""
        cols = [np.asarray(c, dtype=np.float64) for c in columns]
        if not cols or any(c.ndim < 2 or c.size == 0 for c in cols):
            raise ConfigError("every point needs (seeds, units) values to resample")
        n_units = {c.shape[-1] for c in cols}
        if len(n_units) != 1:
            raise ConfigError(f"points were evaluated on different numbers of units: {n_units}")
        w = n_units.pop()
        rng = np.random.default_rng(self.seed)
        weights = unit_weights(rng, w, self.n_boot)
        reps, wreps, var = [], [], []
        for col in cols:
            n = col.shape[-2]
            per_seed = np.einsum("bw,...kw->...bk", weights, widened(col))  # (..., B, n)
            pick = rng.integers(0, n, size=(self.n_boot, n))
            drawn = np.take_along_axis(per_seed, np.broadcast_to(pick, per_seed.shape), -1)
            reps.append(drawn.mean(axis=-1))
            wreps.append(per_seed.mean(axis=-1))
            row = col.mean(axis=-1)
            var.append(row.var(axis=-1, ddof=1) / n if n > 1 else np.zeros(row.shape[:-1]))
        n_seeds = tuple(c.shape[-2] for c in cols)
        return Resampled(
            np.stack([c.mean(axis=(-2, -1)) for c in cols], axis=-1),
            np.stack(reps, axis=-1),
            np.stack(wreps, axis=-1),
            np.stack(var, axis=-1),
            np.array([max(n - 1, 1) for n in n_seeds], dtype=float),
            n_seeds,
            w,
        )


DEFAULT_BOOT = Bootstrap()


def ppl_intervals(points: Sequence[np.ndarray], boot: Bootstrap = DEFAULT_BOOT) -> list[Interval]:
    """95% interval of each point's perplexity exp(mean NLL) over windows and seeds: the
    interval of ln PPL (module docstring), exponentiated. A point is (seeds, windows) or
    (windows,) for one seed."""
    r = boot.resample([np.atleast_2d(np.asarray(p, dtype=float)) for p in points])
    b = r.bands(lambda m: m)
    return [
        Interval(math.exp(iv.estimate), math.exp(iv.lo), math.exp(iv.hi)) for iv in b.intervals()
    ]


def paired_difference(a: np.ndarray, b: np.ndarray, boot: Bootstrap = DEFAULT_BOOT) -> Interval:
    """Interval of mean(a − b) for two (seeds, units) arrays measured on the same seeds and
    units (two methods on the same calibration draws and evaluation windows): the per-unit
    differences are one column of the two-level construction above (seeds, then units,
    widened for few seeds), so both pairings hold."""
    a, b = (np.atleast_2d(np.asarray(x, dtype=np.float64)) for x in (a, b))
    if a.shape != b.shape:
        raise ConfigError(f"paired arrays differ in shape: {a.shape} vs {b.shape}")
    return boot.resample([a - b]).bands(lambda m: m).intervals()[0]
