"""Grid sweeps as background jobs for the app: resolve the grid in the app's process (every
point checked before anything starts), hand the resolved configs to a subprocess as JSON
(``python -m core run --config FILE``, core.jobs.launch: the one launch protocol), and read
each cell's state back from the store while it runs.

    job = start_grid_job(store, {"method": "wanda,sparsegpt", "sparsities": "0.3,0.5"})
    status = grid_status(store, job)    # state, cells (done / running / queued ...), error
    cancel(store, job)                  # core.jobs.cancel: SIGTERM, SIGKILL after GRACE_S

Files beside the other jobs' (core.jobs.records): <job>.grid.json lists the grid's cells,
<job>.config.json is the resolved grid (core.sweeps.grid.GridJob). The job's state is its row
of the jobs table (core.jobs.status); each cell's, its run's index row.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from core.errors import StoreError
from core.jobs.launch import is_active, launch_config
from core.jobs.records import config_path
from core.jobs.status import status_of
from core.names import GRID_SWEEP, PRUNED_KINDS
from core.requests.request import grid_spec
from core.runs.estimate import estimate_many
from core.settings.config import RunConfig
from core.store.jobs_table import get_job
from core.store.run_store import RunStore
from core.sweeps.grid import GridJob, resolve_grid
from core.sweeps.orchestrate import CELL_STATES, sweep_table

RUNNING = "running"
# What a cell of the live grid shows: the grid's event states, and "running" for the point
# a worker is computing now ("cached": done before this sweep started).
GRID_STATES = (*CELL_STATES, RUNNING, "cancelled")
CELL_COLUMNS = ("run_id", "kind", "method", "pattern", "allocation", "sparsity", "seed")


def grid_path(store: RunStore, job_id: str) -> Path:
    return store.root / "progress" / f"{job_id}.grid.json"


def cell_rows(configs: list[RunConfig]) -> list[dict[str, Any]]:
    """One row per configuration of a grid: its run id and what it computes."""
    rows = []
    for cfg in configs:
        p = cfg.prune
        rows.append(
            {
                "run_id": cfg.run_id,
                "kind": cfg.kind,
                "method": p.method if p else "dense",
                "pattern": p.pattern if p else "-",
                "allocation": p.allocation if p else "-",
                "sparsity": p.sparsity if p else 0.0,
                "seed": cfg.calib.seed if cfg.calib else None,
            }
        )
    return rows


@dataclass(frozen=True)
class GridPlan:
    """A planned grid: its configurations (dense baselines first) and estimated duration."""

    configs: list[RunConfig]
    seconds: float  # estimate for the points the store lacks (core.runs.estimate)

    @property
    def job_id(self) -> str:
        """Same grid, same job: a second start joins the running one."""
        ids = ",".join(c.run_id for c in self.configs)
        return "sweep-" + hashlib.sha256(ids.encode()).hexdigest()[:12]


def plan_grid_job(store: RunStore, values: Mapping[str, Any]) -> GridPlan:
    """Check the grid (ConfigError naming a bad point) and estimate it; nothing is written."""
    configs = resolve_grid(grid_spec(values))
    return GridPlan(configs, estimate_many(configs, store))


def start_grid_job(store: RunStore, values: Mapping[str, Any]) -> str:
    """Plan, then run the resolved grid in the background (in one process, the local
    executor); return the job id."""
    plan = plan_grid_job(store, values)
    job_id = plan.job_id
    if is_active(store, job_id):
        return job_id
    grid_path(store, job_id).write_text(json.dumps(cell_rows(plan.configs)))
    path = config_path(store, job_id)
    path.write_text(GridJob(tuple(plan.configs)).to_json())
    launch_config(store, job_id, GRID_SWEEP, job_id, path)
    return job_id


@dataclass(frozen=True)
class GridStatus:
    """A grid job as the app shows it. ``cells``: CELL_COLUMNS + state (GRID_STATES)."""

    job_id: str
    state: str  # running | cancelling | done | failed | cancelled | unknown
    cells: pd.DataFrame = field(default_factory=pd.DataFrame)
    elapsed: float | None = None
    error: str | None = None

    @property
    def finished(self) -> bool:
        return self.state not in (RUNNING, "cancelling")

    def counts(self) -> dict[str, int]:
        states = self.cells["state"] if "state" in self.cells else pd.Series(dtype=str)
        return {s: int((states == s).sum()) for s in GRID_STATES}


def _cell_state(status: str | None, created: float | None, started: float) -> str:
    if status is None:
        return "queued"
    if status == "done":
        return "cached" if created is not None and created < started - 1.0 else "done"
    if status == RUNNING:
        return RUNNING
    return "cancelled" if status == "cancelled" else "failed"


def grid_status(store: RunStore, job_id: str) -> GridStatus:
    """The job's state from its row of the jobs table, each cell's from its run's index row
    (a pure read, cheap: polled each second)."""
    try:
        rows = json.loads(grid_path(store, job_id).read_text())
    except (OSError, json.JSONDecodeError):
        rows = None
    row = get_job(store, job_id)
    if row is None or rows is None:
        return GridStatus(job_id, "unknown", error=f"no sweep job {job_id!r}")
    job = status_of(row)
    cells = pd.DataFrame(rows, columns=list(CELL_COLUMNS))
    ids = list(cells["run_id"])
    index = {
        r["id"]: r
        for r in store.query(
            f"SELECT id, status, created FROM runs WHERE id IN ({', '.join('?' * len(ids))})",
            tuple(ids),
        )
    }
    cells["state"] = [
        _cell_state(
            index[i]["status"] if i in index else None,
            index[i]["created"] if i in index else None,
            row.started,
        )
        for i in ids
    ]
    # queued: its process is starting; lost: it ended without an outcome (job.error says)
    state = {"queued": RUNNING, "lost": "failed"}.get(job.state, job.state)
    return GridStatus(job_id, state, cells, job.elapsed, job.error)


def cell_grid(cells: pd.DataFrame, names: dict[str, str] | None = None) -> pd.DataFrame:
    """The grid's points as a table: one row per (method, pattern, allocation, seed), one
    column 's=<sparsity>' per sparsity holding the cell's state (or ``names[state]``)."""
    points = cells[cells["kind"].isin(PRUNED_KINDS)]
    if points.empty:
        return pd.DataFrame()
    states = points["state"].map(names) if names else points["state"]
    grid = points.assign(state=states, s=points["sparsity"].map(lambda x: f"s={x:g}"))
    table = grid.pivot_table(
        index=["method", "pattern", "allocation", "seed"],
        columns="s",
        values="state",
        aggfunc="first",
    )
    return table.reset_index().rename_axis(columns=None)


def grid_table(store: RunStore, run_ids: list[str]) -> pd.DataFrame:
    """core.sweeps.orchestrate.sweep_table over the grid's finished runs (a partial grid draws
    too)."""
    runs = []
    for run_id in run_ids:
        try:
            rec = store.get(run_id)
            if rec.status == "done":
                runs.append({"config": rec.config, "metrics": store.load(run_id).metrics})
        except StoreError:
            continue
    return sweep_table(runs)


def grid_jobs(store: RunStore) -> list[str]:
    """Ids of the grid jobs this store knows, newest first."""
    paths = sorted(
        (store.root / "progress").glob("sweep-*.grid.json"),
        key=lambda p: p.stat().st_mtime,
        reverse=True,
    )
    return [p.name.removesuffix(".grid.json") for p in paths]
