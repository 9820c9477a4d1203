"""Background jobs: the app runs the CLI in a subprocess and polls the results store.

A job is ``python -m core <command> ... --store <root> --json --quiet`` (same code path as
the command line, clean cancel, GPU memory freed when it ends). Its files sit next to the
progress log the run itself writes::

    <root>/progress/<job>.job.json   argv, pid, host, start time, cancel request
    <root>/progress/<job>.log        the job's stdout and stderr
    <root>/progress/<run>.jsonl      progress events written by each run (core.store)

For ``prune`` the job id *is* the run id (``pipeline.plan_prune`` computes it before the
launch), so a reloaded page finds its job again. Other commands get a fresh job id and
their runs are found through the pid the store records with every run.

    job = start_job(store, "prune", {"model": "tiny-llama", "method": "wanda", ...})
    status = job_status(store, job)      # state, stage, done/total, elapsed, ETA, error
    cancel(store, job)                   # SIGINT, then SIGTERM after GRACE_S
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import io
import json
import logging
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
import zipfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from itertools import takewhile
from pathlib import Path
from typing import Any

from core.config import RunConfig
from core.errors import ConfigError, StoreError
from core.store import RunRecord, RunStore, pid_alive

log = logging.getLogger(__name__)

PROJECT_ROOT = Path(__file__).resolve().parents[1]
GRACE_S = 10.0  # seconds between SIGINT and SIGTERM when cancelling
FINISHED = ("done", "failed", "cancelled", "interrupted")
KIND_OF_COMMAND = {"prune": "prune", "eval": "eval", "slice": "slice", "sweep": "sweep"}

# Popen objects of the jobs this process started; polled so finished children are reaped
# (a zombie still answers kill(pid, 0) and would look alive to the store).
_CHILDREN: dict[int, subprocess.Popen] = {}


# ---- command lines --------------------------------------------------------------------------
def job_argv(command: str, params: Mapping[str, Any]) -> list[str]:
    """CLI arguments for ``python -m core``: {"max_windows": 16} -> ["--max-windows", "16"].

    True gives a bare flag, False/None/"" are left out, a list repeats its flag.
    """
    argv = [command]
    for key, value in params.items():
        flag = "--" + key.replace("_", "-")
        if value is None or value is False or value == "":
            continue
        if value is True:
            argv.append(flag)
        elif isinstance(value, list | tuple):
            for item in value:
                argv += [flag, str(item)]
        else:
            argv += [flag, str(value)]
    return argv


def parse_job(argv: list[str]) -> argparse.Namespace:
    """Parse CLI arguments exactly as the job will; argparse errors become ConfigError."""
    from core.cli import build_parser

    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            return build_parser().parse_args(argv)
    except SystemExit as exc:
        lines = [ln for ln in err.getvalue().splitlines() if ln.strip()]
        msg = lines[-1].split("error: ", 1)[-1] if lines else f"bad arguments {argv}"
        raise ConfigError(msg) from exc


def _subparsers() -> dict[str, argparse.ArgumentParser]:
    from core.cli import build_parser

    for action in build_parser()._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def cli_commands() -> list[str]:
    """Subcommands the CLI offers now (the analyses register theirs when they land)."""
    return sorted(_subparsers())


@dataclass(frozen=True)
class CliOption:
    """One option of a CLI command, for drawing a form: ``key`` is the params key."""

    key: str
    kind: str  # "flag" | "int" | "float" | "choice" | "list" | "text"
    default: Any
    choices: tuple[Any, ...] | None
    help: str
    group: str


# Options every command has that a job sets itself.
_JOB_OWNED = {"help", "store", "json", "quiet", "verbose", "force", "save"}


def cli_options(command: str) -> list[CliOption]:
    """The options of ``python -m core <command>`` (argparse introspection), in order."""
    sub = _subparsers().get(command)
    if sub is None:
        raise ConfigError(f"the CLI has no {command!r} command (has: {', '.join(cli_commands())})")
    group_of = {id(a): g.title or "" for g in sub._action_groups for a in g._group_actions}
    out = []
    for action in sub._actions:
        long = [s for s in action.option_strings if s.startswith("--")]
        if not long:
            continue
        key = long[0].removeprefix("--").replace("-", "_")
        if key in _JOB_OWNED:
            continue
        out.append(
            CliOption(
                key,
                _kind(action),
                action.default,
                tuple(action.choices or ()) or None,
                action.help or "",
                group_of.get(id(action), ""),
            )
        )
    return out


def _kind(action: argparse.Action) -> str:
    if isinstance(action, argparse._StoreTrueAction):
        return "flag"
    if isinstance(action, argparse._AppendAction):
        return "list"
    if action.choices:
        return "choice"
    if action.type in (int, float):
        return action.type.__name__
    return "text"


def check_model_name(name: str) -> None:
    """Reject a model name that looks like a local path but is not a folder.

    Embedded names and Hugging Face ids pass; the job reports a missing Hub model.
    """
    from core.models import available_models

    name = name.strip()
    if not name:
        raise ConfigError("model name is empty")
    if name in available_models():
        return
    path = Path(name).expanduser()
    if path.exists() and not path.is_dir():
        raise ConfigError(f"{name!r} is a file; give a model folder or a Hugging Face id")
    looks_local = name.startswith((".", "/", "~")) or name.count("/") > 1
    if looks_local and not path.is_dir():
        raise ConfigError(f"model folder {name!r} does not exist")


def plan_prune_args(args: argparse.Namespace) -> RunConfig:
    """The resolved config ``python -m core prune`` will run, from its parsed arguments.

    Structured methods (SliceGPT) are handed by ``run_prune`` to core.slicing, whose runs
    are of kind 'slice' and so have their own id.
    """
    from core import cli
    from core.config import PruneConfig
    from core.methods import get_method
    from core.runs import plan_prune

    check_model_name(args.model)
    prune = PruneConfig(
        args.method,
        args.sparsity,
        args.pattern,
        args.targets,
        args.allocation,
        args.owl_lambda,
        args.owl_m,
        cli.parse_options(args.option),
    )
    parts = (cli.model_spec(args), prune, cli.calib_config(args), cli.eval_config(args),
             cli.zeroshot_config(args))  # fmt: skip
    return plan_prune(*parts)


# command -> planner giving the run id before launch; others are found by pid afterwards.
PLANNERS: dict[str, Callable[[argparse.Namespace], RunConfig]] = {"prune": plan_prune_args}


# ---- job files ------------------------------------------------------------------------------
def job_path(store: RunStore, job_id: str) -> Path:
    return store.root / "progress" / f"{job_id}.job.json"


def log_path(store: RunStore, job_id: str) -> Path:
    return store.root / "progress" / f"{job_id}.log"


def model_dir(store: RunStore, run_id: str) -> Path:
    """Where ``--save`` puts a pruned model started from the app."""
    return store.root / "models" / run_id


def read_job(store: RunStore, job_id: str) -> dict[str, Any] | None:
    try:
        return json.loads(job_path(store, job_id).read_text())
    except (OSError, json.JSONDecodeError):
        return None


def _write_job(store: RunStore, job: dict[str, Any]) -> None:
    path = job_path(store, job["id"])
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(job, indent=2))
    tmp.replace(path)


# ---- start ------------------------------------------------------------------------------------
def start_job(
    store: RunStore, command: str, params: Mapping[str, Any], save_model: bool = False
) -> str:
    """Validate, then launch ``python -m core <command>`` in the background; return the job id.

    For planned commands (prune) the job id is the run id. A job already running with the
    same id is joined rather than started twice. Raises a PruneScopeError on bad input,
    before anything is written.
    """
    params = {k: v for k, v in params.items() if k not in ("store", "json", "quiet", "save")}
    args = parse_job(job_argv(command, params))
    planner = PLANNERS.get(command)
    job_id = planner(args).run_id if planner else f"job-{uuid.uuid4().hex[:12]}"
    if save_model:
        if command != "prune":
            raise ConfigError(f"saving the model is only offered for prune jobs, not {command}")
        params["save"] = str(model_dir(store, job_id))
    old = read_job(store, job_id)
    if old is not None and _alive(old.get("pid"), old.get("host")):
        return job_id
    argv = job_argv(command, {**params, "store": str(store.root), "json": True, "quiet": True})
    _launch(store, job_id, command, argv, planned=planner is not None)
    return job_id


def _launch(store: RunStore, job_id: str, command: str, argv: list[str], planned: bool) -> None:
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
    _CHILDREN[proc.pid] = proc
    job = {
        "id": job_id,
        "command": command,
        "argv": argv,
        "pid": proc.pid,
        "host": socket.gethostname(),
        "started": time.time(),
        "planned": planned,
        "cancel_requested": None,
    }
    _write_job(store, job)
    log.info("started job %s (pid %d): %s", job_id, proc.pid, " ".join(argv))


# ---- processes ----------------------------------------------------------------------------------
def _reap() -> None:
    for pid, proc in list(_CHILDREN.items()):
        if proc.poll() is not None:
            del _CHILDREN[pid]


def _alive(pid: int | None, host: str | None) -> bool:
    _reap()  # a finished child of this process stays a zombie until waited for
    return pid_alive(pid, host)


def _signal(pid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, sig)


def cancel(store: RunStore, job_id: str, wait: float = 3.0) -> bool:
    """Ask a job to stop (SIGINT: the run is stored as 'cancelled'); SIGTERM follows after
    GRACE_S if it is still alive (see ``job_status``). Returns False if it was not running."""
    job = read_job(store, job_id)
    if job is None or not _alive(job["pid"], job["host"]):
        return False
    _signal(job["pid"], signal.SIGINT)
    job["cancel_requested"] = time.time()
    _write_job(store, job)
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline and _alive(job["pid"], job["host"]):
        time.sleep(0.1)
    _escalate(store, job)
    return True


def _escalate(store: RunStore, job: dict[str, Any]) -> None:
    """SIGTERM a job that ignored SIGINT for GRACE_S; the store then marks it interrupted."""
    asked = job.get("cancel_requested")
    if asked is None or time.time() - asked < GRACE_S or not _alive(job["pid"], job["host"]):
        return
    log.warning("job %s ignored SIGINT for %.0f s; sending SIGTERM", job["id"], GRACE_S)
    _signal(job["pid"], signal.SIGTERM)
    for _ in range(50):
        if not _alive(job["pid"], job["host"]):
            break
        time.sleep(0.1)
    store.reconcile()


# ---- status -------------------------------------------------------------------------------------
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
    """The run a job exists for: the planned id, else the newest run of the command's kind."""
    if job.get("planned"):
        try:
            return store.get(job["id"])
        except StoreError:
            return None
    kind = KIND_OF_COMMAND.get(job["command"], job["command"])
    mine = [r for r in runs if r.kind == kind]
    return mine[-1] if mine else None


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
    _escalate(store, job)
    alive = _alive(job["pid"], job["host"])
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
    if alive:
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


