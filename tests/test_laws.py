"""Paper A's verdicts on synthetic sweeps with a known truth (tests/paper_a_synthetic.py):
the joint test of (A1) (core.analysis.first_order), the local first order and the reach of
(A1)'s own prediction (core.analysis.verdicts), the candidate laws scored out of sample and
compared by paired differences (core.analysis.laws, core.analysis.law_compare), and (A2)'s
rule. Every control states and asserts its pass rate over at least 50 independent draws (at
least 90%); the draws are resampled in one batched call with 400 bootstrap replicates (2000,
the product's, for the joint test, whose level rests on the covariance's precision).

"Quiet" sweeps (a seed moves ln PPL by about 0.006 nats) are the positive controls of readings
that need a well-measured sweep (the local first order rests on five points with s ≤ 0.15);
"precise" ones (0.0015 nats) those of extrapolating a law's curvature from s ≤ 0.2 to 0.6.
Sweeps of a real sweep's noise (the default) test the joint test, whose level must hold there,
and every coverage."""

from __future__ import annotations

import math

import numpy as np
import pytest
from paper_a_synthetic import GRID, MAKERS, a1, misfit, rate, sweep, truth

from core.analysis.accuracy import accuracy_intervals
from core.analysis.first_order import (
    in_range,
    joint_test,
    kappa_by_range,
    local_first_order,
    nesting_fit,
    wald,
)
from core.analysis.law_compare import difference_bands, difference_rows, fit_laws, leaders
from core.analysis.laws import KINDS, LAWS, Means, law_rows, law_statistic, law_verdict, point_rows
from core.analysis.protocol import LOCAL_SMAX
from core.analysis.uncertainty import Bootstrap, Interval
from core.analysis.verdicts import a1_verdict, accuracy_verdict, curvature, first_order, reach
from core.errors import ConfigError

DRAWS = 50
PASS = 0.9
LOOP_BOOT = Bootstrap(n_boot=400)
QUIET = dict(seed_sd=0.002, inter_sd=0.003, unit_sd=0.003)
PRECISE = dict(seed_sd=0.0005, inter_sd=0.001, unit_sd=0.001)


def batch(rel, draws=DRAWS, seed=0, boot=LOOP_BOOT, **noise) -> Means:
    return Means.from_units(GRID, *sweep(rel, draws=draws, seed=seed, **noise), boot)


def intervals(bands, col: int) -> list[Interval]:
    """Column ``col`` of batched Bands as one Interval per draw."""
    cols = (bands.est[:, col], bands.lo[:, col], bands.hi[:, col])
    return [Interval(*v) for v in zip(*cols, strict=True)]


def law_scores(m: Means) -> tuple[dict, list[dict]]:
    """Per law its batched Bands, and per draw the inputs of ``leaders``: the laws' mean
    |errors| and the rows of their paired differences."""
    evaluated = [m.r.evaluate(law_statistic(law, m)) for law in LAWS]
    bands = {law.name: m.r.bands(e) for law, e in zip(LAWS, evaluated, strict=True)}
    pairs, diff = difference_bands(m, LAWS, evaluated=evaluated)
    draws = []
    for d in range(diff.est.shape[0]):
        scores = {law.name: {} for law in LAWS}
        for law in LAWS:
            b = bands[law.name]
            for k in KINDS:
                c = len(law.params) + KINDS.index(k)
                scores[law.name][k] = Interval(b.est[d, c], b.lo[d, c], b.hi[d, c])
        ivs = [Interval(*v) for v in zip(diff.est[d], diff.lo[d], diff.hi[d], strict=True)]
        draws.append((scores, difference_rows(LAWS, pairs, ivs)))
    return bands, draws


def verdict_of(bands, law) -> list[str]:
    k = len(law.params)
    loo, extrap = intervals(bands, k + 1), intervals(bands, k + 2)
    return [law_verdict(a, b) for a, b in zip(loo, extrap, strict=True)]


