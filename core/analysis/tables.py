"""Joins and groupings of stored runs that pages show as tables: one row per run with its
headline metrics and zero-shot accuracy (joined from separate zeroshot runs), and every run
placed by its effective dimension beside its dense baseline, and a run's zero-shot accuracy
per task beside its dense model's."""

from __future__ import annotations

import datetime as dt
import math
from typing import Any

import pandas as pd

from core.errors import StoreError
from core.names import (
    DEFAULT_DIM,
    EVAL,
    PARAMS_REMOVED,
    PRUNED_KINDS,
    SHAPED_KINDS,
    SLICE,
    SUMMARY_COLUMNS,
    T_EVAL_WINDOWS,
    T_ZEROSHOT,
    ZEROSHOT,
    is_dim_key,
)
from core.store.run_store import Run, RunRecord, RunStore

DENSE_ACC = "dense acc"  # column of the dense model's accuracy beside a run's own
ACCURACY_COLUMNS = ("label", "n", "acc", "acc_stderr", "acc_norm")


def accuracy_columns(records: list[RunRecord]) -> tuple[list[str], dict[str, dict[str, float]]]:
    """Zero-shot columns present in any run (mean_acc, acc_<task>), and for runs whose
    accuracy lives in a separate zeroshot run (``zeroshot --run ID``), that run's values."""
    cols: dict[str, None] = {}
    joined: dict[str, dict[str, float]] = {}
    for r in records:
        accs = {
            k: v
            for k, v in r.summary.items()
            if k == "mean_acc" or (k.startswith("acc_") and not k.startswith("acc_fit"))
        }
        cols.update(dict.fromkeys(sorted(accs, key=lambda k: (k != "mean_acc", k))))
        src = r.summary.get("source_run")
        if r.kind == ZEROSHOT and r.status == "done" and src:
            joined.setdefault(src, accs)
    return list(cols), joined


def runs_frame(records: list[RunRecord]) -> pd.DataFrame:
    """One row per run: index columns plus headline metrics from its summary, and zero-shot
    accuracy columns when any run has them."""
    acc_cols, joined = accuracy_columns(records)
    rows = []
    for r in records:
        row = {
            "created": dt.datetime.fromtimestamp(r.created),
            "kind": r.kind,
            "status": r.status,
            "model": r.model,
            "method": r.method or ("dense" if r.kind == EVAL else None),
            "sparsity": r.sparsity,
            "pattern": r.pattern,
            "targets": (r.config.get("prune") or {}).get("targets"),
            "dataset": r.dataset,
        }
        row.update({k: r.summary.get(k) for k in SUMMARY_COLUMNS})
        accs = {k: r.summary.get(k) for k in acc_cols}
        if all(v is None for v in accs.values()):
            accs = {k: joined.get(r.id, {}).get(k) for k in acc_cols}
        row.update(accs)
        row.update(id=r.id, error=r.error)
        rows.append(row)
    columns = [
        "created",
        "kind",
        "status",
        "model",
        "method",
        "sparsity",
        "pattern",
        "targets",
        "dataset",
        *SUMMARY_COLUMNS,
        *acc_cols,
        "id",
        "error",
    ]
    return pd.DataFrame(rows, columns=columns)


def effdim_points(store: RunStore, records: list[RunRecord] | None = None) -> pd.DataFrame:
    """Finished prune and slice runs and their dense baselines, with every effective-dimension
    metric they recorded; ``group`` is the dense run they are compared with. ``records``:
    the store's finished runs when the caller already listed them."""
    rows = []
    for rec in records if records is not None else store.list(status="done"):
        if rec.status != "done":
            continue
        if rec.kind not in (*PRUNED_KINDS, EVAL):
            continue
        dims = {k: v for k, v in rec.summary.items() if is_dim_key(k) and _num(v)}
        if not dims or not _num(rec.summary.get("ppl")):
            continue
        method = "dense" if rec.kind == EVAL else rec.method
        group = rec.id if rec.kind == EVAL else rec.summary.get("dense_run")
        rows.append(
            {
                "run_id": rec.id,
                "method": method,
                "sparsity": rec.sparsity,
                "ppl": rec.summary["ppl"],
                "model": rec.model,
                "dataset": rec.dataset,
                "group": group,
                **dims,
            }
        )
    return pd.DataFrame(rows)


