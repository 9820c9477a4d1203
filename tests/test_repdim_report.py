"""Paper A's relations on stored runs with intervals (core.analysis.sweep_report): window NLLs and
item scores read back from the store, controls for the verdicts."""

from __future__ import annotations

import numpy as np
import pytest

from core.analysis.sweep_report import (
    SweepPoint,
    accuracy_report,
    relation_report,
    window_nlls,
)
from core.errors import StoreError
from core.names import T_EVAL_WINDOWS, T_ZEROSHOT_ITEMS
from core.settings.config import EvalConfig, ModelSpec, RunConfig

S = (0.1, 0.2, 0.3, 0.4)


def put(store, tag: str, nll: np.ndarray | None = None, items: list[dict] | None = None) -> str:
    cfg = RunConfig(
        "eval", ModelSpec("tiny-llama", "cpu", "float32"), EvalConfig(), extra=(("tag", tag),)
    )
    with store.begin(cfg) as w:
        if nll is not None:
            w.write_table(T_EVAL_WINDOWS, [{"window": i, "nll": v} for i, v in enumerate(nll)])
        if items is not None:
            w.write_table(T_ZEROSHOT_ITEMS, items)
        w.commit({})
    return cfg.run_id


def sweep(store, ratio, seeds=3, windows=48):
    rng = np.random.default_rng(1)
    dense = 3.4 + 0.3 * rng.standard_normal(windows)
    points = []
    for s in S:
        ids = tuple(
            put(
                store,
                f"{ratio.__name__}{s}-{k}",
                dense / ratio(1 - s) * (1 + 0.003 * rng.standard_normal()),
            )
            for k in range(seeds)
        )
        points.append(SweepPoint(s, s - 0.01, ids))
    return points, put(store, f"dense-{ratio.__name__}", dense)


def test_relation_report_controls(store) -> None:
    def holds(keep):
        return keep

    def flatter(keep):
        return 0.5 * keep + 0.4

    points, dense = sweep(store, holds)
    rep = relation_report(store, points, dense)
    assert rep["nominal"]["first_order"] == "supported" and rep["n_seeds"] == 3
    assert rep["nominal"]["curvature"] == "agrees"
    assert rep["nominal"]["sentence"].startswith("(A1) holds to first order")
    assert rep["nominal"]["a"] == pytest.approx(1.0, abs=0.01)
    laws = {r["law"]: r for r in rep["nominal"]["laws"]}
    assert set(laws) == {"a1", "line", "linear", "curved"} and laws["a1"]["basis"] == "s"
    assert laws["a1"]["verdict"] == "supported"
    assert len(rep["nominal"]["rows"]) == 4 and rep["nominal"]["n_windows"] == 48
    # Against s_eff = s − 0.01 (x shifted by +0.01) the slope stays, the intercept moves.
    nominal, effective = rep["nominal"], rep["effective"]
    assert effective["a"] == pytest.approx(nominal["a"])
    assert effective["b"] == pytest.approx(nominal["b"] - 0.01 * nominal["a"])
    points, dense = sweep(store, flatter)
    rep = relation_report(store, points, dense)["nominal"]
    assert rep["first_order"] == "contradicted" and "fails at first order" in rep["sentence"]
    assert {r["law"]: r["verdict"] for r in rep["laws"]}["a1"] == "contradicted"


def test_runs_without_window_nlls_are_refused(store) -> None:
    old = put(store, "old")
    with pytest.raises(StoreError, match="per-window"):
        window_nlls(store, old)


def test_accuracy_report_reads_items(store) -> None:
    rng = np.random.default_rng(0)

    def items(acc):
        return [
            {"task": "piqa", "item": i, "gold": 0, "pred": int(rng.random() >= acc)}
            for i in range(5000)
        ]

    dense = put(store, "zs-dense", items=items(0.8))
    points, sources = [], []
    for s in S:
        ids = tuple(put(store, f"zs{s}-{k}", items=items(0.8 * np.exp(-s))) for k in range(3))
        points.append(SweepPoint(s, s, ids))
        sources.append(ids)
    (row,) = accuracy_report(store, points, dense, sources, ["piqa"])
    assert row["task"] == "piqa" and row["n_items"] == 5000
    assert row["kappa_lo"] <= row["kappa"] <= row["kappa_hi"]
    assert row["loo_error_lo"] <= row["loo_error"] <= row["loo_error_hi"]
    assert row["verdict"] == "supported", row
