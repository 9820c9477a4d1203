"""What the app's figures are drawn from, read from a store: the Compare page's comparisons
of stored runs, a SliceGPT sweep's laws (Representation dimension) and a grid sweep's table
(Sweeps). The pages and the notebooks they export (``core.notebooks``) call these, so a
notebook rebuilds the very figure the page shows with the same figure builder."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from core.api.pruning import StoreArg, open_store
from core.errors import ConfigError
from core.evaluation.generate import Decoding
from core.figures.compare import run_series
from core.jobs.grid_sweep import grid_status, grid_table
from core.names import RELATION_SWEEP, T_LAW_POINTS, T_LAWS, T_SWEEP
from core.runs.comparison import RunComparison, compare_run
from core.store.run_store import Run

BASES = ("s_eff", "s")  # what a sweep's laws are fitted against: achieved (primary) or nominal s
SUFFIX = {"s_eff": "", "s": "_nominal"}  # the metrics' key suffix per basis


def compare_runs(
    run_ids: Sequence[str],
    text: str,
    *,
    store: StoreArg = None,
    max_new_tokens: int = 32,
    temperature: float = 0.0,
    top_p: float = 1.0,
    seed: int = 0,
) -> dict[str, RunComparison]:
    """Stored prune/slice runs beside their dense model on ``text`` (the Compare page), by
    series name ('wanda 0.5 [ab12]'); a run's model is rebuilt from what it stored."""
    runs = open_store(store)
    dec = Decoding(max_new_tokens, temperature, top_p, seed)
    out = {}
    for run_id in run_ids:
        rec = runs.get(run_id)  # a unique prefix is enough; unknown: StoreError
        name = run_series(rec.method or rec.kind, rec.sparsity, rec.pattern, rec.id)
        out[name] = compare_run(runs, rec.id, text, dec)
    return out


def full_width(run: Run, sweep: pd.DataFrame) -> int | None:
    """d of a sweep's sliced model: from the run's model record, else d′/(1 − s_eff)."""
    d = run.metrics.get("d") or (run.metrics.get("model") or {}).get("hidden_size")
    if d:
        return int(d)
    if {"s_eff", "d_prime"} <= set(sweep.columns):
        ok = sweep[(sweep["s_eff"] < 1) & sweep["d_prime"].notna()]
        if len(ok):
            return round(float(ok["d_prime"].iloc[0]) / (1 - float(ok["s_eff"].iloc[0])))
    return None


@dataclass(frozen=True)
class SweepView:
    """A stored SliceGPT sweep against one s basis: its table (one row per s), PPL₀ and d,
    the candidate laws and their points on that basis, the measured points with ``s`` set to
    the basis, and (A1)'s verdict sentence on it."""

    run_id: str
    basis: str
    ppl0: float | None
    d: int | None
    sentence: str
    sweep: pd.DataFrame = field(repr=False)
    laws: pd.DataFrame = field(repr=False)
    points: pd.DataFrame = field(repr=False)
    measured: pd.DataFrame = field(repr=False)
    metrics: dict[str, Any] = field(repr=False)


def sweep_view(run_id: str, *, basis: str = "s_eff", store: StoreArg = None) -> SweepView:
    """The Representation dimension page's view of a stored SliceGPT sweep."""
    if basis not in BASES:
        raise ConfigError(f"basis is one of {', '.join(BASES)}, got {basis!r}")
    runs = open_store(store)
    rec = runs.get(run_id)
    if rec.kind != RELATION_SWEEP or rec.status != "done":
        raise ConfigError(f"run {rec.id} is a {rec.status} {rec.kind} run, not a finished sweep")
    run = runs.load(rec.id)
    tables = run.tables()
    sweep = run.table(T_SWEEP)
    laws = run.table(T_LAWS) if T_LAWS in tables else pd.DataFrame(columns=["basis"])
    points = run.table(T_LAW_POINTS) if T_LAW_POINTS in tables else pd.DataFrame(columns=["basis"])
    m = run.metrics
    return SweepView(
        rec.id,
        basis,
        m.get("ppl0"),
        full_width(run, sweep),
        m.get("sentence" + SUFFIX[basis], ""),
        sweep,
        laws[laws["basis"] == basis],
        points[points["basis"] == basis],
        sweep.assign(s=sweep[basis]) if basis in sweep else sweep,
        m,
    )


def sweep_grid(job_id: str, *, store: StoreArg = None) -> pd.DataFrame:
    """A grid sweep's table (the Sweeps page's curves): one row per (method, pattern,
    allocation, sparsity) with the seeds' mean and spread, from the runs it finished."""
    runs = open_store(store)
    status = grid_status(runs, job_id)
    if status.state == "unknown":
        raise ConfigError(f"no grid sweep {job_id!r} in the store at {runs.root}")
    return grid_table(runs, list(status.cells["run_id"]))
