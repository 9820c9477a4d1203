"""A queue of background jobs run one after another (the demo set, core.demo).

``start_queue`` writes the list of items (each a resolved RunConfig, as JSON) to
``<root>/progress/<name>.queue.json`` and starts a driver process (``python -m
core.jobs.queue``) as a job of its own (``queue_job(name)``, launched by
``core.jobs.launch.launch_process`` like every job, its state in the jobs table). The driver
starts each item's config with ``start_config_job`` (the one launch protocol: ``python -m
core run --config FILE``), waits for its job to finish and records the outcome in the same
file, so each piece is an ordinary job (own row, log, cancel) and the app reads the whole set
from one small file and the driver's row:

    start_queue(store, "demo", [QueueItem("dense", "Dense baseline", eval_config), ...])
    status = queue_status(store, "demo")   # per item: state, run id, elapsed; the live job
    cancel_queue(store, "demo")            # the running job is cancelled, the rest skipped

One at a time on purpose: on a CPU two jobs share the cores and neither finishes sooner.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from core.errors import PruneScopeError
from core.jobs.launch import GRACE_S, cancel, is_active, launch_process, start_config_job
from core.jobs.reporter import CANCELLED_ERROR, job_process
from core.jobs.status import FINISHED, JobStatus, job_status
from core.progress import ProgressFn, report
from core.settings.config import RunConfig
from core.store.jobs_table import ACTIVE, CANCELLED, get_job, read_state
from core.store.run_store import RunStore

log = logging.getLogger(__name__)

POLL_S = 1.0
QUEUE = "queue"  # the driver job's kind


@dataclass(frozen=True)
class QueueItem:
    """One job of a queue: the resolved config it runs (planned before the queue starts)."""

    key: str
    title: str
    config: RunConfig


@dataclass(frozen=True)
class ItemStatus:
    key: str
    title: str
    state: str  # "waiting" | "running" | one of FINISHED | "skipped"
    job_id: str | None = None
    run_id: str | None = None
    elapsed: float | None = None  # seconds: taken when finished, so far while running
    error: str | None = None


@dataclass(frozen=True)
class QueueStatus:
    """A queue's items and, while one runs, its live job status."""

    name: str
    state: str  # "running" | "done" | "cancelled" | "interrupted"
    items: tuple[ItemStatus, ...]
    elapsed: float
    current: JobStatus | None = None

    @property
    def finished(self) -> bool:
        return self.state != "running"

    @property
    def n_done(self) -> int:
        return sum(i.state in (*FINISHED, "skipped") for i in self.items)


def queue_job(name: str) -> str:
    """The job id of queue ``name``'s driver."""
    return f"queue-{name}"


def queue_path(store: RunStore, name: str) -> Path:
    return store.root / "progress" / f"{name}.queue.json"


def read_queue(store: RunStore, name: str) -> dict[str, Any] | None:
    try:
        return json.loads(queue_path(store, name).read_text())
    except (OSError, json.JSONDecodeError):
        return None


def _write(store: RunStore, name: str, state: dict[str, Any]) -> None:
    path = queue_path(store, name)
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_text(json.dumps(state, indent=2))
    tmp.replace(path)


def start_queue(store: RunStore, name: str, items: Sequence[QueueItem]) -> None:
    """Start the driver of a queue (nothing happens while the same queue still runs)."""
    if is_active(store, queue_job(name)):
        return
    state = {
        "name": name,
        "started": time.time(),
        "finished": None,
        "cancelled": False,
        "items": [
            {"key": i.key, "title": i.title, "config": i.config.to_dict(), "state": "waiting"}
            for i in items
        ],
    }
    _write(store, name, state)
    argv = ["-m", "core.jobs.queue", "--store", str(store.root), "--job", queue_job(name), name]
    launch_process(store, queue_job(name), QUEUE, None, argv)