def _num(v: Any) -> bool:
    return isinstance(v, int | float) and math.isfinite(v)


def _dim_ratio(rec: RunRecord, dense: dict[str, Any]) -> float | None:
    """The kept fraction of the representation dimension: d′/d for SliceGPT, the
    pre-registered effective dimension over the dense run's for the others."""
    m = rec.summary
    if rec.kind == SLICE:
        return m["d_sliced"] / m["d"] if _num(m.get("d_sliced")) and _num(m.get("d")) else None
    own, ref = m.get(DEFAULT_DIM), dense.get(DEFAULT_DIM)
    return own / ref if _num(own) and _num(ref) and ref > 0 else None


def structured_runs(store: RunStore, records: list[RunRecord] | None = None) -> pd.DataFrame:
    """Finished slice and structured runs as the rows ``core.analysis.predictors`` reads:
    method, point (the budget asked, else the method's knob), seed (calibration),
    params_removed, dim_ratio, nll (the evaluation windows' NLLs), group (the dense run),
    model, run_id. A run without what the rule needs (the effective dimension: lean runs;
    per-window NLLs; the fraction removed) is left out."""
    records = records if records is not None else store.list(status="done")
    summaries = {r.id: r.summary for r in records}
    rows = []
    for rec in records:
        if rec.kind not in SHAPED_KINDS or rec.status != "done":
            continue
        group = rec.summary.get("dense_run")
        if group not in summaries:
            try:
                summaries[group] = store.get(group).summary
            except StoreError:
                continue
        dim = _dim_ratio(rec, summaries[group])
        if dim is None or not _num(rec.summary.get(PARAMS_REMOVED)):
            continue
        run = store.load(rec.id)
        if T_EVAL_WINDOWS not in run.tables():
            continue
        prune = rec.config.get("prune") or {}
        rows.append(
            {
                "method": rec.method,
                "point": prune.get("budget") or prune.get("sparsity"),
                "seed": (rec.config.get("calib") or {}).get("seed"),
                "params_removed": rec.summary[PARAMS_REMOVED],
                "dim_ratio": dim,
                "nll": run.table(T_EVAL_WINDOWS).sort_values("window")["nll"].to_numpy(float),
                "group": group,
                "model": rec.model,
                "run_id": rec.id,
            }
        )
    cols = ["method", "point", "seed", "params_removed", "dim_ratio", "nll", "group", "model"]
    return pd.DataFrame(rows, columns=[*cols, "run_id"])


def accuracy_beside_dense(store: RunStore, run: Run) -> tuple[pd.DataFrame, list[str]]:
    """A run's zero-shot accuracy per task (the ``ACCURACY_COLUMNS`` it has) with the dense
    model's accuracy on the same task in ``DENSE_ACC`` (absent when the dense zero-shot run
    is no longer stored), and the notes its evaluation left (e.g. items skipped)."""
    pruned = run.table(T_ZEROSHOT)
    table = pruned[[c for c in ACCURACY_COLUMNS if c in pruned]].copy()
    dense_id = run.metrics.get("dense_zeroshot_run")
    try:
        dense = store.load(dense_id).table(T_ZEROSHOT) if dense_id else None
    except StoreError:
        dense = None
    if dense is not None:
        table[DENSE_ACC] = table["label"].map(dict(zip(dense["label"], dense["acc"], strict=True)))
    notes = [n for n in pruned.get("note", []) if isinstance(n, str) and n]
    return table, notes
