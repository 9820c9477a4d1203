"""The teaching views' numbers (core.analysis.teaching) and the controls' curves: the relation read
at any s beside the nearest measured point, runs placed by what they keep, a winner only with
intervals, and GD paths that look as the assumption says (quadratic) or does not (x⁴,
|x − ½|^{3/2})."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pandas as pd
import pytest

from core.analysis.teaching import budget_points, matched_summary, slice_point
from core.methods.attention_gd.controls import control_trajectories

SWEEP = pd.DataFrame(
    {
        "s": [0.1, 0.3, 0.5],
        "ppl": [12.0, 20.0, 45.0],
        "ppl_lo": [11.0, 18.0, 40.0],
        "ppl_hi": [13.0, 22.0, 50.0],
        "kept_params": [0.92, 0.75, 0.58],
        "params": [920, 750, 580],
    }
)


def test_slice_point_reads_the_relation_and_the_nearest_measurement() -> None:
    p = slice_point(SWEEP, ppl0=10.0, d=64, s=0.25)
    assert p["d_prime"] == 48  # int(0.75 * 64) = 48, a multiple of 8
    assert p["predicted_ppl"] == pytest.approx(10.0 ** (1 / 0.75))
    assert p["kept_params"] == pytest.approx(0.92 + (0.75 - 0.92) * 0.75)  # between 0.1 and 0.3
    assert p["measured_s"] == 0.3 and p["measured_ppl"] == 20.0
    assert (p["measured_lo"], p["measured_hi"]) == (18.0, 22.0)
    assert p["measured_predicted_ppl"] == pytest.approx(10.0 ** (1 / 0.7))


def test_slice_point_never_extrapolates_what_it_kept() -> None:
    p = slice_point(SWEEP, ppl0=10.0, d=64, s=0.8)
    assert p["kept_params"] is None and p["params"] is None
    assert p["measured_s"] == 0.5  # the nearest point is still shown
    assert slice_point(SWEEP, 10.0, 64, 0.0)["kept_params"] == 1.0
    assert slice_point(SWEEP, 10.0, 64, 0.0)["d_prime"] == 64
    assert slice_point(SWEEP, 10.0, 64, 0.0)["predicted_ppl"] == pytest.approx(10.0)


def record(kind: str, method: str, summary: dict, **kw) -> SimpleNamespace:
    return SimpleNamespace(
        id=kw.get("id", method),
        kind=kind,
        status=kw.get("status", "done"),
        method=method,
        pattern=kw.get("pattern", "unstructured"),
        model="m",
        sparsity=0.5,
        summary=summary,
        config={"prune": {"targets": kw.get("targets", "all")}},
    )


def test_budget_points_from_the_index_alone() -> None:
    keeps = {"ppl": 20.0, "kept_params": 0.6, "latency": 1.0, "dense_run": "d"}
    records = [
        record("prune", "wanda", keeps, pattern="2:4"),
        record("prune", "wanda", keeps, targets="qk", id="w2"),
        record("slice", "slicegpt", keeps),
        record("prune", "magnitude", {"ppl": 20.0}),  # stored before kept_params existed
        record("eval", None, {"ppl": 10.0}),
        record("prune", "sparsegpt", keeps, status="failed"),
    ]
    pts = budget_points(records)
    assert list(pts["series"]) == ["wanda 2:4", "wanda [qk]", "slicegpt"]
    assert set(pts["group"]) == {"d"}


def test_no_winner_without_intervals_and_one_with_clear_intervals() -> None:
    base = pd.DataFrame(
        {
            "series": ["a", "a", "b", "b"],
            "kept_params": [0.9, 0.6] * 2,
            "ppl": [20.0, 40.0, 30.0, 60.0],
        }
    )
    wide, wins = matched_summary(base, "kept_params")
    assert (
        wide.loc[0.9, "a"] == pytest.approx(20.0) and wins == {}
    )  # point estimates decide nothing
    clear = base.assign(ppl_lo=base["ppl"] * 0.95, ppl_hi=base["ppl"] * 1.05)
    assert matched_summary(clear, "kept_params")[1][0.9] == "a"
    overlapping = base.assign(ppl_lo=base["ppl"] * 0.5, ppl_hi=base["ppl"] * 2)
    assert matched_summary(overlapping, "kept_params")[1] == {}


def test_control_curves_look_as_their_assumptions_say() -> None:
    paths = pd.DataFrame(control_trajectories())
    by = {name: g for name, g in paths.groupby("control")}
    quad = by["quadratic, spectrum 1..10"]
    quad_pl = quad["pl_ratio"].dropna()
    quad_pl = quad_pl[quad["loss"] > 1e-20]  # rounding at the floor says nothing about μ
    assert quad_pl.min() >= 1.0 - 1e-6  # PL holds with μ = smallest eigenvalue = 1
    assert quad["lipschitz_est"].max() <= 10.0 + 1e-6  # secants never exceed L = 10
    quartic = by["x⁴ (no PL constant at 0)"]["pl_ratio"].dropna()
    assert quartic.iloc[-1] < 0.01 * quartic.iloc[0]  # sinks toward 0: no μ > 0
    rough = by["|x − ½|^{3/2} (gradient not Lipschitz)"]["lipschitz_est"].dropna()
    assert rough.max() > 100 * rough.iloc[0] and math.isfinite(rough.max())