def a1_points(m: Means) -> list[list[dict]]:
    """Per draw, (A1)'s own prediction error at each point with its interval (the rows the
    reach and curvature readings take)."""
    b = m.r.bands(law_statistic(LAWS[0], m))  # a1: no parameter, 3 means, then fit errors
    return [
        [{"s": float(s), "fit_error": b.est[d, 3 + p], "fit_error_lo": b.lo[d, 3 + p],
          "fit_error_hi": b.hi[d, 3 + p]} for p, s in enumerate(m.s)]
        for d in range(b.est.shape[0])
    ]  # fmt: skip


def local_orders(m: Means) -> list[str]:
    b = m.r.bands(nesting_fit(m, in_range(m, LOCAL_SMAX)))
    return [first_order(iv) for iv in intervals(b, 0)]


# ---- estimand 1: the joint test ----------------------------------------------------------
@pytest.mark.parametrize("n_seeds", [5, 3])
def test_joint_test_passes_a1_data_and_rejects_kappa2_at_0_1(n_seeds) -> None:
    """Data drawn from (A1) with a real sweep's seed and window noise pass the joint test in
    at least 90% of 100 draws (its level, 5%, needs the small-sample widening: with χ²₂ alone
    and three seeds about 18% were rejected); data from the nesting law with κ = 1, κ₂ = 0.1
    are rejected in at least 90% of 50 draws."""
    boot = Bootstrap()
    held = wald(batch(a1, draws=100, seed=10 + n_seeds, boot=boot, n_seeds=n_seeds))
    assert rate(~held["rejected"] & held["ok"]) >= PASS, rate(held["rejected"])
    flat = wald(batch(lambda s: 1 + s + 0.1 * s * s / (1 - s), seed=20 + n_seeds, boot=boot,
                      n_seeds=n_seeds))  # fmt: skip
    assert rate(flat["rejected"]) >= PASS


def test_joint_test_of_one_sweep_is_the_batched_one() -> None:
    points, dense = sweep(a1, draws=3, seed=4)
    m = Means.from_units(GRID, [p[1] for p in points], dense[1])
    one = joint_test(m)
    batched = wald(Means.from_units(GRID, points, dense))
    assert one["joint_w"] == pytest.approx(batched["w"][1])
    assert one["joint_p"] == pytest.approx(math.exp(-one["joint_w"] / 2))  # P(χ²₂ > W)
    assert one["joint_rejected"] is False and one["joint_points"] == len(GRID)
    assert one["joint_widening"] >= 1 and 0 < one["detect_kappa"] < 0.2


# ---- estimand 2: the local first order ----------------------------------------------------
def test_local_first_order_controls() -> None:
    """(A1) data: κ on 0 < s ≤ 0.15 agrees with 1 ± 0.1; ln PPL = ln PPL₀·(1 + 1.3 s): it
    departs; four windows and noisy seeds: undecided. Each in at least 90% of 50 draws."""
    assert rate(np.array(local_orders(batch(a1, seed=1, **QUIET))) == "agrees") >= PASS
    departs = local_orders(batch(lambda s: 1 + 1.3 * s, seed=2, **QUIET))
    assert rate(np.array(departs) == "departs") >= PASS
    noisy = local_orders(batch(a1, seed=3, n_windows=4, seed_sd=0.05))
    assert rate(np.array(noisy) == "undecided") >= PASS


def test_local_first_order_reads_its_range() -> None:
    m = Means.from_units(GRID, *sweep(a1, **QUIET))
    local = local_first_order(m)
    assert local["local_smax"] == LOCAL_SMAX and local["local_points"] == 5
    rows = kappa_by_range(m)
    assert [r["n_points"] for r in rows] == [4, 5, 6, 7, 8, 9, 10]
    assert rows[1]["kappa"] == local["kappa_local"]  # the local first order is s <= 0.15
    few = Means.from_units(GRID[5:], *sweep(a1, s=GRID[5:]))  # no point at s <= 0.15
    assert math.isnan(local_first_order(few)["kappa_local"])


