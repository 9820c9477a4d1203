"""Paper A's relations on stored runs, with intervals: what a sweep reports and the app draws.

A sweep point is a sparsity s with one stored slice run per calibration seed; each run holds
its evaluation windows' NLLs (``T_EVAL_WINDOWS``) and, when zero-shot tasks were asked, its
per-item predictions. ``relation_report`` computes the primary protocol's estimands
(docs/statistics.md) against the achieved s_eff (the headline) and the nominal s (a
sensitivity analysis): the joint test of (A1) and the local first order
(core.analysis.first_order), the candidate laws scored out of sample and compared by paired
differences (core.analysis.law_compare), and (A1)'s verdict (core.analysis.verdicts);
``accuracy_report`` does the same for (A2) per task, with its one rule.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from core.analysis.accuracy import accuracy_intervals
from core.analysis.first_order import first_order_estimands
from core.analysis.law_compare import fit_laws
from core.analysis.laws import Means, law_rows, point_rows, split
from core.analysis.uncertainty import DEFAULT_BOOT, Bootstrap, Interval
from core.analysis.verdicts import a1_verdict, accuracy_verdict
from core.errors import StoreError
from core.names import (
    T_EVAL_WINDOWS,
    T_KAPPA_RANGE,
    T_LAW_DIFFERENCES,
    T_LAW_POINTS,
    T_LAWS,
    T_ZEROSHOT_ITEMS,
)
from core.store.run_store import RunStore


@dataclass(frozen=True)
class SweepPoint:
    """One sparsity of a sweep: its nominal and achieved s and one run id per seed."""

    s: float
    s_eff: float
    run_ids: tuple[str, ...]


def window_nlls(store: RunStore, run_id: str) -> np.ndarray:
    """(windows,) the NLL of each evaluation window of a stored run."""
    run = store.load(run_id)
    if T_EVAL_WINDOWS not in run.tables():
        raise StoreError(
            f"run {run_id} has no per-window NLLs (made before they were recorded); "
            "re-run it with --force to get intervals"
        )
    return run.table(T_EVAL_WINDOWS).sort_values("window")["nll"].to_numpy(float)


def item_scores(items: pd.DataFrame, run_id: str, task: str) -> np.ndarray:
    """(items,) 1.0 where run ``run_id``'s stored zero-shot items (its T_ZEROSHOT_ITEMS
    table, ``items``) picked the gold answer on ``task``."""
    part = items[items["task"] == task].sort_values("item")
    if part.empty:
        raise StoreError(f"run {run_id} has no zero-shot items for task {task!r}")
    return (part["pred"] == part["gold"]).to_numpy(float)


def point_intervals(m: Means) -> list[dict[str, Any]]:
    """Each point's perplexity and ratio ln PPL₀/ln PPL with intervals, and the number of
    calibration seeds behind it (core.analysis.uncertainty)."""
    n = len(m.s)
    ppl = m.r.bands(lambda x: x[..., :n]).intervals()
    ratio = m.r.bands(lambda x: 1.0 / split(x)[0]).intervals()
    return [
        {
            "s": float(g),
            "s_eff": float(s),
            **Interval(math.exp(p.estimate), math.exp(p.lo), math.exp(p.hi)).as_dict("ppl"),
            **r.as_dict("ratio"),
            "n_seeds": int(k),
        }
        for g, s, p, r, k in zip(m.grid, m.s, ppl, ratio, m.r.n_seeds[:-1], strict=True)
    ]


def relation_on(m: Means, basis: str) -> dict[str, Any]:
    """(A1) on one s basis: the joint test, the local first order and κ against fit range
    (core.analysis.first_order), every candidate law with its out-of-sample errors and their
    paired differences (core.analysis.law_compare), and the verdict (core.analysis.verdicts).
    The row lists are keyed by the tables they are stored as."""
    laws = fit_laws(m)
    est = first_order_estimands(m)
    line = laws["laws"]["line"]
    return {
        **{k: v for k, v in est.items() if k != "kappa_range"},
        **line["a"].as_dict("a"),
        **line["b"].as_dict("b"),
        **a1_verdict(laws, est),
        "basis": basis,
        T_KAPPA_RANGE: [{"basis": basis, **r} for r in est["kappa_range"]],
        T_LAWS: law_rows(laws, basis),
        T_LAW_POINTS: point_rows(laws, basis),
        T_LAW_DIFFERENCES: [{"basis": basis, **r} for r in laws["differences"]],
        "n_windows": laws["n_windows"],
    }


def relation_from_units(
    s: Sequence[float],
    s_eff: Sequence[float],
    nll: Sequence[np.ndarray],
    dense: np.ndarray,
    boot: Bootstrap = DEFAULT_BOOT,
) -> dict[str, Any]:
    """(A1) on one sweep's window NLLs (per point (seeds, windows), dense (windows,)):
    ``primary`` on the achieved s_eff (the primary protocol's basis), ``nominal`` on the
    nominal s (a sensitivity analysis), both on the same replicates and reading ranges on
    the nominal grid, and every point's intervals."""
    m = Means.from_units(s_eff, nll, dense, boot, grid=s)
    return {
        "primary": relation_on(m, "s_eff"),
        "nominal": relation_on(Means.of(s, m.r), "s"),
        "points": point_intervals(m),
        "n_seeds": min(m.r.n_seeds[:-1]),
    }


def relation_report(
    store: RunStore, points: Sequence[SweepPoint], dense_run: str
) -> dict[str, Any]:
    """``relation_from_units`` on the window NLLs of a sweep's stored runs."""
    dense = window_nlls(store, dense_run)
    nll = [np.stack([window_nlls(store, r) for r in p.run_ids]) for p in points]
    return relation_from_units([p.s for p in points], [p.s_eff for p in points], nll, dense)


def accuracy_report(
    store: RunStore,
    points: Sequence[SweepPoint],
    dense_zeroshot_run: str,
    sources: Sequence[Sequence[str]],
    tasks: Sequence[str],
) -> list[dict[str, Any]]:
    """(A2) per task: κ and c of ln(acc/acc₀) = κ·(1 − s) + c with intervals over items and
    seeds, the leave-one-s-out accuracy error, and the verdict (core.analysis.verdicts).
    ``sources[p]`` are the runs holding point p's zero-shot items (the slice runs themselves, or
    zero-shot runs made from them)."""
    pruned = [(p, src) for p, src in zip(points, sources, strict=True) if p.s > 0]
    # Every run's items table is read once, whatever the number of tasks.
    run_ids = {dense_zeroshot_run, *(r for _, src in pruned for r in src)}
    items = {r: store.load(r).table(T_ZEROSHOT_ITEMS) for r in run_ids}

    def scores(run_id: str, task: str) -> np.ndarray:
        return item_scores(items[run_id], run_id, task)

    out = []
    for task in tasks:
        dense = scores(dense_zeroshot_run, task)
        correct = [np.stack([scores(r, task) for r in src]) for _, src in pruned]
        res = accuracy_intervals([p.s for p, _ in pruned], correct, dense)
        out.append(
            {
                "task": task,
                **res["kappa"].as_dict("kappa"),
                **res["intercept"].as_dict("intercept"),
                **res["acc0"].as_dict("acc0"),
                **res["loo"].as_dict("loo_error"),
                "verdict": accuracy_verdict(res["kappa"], res["loo"]),
                "n_items": int(dense.shape[0]),
            }
        )
    return out
