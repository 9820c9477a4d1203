"""Intervals of Paper A's relations (core.analysis.uncertainty), with controls: data made by
the relation must put its parameters inside the intervals, data made against it outside, too
little data must give wide intervals. The verdicts on (A1) are tested in test_laws.py."""

from __future__ import annotations

import numpy as np
import pytest

from core.analysis.uncertainty import (
    accuracy_intervals,
    line_fits,
    percentile_interval,
    ppl_intervals,
    relation_intervals,
)
from core.analysis.verdicts import accuracy_verdict
from core.errors import ConfigError

S = np.array([0.1, 0.2, 0.3, 0.4, 0.5])


def sweep(ratio_fn, n_windows=64, n_seeds=3, window_sd=0.3, seed_sd=0.005, seed=0):
    """Window NLLs of a dense model and of pruned points whose ln PPL₀/ln PPL = ratio_fn(1 − s),
    with per-window spread (shared by all points, as on one corpus) and per-seed jitter."""
    rng = np.random.default_rng(seed)
    dense = 3.4 + window_sd * rng.standard_normal(n_windows)
    points = []
    for s in S:
        scale = 1.0 / ratio_fn(1.0 - s)
        jitter = 1.0 + seed_sd * rng.standard_normal((n_seeds, 1))
        points.append(dense[None, :] * scale * jitter)
    return points, dense


def test_line_fits_recovers_a_line_and_batches() -> None:
    x = np.array([0.0, 1.0, 2.0, 3.0])
    y = np.stack([2 * x + 1, -x + 0.5])
    np.testing.assert_allclose(line_fits(x, y), [[2, 1], [-1, 0.5]], atol=1e-12)
    assert np.isnan(line_fits(np.array([1.0, 1.0]), np.array([1.0, 2.0]))).all()


def test_percentile_interval_brackets_the_samples() -> None:
    iv = percentile_interval(np.arange(1001.0), 500.0)
    assert (iv.lo, iv.hi) == pytest.approx((25.0, 975.0))
    assert iv.contains(500.0) and not iv.contains(2000.0)
    assert iv.as_dict("a") == {"a": 500.0, "a_lo": iv.lo, "a_hi": iv.hi}


def test_positive_control_relation_true_is_supported() -> None:
    points, dense = sweep(lambda keep: keep)
    res = relation_intervals(S, points, dense)
    a, b = res["a"], res["b"]
    assert a.estimate == pytest.approx(1.0, abs=0.02) and a.contains(1.0)
    assert b.contains(0.0)
    for row in res["rows"]:
        assert row["ppl_lo"] <= row["ppl"] <= row["ppl_hi"]
        assert row["ratio_lo"] <= row["ratio"] <= row["ratio_hi"]


def test_negative_control_other_slope_is_contradicted() -> None:
    points, dense = sweep(lambda keep: 0.6 * keep + 0.3)
    res = relation_intervals(S, points, dense)
    assert res["a"].estimate == pytest.approx(0.6, abs=0.02)
    assert not res["a"].contains(1.0)


def test_too_little_data_gives_wide_intervals() -> None:
    # Two sparsities close together, a few noisy windows, noisy seeds: a cannot be pinned down.
    points, dense = sweep(lambda keep: keep, n_windows=4, seed_sd=0.05)
    res = relation_intervals(S[:2], points[:2], dense)
    assert res["a"].half_width > 0.1
    assert res["a"].contains(1.0)


def test_intervals_widen_with_noise_and_are_reproducible() -> None:
    quiet, dense_q = sweep(lambda keep: keep, seed_sd=0.001)
    noisy, dense_n = sweep(lambda keep: keep, seed_sd=0.05)
    a_quiet = relation_intervals(S, quiet, dense_q)["a"]
    a_noisy = relation_intervals(S, noisy, dense_n)["a"]
    assert a_noisy.half_width > a_quiet.half_width
    assert relation_intervals(S, quiet, dense_q)["a"] == a_quiet  # fixed bootstrap seed


def test_ppl_intervals_and_bad_input() -> None:
    points, _ = sweep(lambda keep: keep)
    ivs = ppl_intervals(points)
    assert all(iv.lo < iv.estimate < iv.hi for iv in ivs)
    with pytest.raises(ConfigError):
        relation_intervals(S, points[:2], points[0][0])
    with pytest.raises(ConfigError):
        ppl_intervals([np.ones((1, 4)), np.ones((1, 5))])


def accuracy_sweep(acc_of_s, n_items=400, n_seeds=3, seed=0):
    rng = np.random.default_rng(seed)
    dense = (rng.random(n_items) < acc_of_s(0.0)).astype(float)
    points = [(rng.random((n_seeds, n_items)) < acc_of_s(s)).astype(float) for s in S]
    return points, dense


def test_accuracy_relation_controls() -> None:
    # (A2) holds: accuracy falls as exp(-κ s) from 0.8 -> supported, κ near 1, once there are
    # items enough to predict a held-out s within 3 points (400 leave that undecided).
    points, dense = accuracy_sweep(lambda s: 0.8 * np.exp(-1.0 * s), n_items=2000)
    res = accuracy_intervals(S, points, dense)
    assert res["kappa"].contains(1.0)
    assert res["loo"].lo <= res["loo"].estimate <= res["loo"].hi
    assert accuracy_verdict(res["kappa"], res["loo"]) == "supported"
    res = accuracy_intervals(S, *accuracy_sweep(lambda s: 0.8 * np.exp(-1.0 * s)))
    assert res["kappa"].lo > 0 and accuracy_verdict(res["kappa"], res["loo"]) == "inconclusive"
    # Accuracy rises with s: the relation's sign is wrong -> contradicted.
    res = accuracy_intervals(S, *accuracy_sweep(lambda s: 0.4 * np.exp(1.0 * s)))
    assert accuracy_verdict(res["kappa"], res["loo"]) == "contradicted"
    # Flat accuracy: nothing to see -> inconclusive.
    res = accuracy_intervals(S, *accuracy_sweep(lambda s: 0.6))
    assert accuracy_verdict(res["kappa"], res["loo"]) == "inconclusive"


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
