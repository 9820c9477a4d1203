"""The jobs table of the store's index: where a background job's state lives.

One row per job, written by the job's own process (core.jobs.reporter): what it runs, its
state, pid, heartbeat and progress. The launcher writes the first row ('queued', with the
child's pid); the job marks itself 'running', refreshes its heartbeat and progress while it
works, and writes its outcome ('done', 'failed', 'cancelled') before it exits, so a failed
job leaves its row final. Reading a job is one indexed row: no files, no
signals, no writes.

Liveness rule (``read_state``): a 'queued' or 'running' row reads as 'lost' when its
heartbeat is older than ``JOB_STALE_S`` *and* its process is gone (no such pid on this host,
a zombie, or a pid of another host, which cannot be checked from here). A live pid keeps a
row whose beats are late (a long step on a loaded machine); a fresh heartbeat keeps a row
whose pid this host cannot see. Turning a lost row into a stored 'lost' is a separate,
explicit action (``core.jobs.status.reconcile_jobs``), never part of a read.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, fields
from typing import Any, Protocol

from core.store.heartbeat import pid_alive

QUEUED, RUNNING, DONE, FAILED, CANCELLED, LOST = (
    "queued",
    "running",
    "done",
    "failed",
    "cancelled",
    "lost",
)
ACTIVE = (QUEUED, RUNNING)  # a process is (or should be) working on it
FINAL = (DONE, FAILED, CANCELLED, LOST)
JOB_BEAT_S = 3.0  # how often a job process refreshes its heartbeat
# A job is lost once it has missed 10 beats and its process is gone: the bound is short, as
# the app's jobs run on this host, yet 10 beats cover a late beat on a loaded machine.
JOB_STALE_S = 30.0
PROGRESS_EVERY_S = 1.0  # a job writes its progress at most this often (stage changes too)

JOBS_SCHEMA = """
CREATE TABLE IF NOT EXISTS jobs (
    id TEXT PRIMARY KEY, kind TEXT NOT NULL, run_id TEXT, state TEXT NOT NULL,
    pid INTEGER, host TEXT, started REAL NOT NULL, heartbeat REAL, finished REAL,
    phase TEXT, stage TEXT, done INTEGER, total INTEGER, message TEXT,
    stage_started REAL, stage_done0 INTEGER, progress_t REAL,
    error TEXT, cancel_requested REAL, argv TEXT
)"""
JOBS_INDEX = "CREATE INDEX IF NOT EXISTS jobs_by_run ON jobs (run_id)"


class Queryable(Protocol):
    """What the table needs of the store (core.store.run_store.RunStore.query)."""

    def query(self, sql: str, args: tuple = ()) -> list[Any]: ...


@dataclass(frozen=True)
class JobRow:
    """One row of the jobs table. ``done``/``total``: steps of ``stage`` (its progress is
    done/total); ``phase``: the kind of the run the job is computing now ('eval' while it
    computes a dense baseline); ``stage_started``/``stage_done0``: when the stage began and
    at which step, for the time-per-step estimate; ``progress_t``: the last progress write."""

    id: str
    kind: str
    state: str
    started: float
    run_id: str | None = None
    pid: int | None = None
    host: str | None = None
    heartbeat: float | None = None
    finished: float | None = None
    phase: str | None = None
    stage: str | None = None
    done: int = 0
    total: int = 0
    message: str = ""
    stage_started: float | None = None
    stage_done0: int = 0
    progress_t: float | None = None
    error: str | None = None
    cancel_requested: float | None = None
    argv: tuple[str, ...] = ()

    @property
    def fraction(self) -> float:
        """Progress of the current stage in [0, 1]."""
        return min(max(self.done / self.total, 0.0), 1.0) if self.total else 0.0

    @classmethod
    def from_row(cls, row: Any) -> JobRow:
        d = dict(row)
        d["argv"] = tuple(json.loads(d["argv"])) if d.get("argv") else ()
        for key in ("done", "total", "stage_done0"):
            d[key] = int(d.get(key) or 0)
        d["message"] = d.get("message") or ""
        return cls(**{f.name: d.get(f.name) for f in fields(cls) if f.name in d})


COLUMNS = tuple(f.name for f in fields(JobRow))


def process_gone(pid: int | None, host: str | None) -> bool:
    """Whether job process ``pid`` is gone as far as this host can tell: no such process, a
    zombie (core.store.heartbeat.pid_alive), or a pid of another host."""
    return not pid_alive(pid, host)


def read_state(row: JobRow, now: float | None = None, stale_s: float = JOB_STALE_S) -> str:
    """The state a row reads as (the module docstring's liveness rule): its stored state,
    or 'lost' for an active row with a stale heartbeat whose process is gone."""
    if row.state not in ACTIVE:
        return row.state
    now = time.time() if now is None else now
    beat = row.heartbeat if row.heartbeat is not None else row.started
    if now - beat > stale_s and process_gone(row.pid, row.host):
        return LOST
    return row.state


def insert_job(store: Queryable, row: JobRow) -> None:
    """Write (or replace) a job's row."""
    values = [getattr(row, c) for c in COLUMNS]
    values[COLUMNS.index("argv")] = json.dumps(list(row.argv))
    marks = ", ".join("?" * len(COLUMNS))
    store.query(f"INSERT OR REPLACE INTO jobs ({', '.join(COLUMNS)}) VALUES ({marks})", values)


def update_job(store: Queryable, job_id: str, only_active: bool = False, **values: Any) -> None:
    """Set columns of a job's row; with ``only_active`` only while it is queued or running
    (an outcome already written is never overwritten)."""
    unknown = set(values) - set(COLUMNS)
    if unknown:
        raise KeyError(f"no jobs column(s) {sorted(unknown)}")
    sets = ", ".join(f"{k}=?" for k in values)
    where = "id=?" + (f" AND state IN ({', '.join('?' * len(ACTIVE))})" if only_active else "")
    args = (*values.values(), job_id, *(ACTIVE if only_active else ()))
    store.query(f"UPDATE jobs SET {sets} WHERE {where}", args)


def get_job(store: Queryable, job_id: str) -> JobRow | None:
    rows = store.query("SELECT * FROM jobs WHERE id=?", (job_id,))
    return JobRow.from_row(rows[0]) if rows else None


def list_jobs(store: Queryable, states: tuple[str, ...] | None = None) -> list[JobRow]:
    """Jobs, newest first; only those stored in ``states`` when given."""
    sql, args = "SELECT * FROM jobs", ()
    if states:
        sql += f" WHERE state IN ({', '.join('?' * len(states))})"
        args = tuple(states)
    return [JobRow.from_row(r) for r in store.query(sql + " ORDER BY started DESC", args)]


def jobs_of_run(store: Queryable, run_id: str) -> list[JobRow]:
    """Jobs that exist for run ``run_id``, newest first."""
    rows = store.query("SELECT * FROM jobs WHERE run_id=? ORDER BY started DESC", (run_id,))
    return [JobRow.from_row(r) for r in rows]


def delete_job(store: Queryable, job_id: str) -> None:
    store.query("DELETE FROM jobs WHERE id=?", (job_id,))
