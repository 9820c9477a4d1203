"""Paper A's relations on stored runs, with intervals: what a sweep reports and the app draws.

A sweep point is a sparsity s with one stored slice run per calibration seed; each run holds
its evaluation windows' NLLs (``T_EVAL_WINDOWS``) and, when zero-shot tasks were asked, its
per-item predictions. ``relation_report`` fits the candidate laws of (A1) against the nominal
s and the achieved s_eff with bootstrap intervals and scores them out of sample
(core.analysis.laws), and reads (A1)'s verdict from them (core.analysis.verdicts);
``accuracy_report`` does the same for (A2) per task, with its one rule.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from core.analysis.laws import Means, fit_laws, law_rows, point_rows
from core.analysis.uncertainty import accuracy_intervals, relation_intervals
from core.analysis.verdicts import a1_verdict, accuracy_verdict
from core.errors import StoreError
from core.names import T_EVAL_WINDOWS, T_ZEROSHOT_ITEMS
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


def judge_relation(
    s: Sequence[float], nll: list[np.ndarray], dense: np.ndarray, basis: str
) -> dict[str, Any]:
    """Every candidate law of core.analysis.laws on one s basis, (A1)'s verdict, and each
    point's ratio and perplexity with intervals (core.analysis.uncertainty). ``nll[p]``:
    point p's (seeds, windows) window NLLs; ``dense``: (windows,), the same windows."""
    laws = fit_laws(Means.from_units(s, nll, dense))
    line = laws["laws"]["line"]
    return {
        **line["a"].as_dict("a"),
        **line["b"].as_dict("b"),
        **a1_verdict(laws),
        "laws": law_rows(laws, basis),
        "law_points": point_rows(laws, basis),
        "rows": relation_intervals(s, nll, dense)["rows"],
        "n_windows": laws["n_windows"],
    }


def relation_report(
    store: RunStore, points: Sequence[SweepPoint], dense_run: str
) -> dict[str, Any]:
    """(A1) judged by prediction against nominal s and against s_eff: the candidate laws with
    intervals and out-of-sample errors, (A1)'s verdict and sentence, and every point's ratio
    ln PPL₀/ln PPL and perplexity with 95% intervals."""
    dense = window_nlls(store, dense_run)
    nll = [np.stack([window_nlls(store, r) for r in p.run_ids]) for p in points]
    return {
        "nominal": judge_relation([p.s for p in points], nll, dense, "s"),
        "effective": judge_relation([p.s_eff for p in points], nll, dense, "s_eff"),
        "n_seeds": min(len(p.run_ids) for p in points),
    }


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
