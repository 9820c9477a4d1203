"""A job's files beside the progress log its run writes, and the processes jobs run in::

<root>/progress/<job>.config.json  the resolved RunConfig the job executes
<root>/progress/<job>.log          the job's stdout and stderr (for a person; never parsed)
<root>/progress/<run>.jsonl        progress events written by each run (core.store.run_store)

The job's state is not in a file: it is its row of the store's jobs table
(core.store.jobs_table).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from pathlib import Path

from core.store.run_store import RunStore

# Popen objects of the jobs this process started; polled so finished children are reaped
# (a zombie still answers kill(pid, 0)).
CHILDREN: dict[int, subprocess.Popen] = {}


def config_path(store: RunStore, job_id: str) -> Path:
    return store.root / "progress" / f"{job_id}.config.json"


def log_path(store: RunStore, job_id: str) -> Path:
    return store.root / "progress" / f"{job_id}.log"


def model_dir(store: RunStore, run_id: str) -> Path:
    """Where a model saved by a job started from the app goes."""
    return store.root / "models" / run_id


def reap() -> None:
    """Wait for the finished children of this process (so none stays a zombie)."""
    for pid, proc in list(CHILDREN.items()):
        if proc.poll() is not None:
            del CHILDREN[pid]


def send_signal(pid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, sig)