# ---- (A1)'s own prediction: reach and curvature ------------------------------------------
def test_reach_and_curvature_controls() -> None:
    """(A1) data: its prediction agrees at every s (reach 0.6, curvature agrees); the first
    order without (A1)'s curvature, ln PPL = ln PPL₀·(1 + s): it over-predicts beyond
    s = 0.2. Each in at least 90% of 50 draws."""
    held = a1_points(batch(a1, seed=5, **QUIET))
    assert rate([curvature(p) == "agrees" and reach(p) == 0.6 for p in held]) >= PASS
    over = a1_points(batch(lambda s: 1 + s, seed=6, **QUIET))
    assert rate([curvature(p) == "over-predicts" for p in over]) >= PASS


# ---- estimand 3: laws out of sample --------------------------------------------------------
@pytest.mark.parametrize("name", list(MAKERS))
def test_each_law_recovers_its_parameters_and_predicts_its_data(name) -> None:
    """In at least 90% of 50 precise draws a law's estimates lie within 0.02 of its true
    parameters and it predicts its own data out of sample (supported). (Its intervals'
    coverage of them is counted in the coverage tests.)"""
    params, rel = MAKERS[name]
    law = next(law for law in LAWS if law.name == name)
    m = batch(rel, seed=7, **PRECISE)
    b = m.r.bands(law_statistic(law, m))
    ok = np.array(verdict_of(b, law)) == "supported"
    for i, true in enumerate(params.values()):
        ok &= np.abs(b.est[:, i] - true) < 0.02
    assert rate(ok) >= PASS


@pytest.mark.parametrize(
    "law, made_by",
    [("a1", "linear"), ("linear", "a1"), ("line", "linear"), ("curved", "line"),
     ("a1", "curved"), ("linear", "curved")],
)  # fmt: skip
def test_a_law_is_rejected_on_another_laws_data(law, made_by) -> None:
    """In at least 90% of 50 quiet draws the law is contradicted out of sample and the law
    that made the data is among the leaders of extrapolation, the rejected law not."""
    m = batch(MAKERS[made_by][1], seed=8, **QUIET)
    bands, draws = law_scores(m)
    verdicts = verdict_of(bands[law], next(x for x in LAWS if x.name == law))
    lead = [leaders(scores, rows)["extrap"] for scores, rows in draws]
    ok = [
        v == "contradicted" and made_by in g and law not in g
        for v, g in zip(verdicts, lead, strict=True)
    ]
    assert rate(ok) >= PASS


def test_best_law_only_when_separated() -> None:
    """On (A1) data the curved law (which nests it) cannot be separated from (A1) leaving
    one s out: they are named together, never "best" alone, in at least 90% of 50 draws."""
    _, draws = law_scores(batch(a1, seed=9, **QUIET))
    lead = [leaders(scores, rows)["loo"] for scores, rows in draws]
    assert rate([{"a1", "curved"} <= set(g) for g in lead]) >= PASS


def test_law_errors_and_differences_cover() -> None:
    """Seed and window noise of a real sweep's size, on a curve every law misses: over 300
    draws each law's parameters, mean |errors| and the paired differences cover their true
    values in at least 90% (every per-point error: the slow test below)."""
    m = batch(misfit, draws=300, seed=11)
    true = truth(misfit)
    for law in LAWS:
        fn = law_statistic(law, m)
        cols = slice(0, len(law.params) + 3)
        cover = m.r.bands(fn).covers(fn(true)).mean(axis=0)[cols]
        assert cover.min() >= 0.9, (law.name, cover)
    pairs, diff = difference_bands(m)
    at_truth = [law_statistic(law, m)(true) for law in LAWS]  # each law's statistic, true
    want = np.array([
        at_truth[i][len(LAWS[i].params) + KINDS.index(k)]
        - at_truth[j][len(LAWS[j].params) + KINDS.index(k)]
        for k, i, j in pairs
    ])  # fmt: skip
    assert diff.covers(want).mean(axis=0).min() >= 0.9


