"""What the app and the CLI show about background jobs: state, stage, progress, elapsed
time, ETA and error, read from the job's row of the store's jobs table alone
(core.store.jobs_table). Reading is pure: one indexed row (or the active rows), no files,
no signals, no writes, so pages may poll it every second.

Turning a job that reads 'lost' into a stored 'lost' (with the run rows its process left
'running' marked 'interrupted') is ``reconcile_jobs``: an explicit action, called by
``runs list``, the Runs page's refresh and ``cancel``, never by a read.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import pandas as pd

from core.errors import StoreError
from core.store.jobs_table import (
    ACTIVE,
    CANCELLED,
    DONE,
    FAILED,
    JOB_STALE_S,
    LOST,
    JobRow,
    get_job,
    list_jobs,
    read_state,
    update_job,
)
from core.store.run_store import RunStore

FINISHED = (DONE, FAILED, CANCELLED, "interrupted", LOST)
LOST_ERROR = (
    f"the job's process ended without recording an outcome (no heartbeat for over "
    f"{JOB_STALE_S:.0f} s); its log is progress/<job>.log in the store"
)


@dataclass(frozen=True)
class JobStatus:
    """What the app shows about a job. ``run_id`` is the run it exists for."""

    job_id: str
    # "queued" | "running" | "cancelling" | "done" | "failed" | "cancelled" | "lost"
    # | "interrupted" (a run started outside the app) | "unknown"
    state: str
    run_id: str | None = None
    phase: str | None = None  # kind of the run in progress ("eval" = dense baseline)
    stage: str | None = None
    done: int = 0
    total: int = 0
    detail: str = ""
    elapsed: float | None = None
    eta: float | None = None  # seconds left in the current stage, when it can be estimated
    error: str | None = None
    kind: str | None = None  # what the job runs (a run kind, grid-sweep, queue)

    @property
    def finished(self) -> bool:
        return self.state in FINISHED or self.state == "unknown"

    @property
    def fraction(self) -> float:
        return min(max(self.done / self.total, 0.0), 1.0) if self.total else 0.0


def row_eta(row: JobRow, now: float) -> float | None:
    """Seconds left in the row's stage, from its average time per step so far."""
    if not row.total or row.progress_t is None or row.stage_started is None:
        return None
    if row.done >= row.total:
        return 0.0
    steps = row.done - row.stage_done0
    if steps <= 0:
        return None
    per_step = (row.progress_t - row.stage_started) / steps
    return max(per_step * (row.total - row.done) - (now - row.progress_t), 0.0)


def status_of(row: JobRow, now: float | None = None) -> JobStatus:
    """A job's row as the app shows it (its state by ``read_state``'s liveness rule)."""
    now = time.time() if now is None else now
    state = read_state(row, now)
    if state in ACTIVE and row.cancel_requested is not None:
        state = "cancelling"
    error = row.error or (LOST_ERROR if state == LOST else None)
    return JobStatus(
        job_id=row.id,
        state=state,
        run_id=row.run_id,
        phase=row.phase,
        stage=row.stage,
        done=row.done,
        total=row.total,
        detail=row.message,
        elapsed=(row.finished or now) - row.started,
        eta=row_eta(row, now) if state in ACTIVE else None,
        error=error,
        kind=row.kind,
    )


def job_status(store: RunStore, job_id: str) -> JobStatus:
    """State, stage, progress and timing of a job: one row of the jobs table."""
    row = get_job(store, job_id)
    return status_of(row) if row is not None else _status_without_job(store, job_id)


def _status_without_job(store: RunStore, run_id: str) -> JobStatus:
    """A run started outside the app (CLI): report its index row."""
    try:
        rec = store.get(run_id)
    except StoreError:
        return JobStatus(job_id=run_id, state="unknown", error=f"no job or run {run_id!r}")
    return JobStatus(
        job_id=run_id, run_id=rec.id, state=rec.status, phase=rec.kind, error=rec.error
    )


def active_jobs(store: RunStore) -> list[JobStatus]:
    """Jobs stored queued or running (those that read 'lost' included), newest first."""
    now = time.time()
    return [status_of(row, now) for row in list_jobs(store, ACTIVE)]


def jobs_frame(statuses: list[JobStatus]) -> pd.DataFrame:
    """One row per job: what it runs, its state, stage, progress of the stage, time."""
    rows = [
        {
            "job": s.job_id,
            "kind": s.kind,
            "state": s.state,
            "phase": s.phase,
            "stage": s.stage,
            "steps": f"{s.done}/{s.total}" if s.total else "",
            "progress": s.fraction,
            "elapsed s": s.elapsed,
            "eta s": s.eta,
            "run": s.run_id,
            "error": s.error,
        }
        for s in statuses
    ]
    columns = ["job", "kind", "state", "phase", "stage", "steps", "progress", "elapsed s"]
    return pd.DataFrame(rows, columns=[*columns, "eta s", "run", "error"])


def reconcile_jobs(store: RunStore) -> list[str]:
    """Store 'lost' for every active job that reads lost, and mark the run rows their
    processes left 'running' as 'interrupted'; the ids of the jobs marked."""
    now = time.time()
    lost = [r.id for r in list_jobs(store, ACTIVE) if read_state(r, now) == LOST]
    for job_id in lost:
        update_job(store, job_id, only_active=True, state=LOST, finished=now, error=LOST_ERROR)
    store.reconcile()
    return lost
