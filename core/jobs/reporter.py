"""A background job's own record of itself: its row of the jobs table
(core.store.jobs_table), written from inside the job's process.

``job_process`` wraps the work of a job's process (the CLI's ``run --job ID``, the queue
driver): it marks the row 'running', keeps its heartbeat fresh from a thread, hands out the
progress callback that writes stage and steps (at most once per ``PROGRESS_EVERY_S``; a new
stage and a stage's last step at once), and writes the outcome when the work ends:

    with job_process(store, job_id) as reporter:
        out = execute(cfg, store, reporter, opts)    # reporter is a ProgressFn
        reporter.result(out["run_id"])               # a reused stored run may have another id

SIGTERM (``core.jobs.launch.cancel``) is raised as KeyboardInterrupt in the work, so a run
being computed is stored 'cancelled' and the job row says 'cancelled'; any other exception
leaves 'failed' with its message. Store writes that fail are logged, never raised into the
work: a missed progress write costs nothing, the next one carries the state.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import socket
import sqlite3
import threading
import time
from collections.abc import Iterator
from typing import Any

from core.errors import PruneScopeError, StoreError
from core.store.heartbeat import Heartbeat
from core.store.jobs_table import (
    CANCELLED,
    DONE,
    FAILED,
    JOB_BEAT_S,
    PROGRESS_EVERY_S,
    RUNNING,
    update_job,
)
from core.store.run_store import RunStore

log = logging.getLogger(__name__)
CANCELLED_ERROR = "cancelled by the user"


class JobReporter:
    """The progress callback of a job's process (a ``core.progress.ProgressFn``)."""

    def __init__(self, store: RunStore, job_id: str) -> None:
        self.store, self.job_id = store, job_id
        self._lock = threading.Lock()
        self._stage: tuple[str, int] | None = None  # (stage, total) of the current stage
        self._stage_started, self._stage_done0 = time.time(), 0
        self._pending: dict[str, Any] | None = None  # progress not yet written
        self._written = 0.0
        self._run_id: str | None = None
        self._write(state=RUNNING, pid=os.getpid(), host=socket.gethostname())
        self._heart = Heartbeat(self.beat, JOB_BEAT_S)

    def __call__(self, stage: str, done: int, total: int, detail: str = "") -> None:
        now = time.time()
        with self._lock:
            new_stage = (stage, total) != self._stage
            if new_stage:
                self._stage, self._stage_started, self._stage_done0 = (stage, total), now, done
            self._pending = {
                "stage": stage,
                "done": done,
                "total": total,
                "message": detail,
                "stage_started": self._stage_started,
                "stage_done0": self._stage_done0,
                "progress_t": now,
            }
            due = new_stage or done >= total or now - self._written >= PROGRESS_EVERY_S
            if due:
                self._flush(now)

    def beat(self) -> None:
        """The heartbeat thread's call: refresh the heartbeat, write progress held back."""
        with self._lock:
            self._flush(time.time())

    def _flush(self, now: float) -> None:
        values = {**(self._pending or {}), "phase": self._phase(), "state": RUNNING}
        self._pending, self._written = None, now
        self._write(**values)

    def _phase(self) -> str | None:
        """The kind of the run this process is computing now (the newest 'running' row it
        wrote; 'eval' while it computes a dense baseline), None before its first run."""
        try:
            rows = self.store.query(
                "SELECT kind FROM runs WHERE pid=? AND host=? AND status='running' "
                "ORDER BY created DESC LIMIT 1",
                (os.getpid(), socket.gethostname()),
            )
        except StoreError as exc:
            log.debug("job %s: phase not read: %s", self.job_id, exc)
            return None
        return rows[0]["kind"] if rows else None

    def _write(self, **values: Any) -> None:
        try:
            update_job(self.store, self.job_id, only_active=True, heartbeat=time.time(), **values)
        except (StoreError, sqlite3.Error) as exc:
            log.warning("job %s: its row was not updated: %s", self.job_id, exc)

    def result(self, run_id: str | None) -> None:
        """The run the job produced (recorded with the outcome)."""
        self._run_id = run_id

    def finish(self, state: str, error: str | None = None) -> None:
        """Write the outcome (once: a later call changes nothing) and stop the heartbeat."""
        self._heart.stop()
        with self._lock:
            values = {**(self._pending or {}), "state": state, "finished": time.time()}
            if error is not None:
                values["error"] = error
            if self._run_id is not None:
                values["run_id"] = self._run_id
            self._pending = None
            self._write(**values)


def error_text(exc: BaseException) -> str:
    """A failure's message as the job row keeps it (a PruneScopeError's own words)."""
    return str(exc) if isinstance(exc, PruneScopeError) else f"{type(exc).__name__}: {exc}"


@contextlib.contextmanager
def job_process(store: RunStore, job_id: str) -> Iterator[JobReporter]:
    """Run a job's work with its row kept: 'running' and progress while it works, then
    'done', 'cancelled' (SIGTERM or SIGINT) or 'failed' with the error."""
    signalled = threading.Event()

    def interrupt(signum: int, frame: Any) -> None:
        signalled.set()
        raise KeyboardInterrupt(f"signal {signum}")

    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, interrupt)
    reporter = JobReporter(store, job_id)
    try:
        yield reporter
    except BaseException as exc:
        # a library may turn the interrupt into an error of its own: still a cancel
        if isinstance(exc, KeyboardInterrupt) or signalled.is_set():
            reporter.finish(CANCELLED, CANCELLED_ERROR)
        else:
            reporter.finish(FAILED, error_text(exc))
        raise
    reporter.finish(DONE)