@pytest.mark.slow
@pytest.mark.parametrize("n_seeds", [3, 5])
def test_every_law_interval_covers(n_seeds) -> None:
    """Every interval the laws print, each point's signed errors included, covers its true
    value in at least 90% of 1000 draws (seed and window noise of a real sweep's size)."""
    m = batch(misfit, draws=1000, seed=12, n_seeds=n_seeds)
    true = truth(misfit)
    for law in LAWS:
        fn = law_statistic(law, m)
        want = fn(true)
        cover = m.r.bands(fn).covers(want).mean(axis=0)[np.isfinite(want)]
        assert cover.min() >= 0.9, (law.name, cover)


# ---- the verdict and the tables of one sweep ----------------------------------------------
def test_the_sentence_leads_with_the_joint_test_and_the_local_first_order() -> None:
    """The wording (one draw each; the readings' pass rates are the controls above)."""
    m = Means.from_units(GRID, *sweep(a1, seed=1, **QUIET))
    v = a1_verdict(fit_laws(m), {**joint_test(m), **local_first_order(m)})
    assert v["joint"] == "not rejected" and v["first_order"] == "agrees"
    assert v["sentence"].startswith("(A1) is not rejected by the joint test of κ = κ₂ = 1")
    assert "it would detect, with 80% power" in v["sentence"]
    assert "its local first order agrees: κ = " in v["sentence"]
    assert v["sentence"].index("local first order") < v["sentence"].index("Describing the curve")
    m = Means.from_units(GRID, *sweep(MAKERS["linear"][1], seed=2, **QUIET))
    v = a1_verdict(fit_laws(m), {**joint_test(m), **local_first_order(m)})
    assert v["joint"] == "rejected" and v["sentence"].startswith("(A1) is rejected by the joint")
    assert "departs" in v["sentence"] and "faster" in v["sentence"]
    assert "over-predicts by +" in v["sentence"]


def test_tables_and_bad_input() -> None:
    points, dense = sweep(a1, **QUIET)
    res = fit_laws(Means.from_units(GRID, points, dense))
    rows = law_rows(res, "s")
    assert [r["law"] for r in rows] == [law.name for law in LAWS]
    a1_row = next(r for r in rows if r["law"] == "a1")
    assert math.isnan(a1_row["a"])
    assert a1_row["loo_error_lo"] <= a1_row["loo_error"] <= a1_row["loo_error_hi"]
    pts = point_rows(res, "s")
    assert len(pts) == len(LAWS) * len(GRID)
    beyond = [p for p in pts if p["law"] == "line" and p["s"] > 0.2]
    assert all(math.isfinite(p["extrap_error"]) for p in beyond)
    assert len(res["differences"]) == 12 and res["n_seeds"] == 5
    with_zero = Means.from_units([0.0, *GRID], [dense[None], *points], dense)
    first = fit_laws(with_zero)["laws"]["a1"]["points"][0]
    assert math.isnan(first["loo_error"]) and math.isfinite(first["fit_error"])  # s = 0: no LOO
    with pytest.raises(ConfigError, match="sparsities"):
        Means.from_units(GRID[:3], points, dense)
    with pytest.raises(ConfigError, match="in \\[0, 1\\)"):
        Means.from_units([1.0, *GRID[1:]], points, dense)


def test_too_few_points_leave_scores_undefined() -> None:
    points, dense = sweep(a1, s=GRID[:2])
    m = Means.from_units(GRID[:2], points, dense)
    res = fit_laws(m)
    assert math.isnan(res["laws"]["line"]["extrap"].estimate)  # nothing beyond s = 0.2
    assert res["laws"]["a1"]["verdict"] == "inconclusive"
    assert law_verdict(Interval(0.05, 0.0, 0.2), Interval(0.01, 0.0, 0.02)) == "inconclusive"
    assert first_order(Interval(1.0, 0.85, 1.2)) == "undecided"
    assert first_order(Interval(0.99, 0.95, 1.04)) == "agrees"  # equivalence, not "1 inside"
    assert first_order(Interval(1.0, math.nan, math.nan)) == "undecided"