# ---- uploaded corpora ----------------------------------------------------------------------------
def save_corpus(store: RunStore, name: str, data: bytes, limit_mb: int) -> str:
    """Keep an uploaded text corpus under <root>/uploads (named by its hash) and return the
    ``file:<path>`` dataset name the CLI takes; refuse files over ``limit_mb``."""
    if len(data) > limit_mb * 2**20:
        raise ConfigError(
            f"{name} is {len(data) / 2**20:.1f} MB; the upload limit is {limit_mb} MB "
            "(server.maxUploadSize in .streamlit/config.toml)"
        )
    if not data.strip():
        raise ConfigError(f"{name} is empty")
    suffix = ".jsonl" if name.endswith(".jsonl") else ".txt"
    path = store.root / "uploads" / f"{hashlib.sha256(data).hexdigest()[:16]}{suffix}"
    path.parent.mkdir(exist_ok=True)
    path.write_bytes(data)
    return f"file:{path}"


# ---- clean-up and export ------------------------------------------------------------------------
def delete_run(store: RunStore, run_id: str) -> None:
    """Delete a run with its job files and any model the app saved for it."""
    import shutil

    rec = store.get(run_id)
    store.delete(rec.id)
    for path in (job_path(store, rec.id), log_path(store, rec.id)):
        path.unlink(missing_ok=True)
    shutil.rmtree(model_dir(store, rec.id), ignore_errors=True)


def zip_folder(folder: Path, prefix: str | None = None, compress: bool = True) -> bytes:
    """A folder as zip bytes (for download buttons); entries start with ``prefix``/.

    ``compress=False`` stores files as they are (model weights barely compress)."""
    return zip_folders({prefix or Path(folder).name: Path(folder)}, compress)


def zip_folders(folders: Mapping[str, Path], compress: bool = True) -> bytes:
    """Several folders in one zip, each under its own prefix."""
    buf = io.BytesIO()
    mode = zipfile.ZIP_DEFLATED if compress else zipfile.ZIP_STORED
    with zipfile.ZipFile(buf, "w", mode) as zf:
        for prefix, folder in folders.items():
            for path in sorted(folder.rglob("*")):
                if path.is_file():
                    zf.write(path, f"{prefix}/{path.relative_to(folder)}")
    return buf.getvalue()


def export_runs(store: RunStore, run_ids: list[str]) -> bytes:
    """Finished runs' folders (config, env, metrics, tables, arrays) as one zip."""
    return zip_folders({rid: store.load(rid).dir for rid in run_ids})
