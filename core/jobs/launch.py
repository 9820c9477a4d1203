"""Start and cancel background jobs. One launch protocol: the app resolves what to run (a
RunConfig through ``core.requests.request``, or a grid sweep's configs, core.jobs.grid_sweep),
writes it as JSON and runs ``python -m core run --config FILE`` in a subprocess (the CLI's
code path, clean cancel, GPU memory freed when it ends).

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
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from core.errors import ConfigError
from core.jobs.records import (
    CHILDREN,
    alive,
    config_path,
    log_path,
    model_dir,
    read_job,
    send_signal,
    write_job,
)
from core.names import JOB_KINDS
from core.requests.request import plan_request
from core.settings.config import RunConfig
from core.store.run_store import RunStore

log = logging.getLogger(__name__)

PROJECT_ROOT = Path(__file__).resolve().parents[2]
GRACE_S = 10.0  # seconds between SIGINT and SIGTERM when cancelling
JOB_OWNED = ("store", "json", "quiet", "save", "force")  # set by the job, not by a form


def start_job(
    store: RunStore, command: str, params: Mapping[str, Any], save_model: bool = False
) -> str:
    """Plan ``command`` with these field values, then run it in the background; return the
    job id. Raises a PruneScopeError on bad input, before anything is written."""
    values = {k: v for k, v in params.items() if k not in JOB_OWNED}
    if save_model and command != "prune":
        raise ConfigError(f"saving the model is only offered for prune jobs, not {command}")
    cfg = plan_request(command, values, store)
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
    old = read_job(store, job_id)
    if old is not None and alive(old.get("pid"), old.get("host")):
        return job_id
    path = config_path(store, job_id)
    path.write_text(json.dumps(cfg.to_dict(), indent=2))
    launch_config(store, job_id, cfg.kind, cfg.run_id, path, flags, planned)
    return job_id


def launch_config(
    store: RunStore,
    job_id: str,
    command: str,
    run_id: str,
    path: Path,
    flags: list[str] | None = None,
    planned: bool = False,
) -> None:
    """Start ``python -m core run --config PATH`` (a resolved configuration's JSON: a
    RunConfig or a core.sweeps.grid.GridJob) as job ``job_id``: every background job's
    launch."""
    argv = ["run", "--config", str(path), "--store", str(store.root), "--json", "--quiet"]
    launch_process(store, job_id, command, run_id, [*argv, *(flags or [])], planned)


def launch_process(
    store: RunStore, job_id: str, command: str, run_id: str, argv: list[str], planned: bool
) -> None:
    """Start ``python -m core ARGV`` as a background process logging to the job's file, and
    record job ``job_id`` (its pid, host, start time) in the store."""
    store.progress_path(job_id).unlink(missing_ok=True)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(PROJECT_ROOT), env.get("PYTHONPATH")) if p)
    env.setdefault("TRANSFORMERS_VERBOSITY", "error")
    with log_path(store, job_id).open("w") as logf:
        proc = subprocess.Popen(
            [sys.executable, "-m", "core", *argv],
            cwd=PROJECT_ROOT,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=logf,
            stderr=subprocess.STDOUT,
        )
    CHILDREN[proc.pid] = proc
    job = {
        "id": job_id,
        "command": command,
        "run_id": run_id,
        "argv": argv,
        "pid": proc.pid,
        "host": socket.gethostname(),
        "started": time.time(),
        "planned": planned,
        "cancel_requested": None,
    }
    write_job(store, job)
    log.info("started job %s (pid %d): %s", job_id, proc.pid, " ".join(argv))


def cancel(store: RunStore, job_id: str, wait: float = 3.0) -> bool:
    """Ask a job to stop (SIGINT: the run is stored as 'cancelled'); SIGTERM follows after
    GRACE_S if it is still alive (see ``job_status``). Returns False if it was not running."""
    job = read_job(store, job_id)
    if job is None or not alive(job["pid"], job["host"]):
        return False
    send_signal(job["pid"], signal.SIGINT)
    job["cancel_requested"] = time.time()
    write_job(store, job)
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline and alive(job["pid"], job["host"]):
        time.sleep(0.1)
    escalate(store, job)
    return True


def escalate(store: RunStore, job: dict[str, Any]) -> None:
    """SIGTERM a job that ignored SIGINT for GRACE_S; the store then marks it interrupted."""
    asked = job.get("cancel_requested")
    if asked is None or time.time() - asked < GRACE_S or not alive(job["pid"], job["host"]):
        return
    log.warning("job %s ignored SIGINT for %.0f s; sending SIGTERM", job["id"], GRACE_S)
    send_signal(job["pid"], signal.SIGTERM)
    for _ in range(50):
        if not alive(job["pid"], job["host"]):
            break
        time.sleep(0.1)
    store.reconcile()
