"""A job's files beside the progress log its run writes, and the processes jobs run in::

<root>/progress/<job>.job.json     command, run id, pid, host, start time, cancel request
<root>/progress/<job>.config.json  the resolved RunConfig the job executes
<root>/progress/<job>.log          the job's stdout and stderr
<root>/progress/<run>.jsonl        progress events written by each run (core.store.run_store)
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
from pathlib import Path
from typing import Any

from core.store.run_store import RunStore, pid_alive

# Popen objects of the jobs this process started; polled so finished children are reaped
# (a zombie still answers kill(pid, 0) and would look alive to the store).
CHILDREN: dict[int, subprocess.Popen] = {}


def job_path(store: RunStore, job_id: str) -> Path:
    return store.root / "progress" / f"{job_id}.job.json"


def config_path(store: RunStore, job_id: str) -> Path:
    return store.root / "progress" / f"{job_id}.config.json"


def log_path(store: RunStore, job_id: str) -> Path:
    return store.root / "progress" / f"{job_id}.log"


def model_dir(store: RunStore, run_id: str) -> Path:
    """Where a model saved by a job started from the app goes."""
    return store.root / "models" / run_id


def read_job(store: RunStore, job_id: str) -> dict[str, Any] | None:
    try:
        return json.loads(job_path(store, job_id).read_text())
    except (OSError, json.JSONDecodeError):
        return None


def write_job(store: RunStore, job: dict[str, Any]) -> None:
    path = job_path(store, job["id"])
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(job, indent=2))
    tmp.replace(path)


def reap() -> None:
    for pid, proc in list(CHILDREN.items()):
        if proc.poll() is not None:
            del CHILDREN[pid]


def alive(pid: int | None, host: str | None) -> bool:
    reap()  # a finished child of this process stays a zombie until waited for
    return pid_alive(pid, host)


def send_signal(pid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, sig)
