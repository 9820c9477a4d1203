"""What the app shows about a background job: state, stage, progress, elapsed time, ETA
and error, read from the job's files, its runs' index rows and their progress logs."""

from __future__ import annotations

import contextlib
import json
import time
from dataclasses import dataclass
from itertools import takewhile
from pathlib import Path
from typing import Any

from core.errors import StoreError
from core.jobs.launch import escalate
from core.jobs.records import alive, log_path, read_job
from core.store.run_store import RunRecord, RunStore

FINISHED = ("done", "failed", "cancelled", "interrupted")


@dataclass(frozen=True)
class JobStatus:
    """What the app shows about a job. ``run_id`` is its main run once known."""

    job_id: str
    # "running" | "cancelling" | "done" | "failed" | "cancelled" | "interrupted" | "unknown"
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

    @property
    def finished(self) -> bool:
        return self.state in FINISHED or self.state == "unknown"


def _job_runs(store: RunStore, job: dict[str, Any]) -> list[RunRecord]:
    """Runs this job's process created, oldest first."""
    started = job["started"] - 1.0
    rows = [r for r in store.list() if r.pid == job["pid"] and r.host == job["host"]]
    return sorted((r for r in rows if r.created >= started), key=lambda r: r.created)


def _main_run(store: RunStore, job: dict[str, Any], runs: list[RunRecord]) -> RunRecord | None:
    """The run a job exists for (its id is planned before the launch)."""
    try:
        return store.get(job.get("run_id") or job["id"])
    except StoreError:
        return None


def read_progress(path: Path, since: float = 0.0) -> list[dict[str, Any]]:
    """Progress events of one run at or after ``since`` (unparsable lines are skipped)."""
    try:
        lines = path.read_text().splitlines()
    except OSError:
        return []
    events = []
    for line in lines:
        with contextlib.suppress(json.JSONDecodeError):
            ev = json.loads(line)
            if isinstance(ev, dict) and ev.get("t", 0) >= since:
                events.append(ev)
    return events


def stage_eta(events: list[dict[str, Any]], now: float) -> float | None:
    """Seconds left in the last stage, from its average time per step so far."""
    if not events:
        return None
    last = events[-1]
    done, total = int(last.get("done", 0)), int(last.get("total", 0))
    if total and done >= total:
        return 0.0
    stage = list(takewhile(lambda e: e.get("stage") == last.get("stage"), reversed(events)))
    first = stage[-1]
    steps = done - int(first.get("done", 0))
    if steps <= 0:
        return None
    per_step = (last["t"] - first["t"]) / steps
    return max(per_step * (total - done) - (now - last["t"]), 0.0)


def log_result(path: Path) -> dict[str, Any]:
    """The JSON object a successful ``--json`` job prints as its last stdout line."""
    try:
        lines = [ln for ln in path.read_text(errors="replace").splitlines() if ln.strip()]
        out = json.loads(lines[-1]) if lines else {}
    except (OSError, json.JSONDecodeError):
        return {}
    return out if isinstance(out, dict) else {}


def log_error(path: Path) -> str | None:
    """The job log's last ``error: ...`` line, else the last line of a traceback."""
    try:
        lines = [ln.strip() for ln in path.read_text(errors="replace").splitlines() if ln.strip()]
    except OSError:
        return None
    for line in reversed(lines):
        if line.startswith("error:"):
            return line.removeprefix("error:").strip()
    if any(ln.startswith("Traceback") for ln in lines):
        return lines[-1]
    return None


def job_status(store: RunStore, job_id: str) -> JobStatus:
    """State, stage, progress and timing of a job (cheap: the app polls it every second)."""
    job = read_job(store, job_id)
    if job is None:
        return _status_without_job(store, job_id)
    escalate(store, job)
    running = alive(job["pid"], job["host"])
    runs = _job_runs(store, job)
    main = _main_run(store, job, runs)
    fresh = main is not None and main.created >= job["started"] - 1.0
    current = runs[-1] if runs else None
    now = time.time()
    events = read_progress(store.progress_path(current.id), job["started"]) if current else []
    last = events[-1] if events else {}
    finished_at = main.finished if fresh and main.finished else None
    base = dict(
        job_id=job_id,
        run_id=main.id if main else None,
        phase=current.kind if current else None,
        stage=last.get("stage"),
        done=int(last.get("done", 0)),
        total=int(last.get("total", 0)),
        detail=last.get("detail", ""),
        elapsed=(finished_at or now) - job["started"],
    )
    if fresh and main.status != "running":
        if main.status == "interrupted" and job.get("cancel_requested") is not None:
            # SIGINT can land before the run's own handler can write 'cancelled' (start-up,
            # a store write); the store then reconciles the dead process as 'interrupted'.
            return JobStatus(state="cancelled", error="cancelled by the user", **base)
        return JobStatus(state=main.status, error=main.error, **base)
    if running:
        state = "running" if job.get("cancel_requested") is None else "cancelling"
        return JobStatus(state=state, eta=stage_eta(events, now), **base)
    return _ended_without_run(store, job, main, current, base)


def _ended_without_run(store, job, main, current, base) -> JobStatus:
    """The process is gone and its main run has no final row written by it."""
    store.reconcile()  # a row left 'running' by the dead process becomes 'interrupted'
    logp = log_path(store, job["id"])
    result = log_result(logp)
    if result.get("run_id"):  # e.g. a stored result with the same config was reused
        return JobStatus(state="done", **{**base, "run_id": result["run_id"]})
    if job.get("cancel_requested") is not None:
        return JobStatus(state="cancelled", error="cancelled by the user", **base)
    error = log_error(logp)
    if error is None and current is not None:
        error = store.get(current.id).error
    return JobStatus(state="failed", error=error or "the job ended without a result", **base)


def _status_without_job(store: RunStore, run_id: str) -> JobStatus:
    """A run started outside the app (CLI): report its index row."""
    try:
        rec = store.get(run_id)
    except StoreError:
        return JobStatus(job_id=run_id, state="unknown", error=f"no job or run {run_id!r}")
    return JobStatus(
        job_id=run_id, run_id=rec.id, state=rec.status, phase=rec.kind, error=rec.error
    )
