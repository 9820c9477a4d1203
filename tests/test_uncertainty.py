"""The intervals of Paper A (core.analysis.uncertainty, core.analysis.small_sample) and their
coverage on synthetic sweeps with a known truth (tests/paper_a_synthetic.py): the two-level
interval (calibration seeds, then evaluation windows, widened for few seeds) covers the truth
at least 90% of the time at nominal 95%, and the windows-only interval, the earlier
protocols' construction, does not when the seeds vary. The verdicts that read the intervals
are tested in test_laws.py.

Coverage is counted over independent synthetic sweeps resampled in one batched call; those
loops use 400 bootstrap replicates instead of the product's 2000 (the interval's width is a
standard deviation over replicates, which 400 estimate within about 4%)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from paper_a_synthetic import GRID, a1, misfit, rate, sweep, truth

from core.analysis.accuracy import accuracy_intervals, line_fits
from core.analysis.first_order import in_range, nesting_fit
from core.analysis.laws import LINE, Means, solve, split
from core.analysis.protocol import FIT_RANGES
from core.analysis.small_sample import (
    detectable_noncentrality,
    effective_df,
    t_quantile,
    widening,
)
from core.analysis.uncertainty import (
    Bootstrap,
    Interval,
    percentile_interval,
    ppl_intervals,
    widened,
)
from core.errors import ConfigError

COVER = 0.90  # the least coverage accepted at nominal 95%
LOOP_BOOT = Bootstrap(n_boot=400)


def ln_ppl(x: np.ndarray) -> np.ndarray:
    return x[..., :-1]  # the points' mean NLL: a perplexity's interval is exp of this one's


def ratio(x: np.ndarray) -> np.ndarray:
    return 1.0 / split(x)[0]  # ln PPL₀ / ln PPL per point


def line_ab(m: Means):
    return lambda x: solve(LINE, m.s, LINE.target(split(x)[0]), np.ones(len(m.s), bool))


def headline_statistics(m: Means) -> dict:
    """Every interval the sweep prints about the points and the nesting law: ln PPL and the
    ratio per point, κ and κ₂ on every fit range (the local first order is s ≤ 0.15, the
    joint test's θ̂ the whole grid), and the line's a and b."""
    stats = {"ln PPL": ln_ppl, "ratio": ratio, "line a, b": line_ab(m)}
    for s_max in FIT_RANGES:
        stats[f"kappa, kappa2 on s <= {s_max:g}"] = nesting_fit(m, in_range(m, s_max))
    return stats


# ---- the construction, on hand-sized numbers ---------------------------------------------------
def test_widening_makes_each_levels_bootstrap_variance_the_unbiased_one() -> None:
    x = np.random.default_rng(0).standard_normal((3, 8))  # 3 seeds x 8 windows
    w = widened(x)
    assert w.mean() == pytest.approx(x.mean())
    # the seed means' spread with divisor n is the original's with n - 1 ...
    assert np.var(w.mean(axis=1)) == pytest.approx(np.var(x.mean(axis=1), ddof=1))
    # ... and within a seed, the windows' spread with divisor W is the original's with W - 1
    dev_w, dev_x = w - w.mean(axis=1, keepdims=True), x - x.mean(axis=1, keepdims=True)
    assert np.var(dev_w, axis=1) == pytest.approx(np.var(dev_x, axis=1, ddof=1))
    one = widened(x[:1])  # one seed: nothing to widen at that level
    assert one.mean() == pytest.approx(x[0].mean())


def test_small_sample_reference_values() -> None:
    assert t_quantile(2.0) == pytest.approx(4.3027, abs=1e-4)
    assert t_quantile(np.inf) == pytest.approx(1.95996, abs=1e-5)
    assert widening(1, 10.0) == pytest.approx((t_quantile(10.0) / t_quantile(np.inf)) ** 2)
    assert widening(2, np.inf) == 1.0
    # Hotelling's T² with 2 parameters on 5 df: 2·5/4 · F(2, 4; 0.95) = 2.5 · 6.9443
    assert widening(2, 5.0) == pytest.approx(2.5 * 6.944272 / 5.991465, rel=1e-5)
    assert detectable_noncentrality(2) == pytest.approx(9.635, abs=1e-3)
    v = np.full((2, 1, 1), 0.3)  # two equal variances on 2 df each: Satterthwaite's 4
    assert effective_df(v, [2, 2]) == pytest.approx(4.0)
    assert effective_df(np.zeros((2, 1, 1)), [2, 2]) == np.inf


def test_percentile_interval_brackets_the_samples() -> None:
    iv = percentile_interval(np.arange(1001.0), 500.0)
    assert (iv.lo, iv.hi) == pytest.approx((25.0, 975.0))
    assert iv.contains(500.0) and not iv.contains(2000.0)
    assert iv.as_dict("a") == {"a": 500.0, "a_lo": iv.lo, "a_hi": iv.hi}
    assert Interval(0.1, -0.2, 0.3).at_least(0.0) == Interval(0.1, 0.0, 0.3)


def test_intervals_are_reproducible_and_widen_with_seed_noise() -> None:
    quiet = Means.from_units(GRID, *sweep(a1, seed_sd=0.001))
    noisy = Means.from_units(GRID, *sweep(a1, seed_sd=0.05))
    local = [m.r.bands(nesting_fit(m, in_range(m, 0.15))) for m in (quiet, noisy)]
    assert (local[1].hi - local[1].lo)[0] > 2 * (local[0].hi - local[0].lo)[0]
    again = Means.from_units(GRID, *sweep(a1, seed_sd=0.001))  # fixed bootstrap seed
    assert np.array_equal(again.r.reps, quiet.r.reps)


# ---- coverage over synthetic draws -----------------------------------------------------------
def test_windows_only_undercovers_where_the_two_level_interval_covers() -> None:
    """A known seed variance (ln PPL moves about 0.15 nats with the calibration draw, three
    seeds, quiet windows): over 500 sweeps the windows-only interval misses the truth far
    more often than 5%; the two-level one covers it in at least 90%."""
    points, dense = sweep(a1, draws=500, seed=1, n_seeds=3, window_sd=0.1, seed_sd=0.05)
    m = Means.from_units(GRID, points, dense, LOOP_BOOT)
    true = truth(a1)
    for name, fn in {"ln PPL": ln_ppl, "kappa, kappa2": nesting_fit(m, m.scored)}.items():
        windows = rate(m.r.windows_only(fn).covers(fn(true)))
        both = m.r.bands(fn).covers(fn(true)).mean(axis=0)
        assert windows < 0.8, (name, windows)
        assert both.min() >= COVER, (name, both)


@pytest.mark.parametrize("n_seeds, draws", [(3, 1000), (5, 500)])
def test_every_headline_interval_covers(n_seeds, draws) -> None:
    """Seed and window noise of a real sweep's size on a curve no candidate law fits (so κ
    moves with the fit range): every interval of the points and of the nesting law covers
    its true value in at least 90% of the sweeps (the laws' errors: test_laws.py). With
    three seeds a point's interval rests on 2 to 3 degrees of freedom and covers about 93%
    (Satterthwaite's t is slightly liberal there), so that case is counted over 1000 sweeps:
    over fewer, one of 36 intervals would fall under 90% by chance alone."""
    points, dense = sweep(misfit, draws=draws, seed=2, n_seeds=n_seeds)
    m = Means.from_units(GRID, points, dense, LOOP_BOOT)
    for name, fn in headline_statistics(m).items():
        cover = m.r.bands(fn).covers(fn(truth(misfit))).mean(axis=0)
        assert cover.min() >= COVER, (name, cover)


def test_ppl_intervals_and_bad_input() -> None:
    points, _ = sweep(a1)
    ivs = ppl_intervals(points)
    assert all(iv.lo < iv.estimate < iv.hi for iv in ivs)
    assert ivs[0].estimate == pytest.approx(math.exp(points[0].mean()))
    one = ppl_intervals([points[0][0]])[0]  # one seed: windows alone, t on W - 1 df
    assert one.lo < one.estimate < one.hi
    with pytest.raises(ConfigError, match="sparsities"):
        Means.from_units(GRID[:2], points, points[0][0])
    with pytest.raises(ConfigError, match="different numbers"):
        ppl_intervals([np.ones((1, 4)), np.ones((1, 5))])


# ---- (A2): accuracy -------------------------------------------------------------------------
SA = np.array([0.1, 0.2, 0.3, 0.4, 0.5])


def accuracy_sweep(acc_of_s, rng, n_items=400, n_seeds=3, seed_sd=0.02):
    """0/1 item scores: dense and pruned points, each seed's accuracy jittered."""
    dense = (rng.random(n_items) < acc_of_s(0.0)).astype(float)
    points = []
    for s in SA:
        acc = acc_of_s(s) * (1 + seed_sd * rng.standard_normal((n_seeds, 1)))
        points.append((rng.random((n_seeds, n_items)) < acc).astype(float))
    return points, dense


def test_line_fits_recovers_a_line_and_batches() -> None:
    x = np.array([0.0, 1.0, 2.0, 3.0])
    y = np.stack([2 * x + 1, -x + 0.5])
    np.testing.assert_allclose(line_fits(x, y), [[2, 1], [-1, 0.5]], atol=1e-12)
    assert np.isnan(line_fits(np.array([1.0, 1.0]), np.array([1.0, 2.0]))).all()


def test_accuracy_intervals_cover() -> None:
    """acc = 0.8·exp(−s): ln(acc/acc₀) = κ·(1 − s) + c with κ = 1, c = −1. Over 100 sweeps
    (200 replicates each) κ's, c's and acc₀'s intervals cover in at least 90%."""
    rng = np.random.default_rng(3)
    hits = []
    for _ in range(100):
        res = accuracy_intervals(
            SA, *accuracy_sweep(lambda s: 0.8 * np.exp(-s), rng), Bootstrap(200)
        )
        hits.append([res["kappa"].contains(1.0), res["intercept"].contains(-1.0),
                     res["acc0"].contains(0.8)])  # fmt: skip
    assert np.mean(hits, axis=0).min() >= COVER, np.mean(hits, axis=0)


def test_paired_difference_covers_the_true_difference() -> None:
    """Two methods on the same 3 calibration seeds and 64 windows: window NLLs share a large
    per-window term (which the pairing removes) and each seed shifts both a little; the 95 %
    interval of mean(a − b) covers the true difference in ≥ 90 % of 200 draws, and it is far
    narrower than an unpaired one would be."""
    from core.analysis.uncertainty import Bootstrap, paired_difference

    rng = np.random.default_rng(0)
    boot = Bootstrap(n_boot=500)
    truth, covered, widths = -0.01, 0, []
    for _ in range(200):
        window = rng.normal(3.6, 0.5, (1, 64))
        seed = rng.normal(0.0, 0.003, (3, 1))
        a = window + seed + truth + rng.normal(0.0, 0.02, (3, 64))
        b = window + seed + rng.normal(0.0, 0.02, (3, 64))
        iv = paired_difference(a, b, boot)
        covered += iv.contains(truth)
        widths.append(iv.hi - iv.lo)
    assert covered / 200 >= 0.9
    assert np.median(widths) < 0.5 / np.sqrt(64)  # the window spread (0.5) cancels
    with pytest.raises(ConfigError):
        paired_difference(np.zeros((3, 4)), np.zeros((2, 4)))
