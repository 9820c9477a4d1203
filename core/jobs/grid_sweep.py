"""Grid sweeps as background jobs for the app: resolve the grid in the app's process (every
point checked before anything starts), hand the resolved configs to a subprocess as JSON
(``python -m core run --config FILE``, core.jobs.launch: the one launch protocol), and read
each cell's state back from the store while it runs.

    job = start_grid_job(store, {"method": "wanda,sparsegpt", "sparsities": "0.3,0.5"})
    status = grid_status(store, job)    # state, cells (done / running / queued ...), error
    cancel(store, job)                  # core.jobs.cancel: SIGINT, SIGTERM after GRACE_S

Files beside the other jobs' (core.jobs.records): <job>.grid.json lists the grid's cells,
<job>.config.json is the resolved grid (core.sweeps.grid.GridJob).
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from core.errors import StoreError
from core.jobs.launch import escalate, launch_config
from core.jobs.records import alive, config_path, log_path, read_job
from core.jobs.status import log_error, log_result
from core.names import GRID_SWEEP, PRUNED_KINDS
from core.requests.request import grid_spec
from core.runs.estimate import estimate_many
from core.settings.config import RunConfig
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
    old = read_job(store, job_id)
    if old is not None and alive(old.get("pid"), old.get("host")):
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
    """Each cell's state from the store's index, and the job's (cheap: polled each second)."""
    job = read_job(store, job_id)
    try:
        rows = json.loads(grid_path(store, job_id).read_text())
    except (OSError, json.JSONDecodeError):
        rows = None
    if job is None or rows is None:
        return GridStatus(job_id, "unknown", error=f"no sweep job {job_id!r}")
    escalate(store, job)
    running = alive(job["pid"], job["host"])
    index = {r.id: r for r in store.list()}
    cells = pd.DataFrame(rows, columns=list(CELL_COLUMNS))
    cells["state"] = [
        _cell_state(
            index[i].status if i in index else None,
            index[i].created if i in index else None,
            job["started"],
        )
        for i in cells["run_id"]
    ]
    if not running and (cells["state"] == RUNNING).any():
        store.reconcile()  # rows its dead process left 'running'
    elapsed = time.time() - job["started"]
    if running:
        state = RUNNING if job.get("cancel_requested") is None else "cancelling"
        return GridStatus(job_id, state, cells, elapsed)
    logp = log_path(store, job_id)
    if log_result(logp):  # the JSON object a successful sweep prints last
        return GridStatus(job_id, "done", cells, _finished_elapsed(logp, job))
    if job.get("cancel_requested") is not None:
        return GridStatus(job_id, "cancelled", cells, elapsed, "cancelled by the user")
    error = log_error(logp) or "the sweep ended without a result"
    return GridStatus(job_id, "failed", cells, elapsed, error)


def _finished_elapsed(logp: Path, job: dict[str, Any]) -> float:
    try:
        return logp.stat().st_mtime - job["started"]
    except OSError:
        return 0.0


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