# ---- (A2): one rule that asks for more than "accuracy falls" ---------------------------
SA = np.array([0.1, 0.2, 0.3, 0.4, 0.5])


def accuracy_sweep(acc_of_s, rng, n_items=2000, n_seeds=3):
    dense = (rng.random(n_items) < acc_of_s(0.0)).astype(float)
    points = [(rng.random((n_seeds, n_items)) < acc_of_s(s)).astype(float) for s in SA]
    return points, dense


def cliff(s):
    return 0.8 if s < 0.45 else 0.35


@pytest.mark.parametrize(
    "acc_of_s, expected",
    [(lambda s: 0.8 * np.exp(-1.0 * s), "supported"),  # (A2) holds, held-out points predicted
     (cliff, "contradicted"),  # accuracy falls (κ > 0), but not as the law says
     (lambda s: 0.4 * np.exp(1.0 * s), "contradicted"),  # accuracy rises with s
     (lambda s: 0.6, "inconclusive")],  # flat accuracy: nothing to judge
)  # fmt: skip
def test_accuracy_rule_controls(acc_of_s, expected) -> None:
    """Each reading in at least 90% of 50 draws (200 bootstrap replicates each)."""
    rng = np.random.default_rng(13)
    got = []
    for _ in range(DRAWS):
        res = accuracy_intervals(SA, *accuracy_sweep(acc_of_s, rng), Bootstrap(200))
        got.append(accuracy_verdict(res["kappa"], res["loo"]))
    assert rate(np.array(got) == expected) >= PASS, got


def test_two_accuracy_points_leave_nothing_to_predict() -> None:
    points, dense = accuracy_sweep(lambda s: 0.8 * np.exp(-s), np.random.default_rng(0))
    res = accuracy_intervals(SA[:2], points[:2], dense)
    assert math.isnan(res["loo"].estimate)
    assert accuracy_verdict(res["kappa"], res["loo"]) == "inconclusive"


# ---- the effective-dimension relation, each method predicted from the others ----------
def effdim_runs(law_of_method, rng, n=4):
    """Runs of three methods at d_eff / d in [0.5, 0.9], whose ln PPL₀/ln PPL follows
    ``law_of_method[method](d_eff / d)`` with a little noise."""
    rows = []
    for method, law in law_of_method.items():
        for x in np.linspace(0.5, 0.9, n):
            ratio = law(x) * (1 + 0.002 * rng.standard_normal())
            rows.append(
                {"method": method, "ppl": math.exp(math.log(20.0) / ratio), "d_eff": 100.0 * x}
            )
    return rows


def test_each_method_is_predicted_from_the_others() -> None:
    """Three methods on one relation: both forms supported; method c on another law: it is
    missed and both forms contradicted. Each in at least 90% of 50 draws (400 replicates)."""
    from core.analysis.relation import effective_relation

    rng = np.random.default_rng(14)
    same, other = [], []
    for _ in range(DRAWS):
        runs = effdim_runs(dict.fromkeys("abc", lambda x: x), rng)
        held = effective_relation(20.0, 100.0, runs, LOOP_BOOT)
        same.append(
            held["held_out"]["exact_verdict"] == held["held_out"]["line_verdict"] == "supported"
        )
        laws = {"a": lambda x: x, "b": lambda x: x, "c": lambda x: 0.6 * x + 0.1}
        held = effective_relation(20.0, 100.0, effdim_runs(laws, rng), LOOP_BOOT)["held_out"]
        c = next(r for r in held["methods"] if r["method"] == "c")
        other.append(
            c["line_error_lo"] > 0.1 and c["exact_error_lo"] > 0.1
            and held["exact_verdict"] == held["line_verdict"] == "contradicted"
        )  # fmt: skip
    assert rate(same) >= PASS and rate(other) >= PASS
