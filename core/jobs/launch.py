"""Start and cancel background jobs. One launch protocol: the app plans what to run (a
``Plan`` through ``core.requests.request``, or a grid sweep's configs, core.jobs.grid_sweep),
writes its config as JSON and runs ``python -m core run --config FILE --job ID`` in a
subprocess (the CLI's code path, clean cancel, GPU memory freed when it ends), which plans
it once more from that file: the job's own plan. ``launch_process`` is the one
place a job's process starts (the demo queue's driver starts there too).

A job's state lives in its row of the store's jobs table (core.store.jobs_table): this
module writes the first row ('queued', the child's pid) and, on cancel, the last; everything
between is written by the job's process (core.jobs.reporter).

For prune, slice and recover runs the job id *is* the run id, so a reloaded page finds its job
again and a second start of the same config joins the running job; other jobs get a fresh
id. Every job records the id of the run it exists for.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from core.errors import ConfigError
from core.jobs.records import CHILDREN, config_path, log_path, model_dir, reap, send_signal
from core.jobs.reporter import CANCELLED_ERROR
from core.names import JOB_KINDS
from core.requests.request import plan_command
from core.runs.planned import Plan
from core.settings.config import RunConfig
from core.store.jobs_table import (
    ACTIVE,
    CANCELLED,
    QUEUED,
    JobRow,
    get_job,
    insert_job,
    process_gone,
    read_state,
    update_job,
)
from core.store.run_store import RunStore

log = logging.getLogger(__name__)

PROJECT_ROOT = Path(__file__).resolve().parents[2]
GRACE_S = 10.0  # seconds a cancelled job has between SIGTERM and SIGKILL
KILL_WAIT_S = 5.0  # seconds to wait for a SIGKILLed process to be gone
JOB_OWNED = ("store", "json", "quiet", "save", "force")  # set by the job, not by a form


def start_job(
    store: RunStore,
    command: str,
    params: Mapping[str, Any],
    save_model: bool = False,
    plan: Plan | None = None,
) -> str:
    """Plan ``command`` with these field values, then run it in the background; return the
    job id. ``plan``: the caller's plan of exactly these values (a form plans once for its
    estimate, its caption and this launch), used instead of planning again. Raises a
    PruneScopeError on bad input, before anything is written."""
    values = {k: v for k, v in params.items() if k not in JOB_OWNED}
    if save_model and command != "prune":
        raise ConfigError(f"saving the model is only offered for prune jobs, not {command}")
    cfg = (plan or plan_command(command, values, store)).cfg
    on_cpu = bool(values.get("activations_on_cpu"))
    return start_config_job(store, cfg, bool(params.get("force")), on_cpu, save_model)


def start_config_job(
    store: RunStore,
    cfg: RunConfig,
    force: bool = False,
    activations_on_cpu: bool = False,
    save_model: bool = False,
) -> str:
    """Run a resolved config in the background (``python -m core run --config FILE``, FILE
    its JSON); return the job id. A prune/slice job whose run is running already is joined."""
    planned = cfg.kind in JOB_KINDS
    job_id = cfg.run_id if planned else f"job-{uuid.uuid4().hex[:12]}"
    flags = ["--force"] if force else []
    if activations_on_cpu:
        flags.append("--activations-on-cpu")
    if save_model:  # the app's own folder for this run, written over when run again
        model_dir(store, job_id).parent.mkdir(exist_ok=True)
        flags += ["--save", str(model_dir(store, job_id))] + ([] if force else ["--force"])
    if is_active(store, job_id):
        return job_id
    path = config_path(store, job_id)
    path.write_text(json.dumps(cfg.to_dict(), indent=2))
    launch_config(store, job_id, cfg.kind, cfg.run_id, path, flags)
    return job_id


def is_active(store: RunStore, job_id: str) -> bool:
    """Whether job ``job_id`` is queued or running (core.store.jobs_table.read_state)."""
    row = get_job(store, job_id)
    return row is not None and read_state(row) in ACTIVE


def launch_config(
    store: RunStore,
    job_id: str,
    command: str,
    run_id: str,
    path: Path,
    flags: list[str] | None = None,
) -> None:
    """Start ``python -m core run --config PATH --job JOB_ID`` (a resolved configuration's
    JSON: a RunConfig or a core.sweeps.grid.GridJob): every background run's launch."""
    argv = ["run", "--config", str(path), "--store", str(store.root), "--job", job_id]
    argv += ["--json", "--quiet", *(flags or [])]
    launch_process(store, job_id, command, run_id, ["-m", "core", *argv])


def launch_process(
    store: RunStore, job_id: str, kind: str, run_id: str | None, argv: Sequence[str]
) -> None:
    """Start ``python ARGV`` as job ``job_id``'s process, logging to the job's file: its row
    is written 'queued' first, then given the child's pid (the child marks it 'running')."""
    reap()
    now = time.time()
    insert_job(store, JobRow(job_id, kind, QUEUED, now, run_id, heartbeat=now, argv=tuple(argv)))
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(PROJECT_ROOT), env.get("PYTHONPATH")) if p)
    env.setdefault("TRANSFORMERS_VERBOSITY", "error")
    with log_path(store, job_id).open("w") as logf:
        proc = subprocess.Popen(
            [sys.executable, *argv],
            cwd=PROJECT_ROOT,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=logf,
            stderr=subprocess.STDOUT,
        )
    CHILDREN[proc.pid] = proc
    update_job(store, job_id, pid=proc.pid, host=socket.gethostname())
    log.info("started job %s (pid %d): %s", job_id, proc.pid, " ".join(argv))


def _wait_gone(pid: int, host: str | None, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while True:
        reap()  # a child of this process stays a zombie until waited for
        if process_gone(pid, host):
            reap()  # it may have become one since
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.05)


def cancel(store: RunStore, job_id: str, grace: float = GRACE_S) -> bool:
    """Stop a job: SIGTERM (its run is stored 'cancelled'), SIGKILL if it is still alive
    after ``grace`` seconds, then its row marked 'cancelled' (unless the job wrote its own
    outcome first) and run rows a killed process left 'running' marked 'interrupted'.
    Returns False if it was not queued or running."""
    row = get_job(store, job_id)
    if row is None or read_state(row) not in ACTIVE:
        return False
    update_job(store, job_id, only_active=True, cancel_requested=time.time())
    if row.pid and row.host == socket.gethostname():
        send_signal(row.pid, signal.SIGTERM)
        if not _wait_gone(row.pid, row.host, grace):
            log.warning("job %s ignored SIGTERM for %.0f s; sending SIGKILL", job_id, grace)
            send_signal(row.pid, signal.SIGKILL)
            _wait_gone(row.pid, row.host, KILL_WAIT_S)
    end = {"state": CANCELLED, "finished": time.time(), "error": CANCELLED_ERROR}
    update_job(store, job_id, only_active=True, **end)
    store.reconcile()
    return True