def cancel_queue(store: RunStore, name: str) -> bool:
    """Stop a queue: its running job is cancelled and the items not yet started skipped
    (the driver cancels its item first, so it gets the time an item's cancel may take)."""
    return cancel(store, queue_job(name), grace=3 * GRACE_S)


def queue_status(store: RunStore, name: str) -> QueueStatus | None:
    """The queue's items as recorded by its driver; cheap (one small file, the driver's row
    and the running item's row of the jobs table)."""
    state = read_queue(store, name)
    if state is None:
        return None
    driver = get_job(store, queue_job(name))
    driver_state = read_state(driver) if driver is not None else None
    running = driver_state in ACTIVE
    items, current = [], None
    for it in state["items"]:
        status, elapsed = it["state"], it.get("elapsed")
        if status == "running" and not running:
            status = "interrupted"
        if status == "running" and it.get("started"):  # so far: the item records it at the end
            elapsed = time.time() - it["started"]
        items.append(
            ItemStatus(
                it["key"],
                it["title"],
                status,
                it.get("job_id"),
                it.get("run_id"),
                elapsed,
                it.get("error"),
            )
        )
        if it["state"] == "running" and running and it.get("job_id"):
            current = job_status(store, it["job_id"])
    # The driver writes "finished" into the file and then ends its job row: the queue has
    # finished only when both say so, so that a start right after `finished` is not ignored.
    if running:
        overall = "running"
    elif state.get("finished"):
        overall = "cancelled" if state.get("cancelled") else "done"
    else:
        overall = "interrupted"
    end = state.get("finished") or time.time()
    return QueueStatus(name, overall, tuple(items), end - state["started"], current)


# ---- the driver ---------------------------------------------------------------------------------
def _run_item(store: RunStore, name: str, state: dict[str, Any], item: dict[str, Any]) -> None:
    t0 = time.time()
    item.update(state="running", started=t0)
    try:
        job_id = start_config_job(store, RunConfig.from_dict(item["config"]))
    except PruneScopeError as exc:
        item.update(state="failed", error=str(exc), elapsed=0.0)
        return
    item["job_id"] = job_id
    _write(store, name, state)
    try:
        while not (status := job_status(store, job_id)).finished:
            time.sleep(POLL_S)
    except KeyboardInterrupt:
        cancel(store, job_id)
        item.update(state="cancelled", elapsed=time.time() - t0)
        raise
    item.update(
        state=status.state, run_id=status.run_id, error=status.error, elapsed=time.time() - t0
    )


def drive(store: RunStore, name: str, progress: ProgressFn | None = None) -> bool:
    """Run the queue's waiting items in order (``progress``: items finished of all, the
    next one's title); SIGINT or SIGTERM cancels the current one and skips the rest.
    Whether the queue was cancelled."""
    state = read_queue(store, name)
    if state is None:
        raise SystemExit(f"no queue {name!r} in {store.root}")
    items = state["items"]
    try:
        for n, item in enumerate(items):
            if item["state"] == "waiting":
                report(progress, QUEUE, n, len(items), item["title"])
                _run_item(store, name, state, item)
                _write(store, name, state)
                log.info("%s: %s %s", name, item["key"], item["state"])
        report(progress, QUEUE, len(items), len(items))
    except KeyboardInterrupt:
        state["cancelled"] = True
        for item in items:
            if item["state"] == "waiting":
                item["state"] = "skipped"
    state["finished"] = time.time()
    _write(store, name, state)
    return bool(state["cancelled"])


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description="run a job queue of the results store")
    ap.add_argument("--store", required=True)
    ap.add_argument("--job", required=True, help="the driver's job id (its row's id)")
    ap.add_argument("name")
    args = ap.parse_args(argv)
    # A driver started from a background shell inherits SIGINT ignored (and Python then keeps
    # it ignored), and so would every job it starts.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    store = RunStore(args.store)
    with job_process(store, args.job) as reporter:
        if drive(store, args.name, reporter):
            reporter.finish(CANCELLED, CANCELLED_ERROR)


if __name__ == "__main__":
    main()
