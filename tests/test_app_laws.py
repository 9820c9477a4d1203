"""The Representation dimension page draws what the CLI reports, in the same order: the joint
test of (A1) and the local first order first (their numbers under the metrics, never cut
off), κ against fit range, then the candidate laws as descriptions of the curve with their
paired differences, and the (A2) rule from core (AppTest on synthetic stored sweeps)."""

from __future__ import annotations

import base64
import json

import numpy as np
from paper_a_synthetic import GRID, sweep
from test_app import TINY, open_page, texts

from core.analysis.protocol import PRIMARY
from core.analysis.sweep_report import relation_from_units
from core.analysis.verdicts import ACCURACY_RULE
from core.names import T_KAPPA_RANGE
from core.runs.relation_sweep import relation_record
from core.settings.config import RunConfig
from core.store.run_store import RunStore

QUIET = dict(seed_sd=0.002, inter_sd=0.003, unit_sd=0.003)


def fake_law_sweep(store: RunStore, protocol: str = PRIMARY) -> dict:
    """A sweep whose window NLLs follow ln PPL = ln PPL₀·(1 + 1.3 s), reported by
    core.analysis.sweep_report and stored as core.runs.relation_sweep stores it; returns
    its metrics."""
    points, dense = sweep(lambda s: 1 + 1.3 * s, seed=0, **QUIET)
    rep = relation_from_units(GRID, GRID, points, dense)
    tables, relation = relation_record(rep)
    d, ppl0 = 64, float(np.exp(dense.mean()))
    rows = [
        {"s": s, "s_eff": s, "d_prime": int(d * (1 - s)), "params": 1000,
         "ppl": p["ppl"], "ppl_lo": p["ppl_lo"], "ppl_hi": p["ppl_hi"],
         "predicted_ppl": ppl0 ** (1 / (1 - s)), "rel_error": 0.0}
        for s, p in zip(GRID, rep["points"], strict=True)
    ]  # fmt: skip
    cfg = RunConfig("sweep", TINY, extra=(("grid", tuple(GRID)), ("tag", protocol)))
    metrics = {"ppl0": ppl0, "d": d, **relation}
    metrics["protocol"] = {"name": protocol, "n_windows": 16, "eval_seqlen": 2048,
                           "calib_nsamples": 32, "calib_seqlen": 512, "n_seeds": 5}  # fmt: skip
    with store.begin(cfg) as w:
        w.write_table("sweep", rows)
        for name, table in tables.items():
            w.write_table(name, table)
        w.commit(metrics)
    return metrics


def array(v) -> np.ndarray:
    """A trace's coordinates: plotly writes numpy arrays as base64 with their dtype."""
    if isinstance(v, dict) and "bdata" in v:
        return np.frombuffer(base64.b64decode(v["bdata"]), dtype=v["dtype"])
    return np.asarray(v)


def chart_data(at, key: str) -> list[dict]:
    """The traces of the chart drawn with ``key``."""
    chart = next(c for c in at.get("plotly_chart") if c.key == key)
    return json.loads(chart.proto.spec)["data"]


def test_repdim_page_leads_with_the_joint_test_and_the_local_first_order(store) -> None:
    m = fake_law_sweep(store)
    at = open_page("repdim")
    assert not at.error, texts(at.error)
    assert [c.key for c in at.get("plotly_chart")] == [
        "kappa_range", "ppl_dprime", "laws_chart", "law_errors"
    ]  # fmt: skip
    metrics = {x.label: x.value for x in at.metric}
    assert metrics["joint test of (A1)"] == m["joint"] == "rejected"  # κ = 1.3
    assert metrics["local first-order κ"] == f"{m['kappa_local']:.3f}"
    assert metrics["width d"] == "64"
    captions = texts(at.caption)
    # the interval stands under the metric in full, with its range and reading
    lo, hi = m["kappa_local_lo"], m["kappa_local_hi"]
    assert f"95% [{lo:.3f}, {hi:.3f}] on nominal 0 < s ≤ 0.15, 5 points: departs" in captions
    assert f"W = {m['joint_w']:.4g}, p < 0.001 (10 points, s > 0)" in captions
    assert m["sentence"] in texts(at.info) and "not measured under the primary" not in texts(
        at.warning
    )
    # κ against fit range: the stored κ of each range, the primary basis solid and first
    stored = store.load(store.list(kind="sweep")[0].id).table(T_KAPPA_RANGE)
    primary = stored[stored["basis"] == "s_eff"]
    traces = chart_data(at, "kappa_range")
    assert traces[0]["name"].startswith("achieved s_eff")
    assert np.allclose(array(traces[0]["y"]), primary["kappa"])
    assert np.allclose(array(traces[0]["x"]), primary["s_max"])
    # the laws, as descriptions of the curve, with their paired differences
    table = next(df.value for df in at.dataframe if "leave one s out" in df.value.columns)
    assert len(table) == 4 and {"parameters [95%]", "extrapolated", "verdict"} <= set(table)
    diffs = next(df.value for df in at.dataframe if "excludes 0" in df.value.columns)
    want = m["law_differences"]
    assert len(diffs) == len(want) == 12
    assert list(diffs["excludes 0"]) == ["yes" if r["excludes_zero"] else "no" for r in want]
    assert "Protocol: 16 windows of 2048 tokens" in captions
    at.radio(key="law_basis").set_value("s")
    at.run()
    assert not at.error, texts(at.error)
    assert "Sensitivity (nominal s (sensitivity))" in texts(at.info)
    assert m["sentence_nominal"] in texts(at.info)


def test_a_sweep_off_the_primary_protocol_is_marked_a_sensitivity_analysis(store) -> None:
    fake_law_sweep(store, protocol="none")
    at = open_page("repdim")
    assert not at.error, texts(at.error)
    assert "not measured under the primary protocol" in texts(at.warning)


def test_accuracy_rule_on_the_page_is_cores(store) -> None:
    from test_app import fake_accuracy_sweep

    fake_accuracy_sweep(store)
    at = open_page("repdim")
    assert not at.error, texts(at.error)
    assert ACCURACY_RULE in texts(at.caption)
    assert "R² ≥ 0.9" not in texts(at.caption)
