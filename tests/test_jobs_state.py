"""Job state in one place: the jobs table of the store's index (core.store.jobs_table).

A real job on tiny-llama is read by ``runs list`` and the Runs page with its log, progress
file and config file deleted; the liveness rule is checked on both sides (a row that must
not read lost, a row that must); cancel escalates to SIGKILL on a child that ignores
SIGTERM; an index written before the table existed gains it.
"""

from __future__ import annotations

import json
import os
import random
import signal
import socket
import sqlite3
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest
from test_app import open_page
from test_jobs import TINY

from core import jobs
from core.cli.main import main
from core.settings.config import ModelSpec, RunConfig
from core.store.jobs_table import (
    COLUMNS,
    DONE,
    JOB_STALE_S,
    LOST,
    RUNNING,
    JobRow,
    get_job,
    insert_job,
    read_state,
)
from core.store.reindex import INSERT, SCHEMA, rebuild_index, row_values
from core.store.run_store import RunStore

HOST = socket.gethostname()


def ended_pid() -> int:
    """The pid of a process that has ended and been waited for."""
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


def running_row(job_id: str, pid: int | None, beat_age: float, host: str = HOST) -> JobRow:
    now = time.time()
    return JobRow(
        job_id, "eval", RUNNING, now - beat_age - 5.0, pid=pid, host=host, heartbeat=now - beat_age
    )


def dump(store: RunStore) -> list[list[tuple]]:
    """Every row of both tables of the index."""
    return [[tuple(r) for r in store.query(f"SELECT * FROM {t}")] for t in ("runs", "jobs")]


# ---- the liveness rule ---------------------------------------------------------------------------
def test_a_row_reads_lost_only_when_stale_and_its_process_gone() -> None:
    stale, fresh = 2 * JOB_STALE_S, 1.0
    zombie = subprocess.Popen(["true"])  # ended, not waited for: a zombie of this process
    deadline = time.monotonic() + 10
    stat = Path(f"/proc/{zombie.pid}/stat")
    while time.monotonic() < deadline and ") Z " not in stat.read_text():
        time.sleep(0.01)
    try:
        # negative controls: not lost
        assert read_state(running_row("a", ended_pid(), fresh)) == RUNNING  # beat is fresh
        assert read_state(running_row("b", os.getpid(), stale)) == RUNNING  # pid is alive
        assert read_state(running_row("c", 99, fresh, host="elsewhere")) == RUNNING
        done = replace(running_row("d", ended_pid(), stale), state=DONE)
        assert read_state(done) == DONE  # an outcome stays what it is
        # positive controls: lost
        assert read_state(running_row("e", ended_pid(), stale)) == LOST
        assert read_state(running_row("f", zombie.pid, stale)) == LOST
        assert read_state(running_row("g", 99, stale, host="elsewhere")) == LOST
        assert read_state(running_row("h", None, stale)) == LOST  # never got a pid
        # the bound itself, over 50 draws of the beat's age on each side (every one must hold):
        # a gone process inside the bound reads running, outside it lost
        rng = random.Random(46)
        row = running_row("i", ended_pid(), 0.0)
        inside = [rng.uniform(0.0, JOB_STALE_S - 0.01) for _ in range(50)]
        outside = [rng.uniform(JOB_STALE_S + 0.01, 100 * JOB_STALE_S) for _ in range(50)]
        negatives = [read_state(row, now=row.heartbeat + age) == RUNNING for age in inside]
        positives = [read_state(row, now=row.heartbeat + age) == LOST for age in outside]
        assert sum(negatives) / 50 == 1.0 and sum(positives) / 50 == 1.0
        # and a live process keeps its row at any age
        alive = running_row("j", os.getpid(), 0.0)
        assert all(read_state(alive, now=alive.heartbeat + age) == RUNNING for age in outside)
    finally:
        zombie.wait()


def test_reading_a_lost_job_writes_nothing_and_reconcile_marks_it(store) -> None:
    cfg = RunConfig("eval", ModelSpec("tiny-llama"))
    pid = ended_pid()
    store.query(INSERT, row_values(cfg, "running", {}, pid, HOST))
    store.query("UPDATE runs SET heartbeat=? WHERE id=?", (time.time(), cfg.run_id))
    row = replace(running_row("job-x", pid, 2 * JOB_STALE_S), run_id=cfg.run_id)
    insert_job(store, row)
    before = dump(store)
    status = jobs.job_status(store, "job-x")
    assert status.state == LOST and status.finished and "no heartbeat" in status.error
    assert [s.state for s in jobs.active_jobs(store)] == [LOST]
    assert dump(store) == before  # a pure read: the index is untouched
    assert get_job(store, "job-x") == row and store.get(cfg.run_id).status == "running"
    assert jobs.reconcile_jobs(store) == ["job-x"]  # the explicit action
    stored = get_job(store, "job-x")
    assert stored.state == LOST and stored.finished is not None
    assert store.get(cfg.run_id).status == "interrupted"
    assert jobs.active_jobs(store) == [] and jobs.reconcile_jobs(store) == []


# ---- cancel --------------------------------------------------------------------------------------
STUBBORN = (
    "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
    "print('ready', flush=True); time.sleep(120)"
)


def test_cancel_kills_a_job_that_ignores_sigterm(store) -> None:
    child = subprocess.Popen([sys.executable, "-c", STUBBORN], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == "ready"  # SIGTERM is ignored from here
        insert_job(store, running_row("job-stubborn", child.pid, 0.0))
        t0 = time.monotonic()
        assert jobs.cancel(store, "job-stubborn", grace=0.5)
        assert child.wait(timeout=10) == -signal.SIGKILL  # SIGTERM did not stop it
        assert time.monotonic() - t0 >= 0.5  # the grace period was given first
    finally:
        if child.poll() is None:
            child.kill()
        child.wait()
    row = get_job(store, "job-stubborn")
    assert row.state == "cancelled" and row.cancel_requested is not None
    assert jobs.job_status(store, "job-stubborn").error == "cancelled by the user"
    assert jobs.cancel(store, "job-stubborn") is False  # not running any more


# ---- an older index ------------------------------------------------------------------------------
def test_an_index_without_the_jobs_table_gains_it(tmp_path) -> None:
    root = tmp_path / "store"
    root.mkdir()
    cfg = RunConfig("eval", ModelSpec("tiny-llama"))
    db = sqlite3.connect(root / "index.sqlite", isolation_level=None)
    db.execute(SCHEMA)  # the runs table alone, as every index was written before
    db.execute(INSERT, row_values(cfg, "failed", {}, None, HOST))
    db.close()
    store = RunStore(root)
    db = sqlite3.connect(root / "index.sqlite")
    assert {r[1] for r in db.execute("PRAGMA table_info(jobs)")} == set(COLUMNS)
    db.close()
    assert [r.id for r in store.list()] == [cfg.run_id]  # the old rows are kept
    row = replace(running_row("job-1", os.getpid(), 0.0), argv=("-m", "core", "run"))
    insert_job(store, row)
    assert get_job(store, "job-1") == row
    rebuild_index(root)  # a rebuild from the run folders keeps the job rows too
    assert get_job(RunStore(root), "job-1") == row


# ---- the acceptance point: state and progress from the table alone -------------------------------
def test_a_running_jobs_state_and_progress_need_no_file(store, capsys) -> None:
    slow = {**TINY, "seqlen": 512, "max_windows": 400, "nsamples": 64}
    job_id = jobs.start_job(store, "prune", slow)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            row = get_job(store, job_id)
            if row.state == RUNNING and row.total and row.done:
                break
            time.sleep(0.2)
        assert row.state == RUNNING and row.total, row
        os.kill(row.pid, signal.SIGSTOP)  # hold the job still while it is read
        try:
            progress = store.root / "progress"
            for path in progress.iterdir():  # its log, run progress file and config file
                path.unlink()
            assert list(progress.iterdir()) == []
            row = get_job(store, job_id)

            assert main(["runs", "list", "--store", str(store.root), "--json"]) == 0
            listed = {r["id"]: r for r in json.loads(capsys.readouterr().out)}[job_id]
            assert listed["status"] == "running"  # the run's own row
            assert (listed["job"], listed["job_state"]) == (job_id, RUNNING)
            assert (listed["phase"], listed["stage"]) == (row.phase, row.stage)
            assert (listed["done"], listed["total"]) == (row.done, row.total)
            assert main(["runs", "list", "--store", str(store.root)]) == 0
            text = f"running {row.stage} {row.done}/{row.total}"
            assert text in capsys.readouterr().out

            at = open_page("runs")
            table = next(d.value for d in at.dataframe if "job" in d.value.columns)
            shown = table.set_index("job").loc[job_id]
            assert (shown["state"], shown["stage"], shown["phase"]) == (
                RUNNING,
                row.stage,
                row.phase,
            )
            assert shown["steps"] == f"{row.done}/{row.total}"
            assert shown["progress"] == pytest.approx(row.done / row.total)
        finally:
            os.kill(row.pid, signal.SIGCONT)
    finally:
        cancelled = jobs.cancel(store, job_id)
    assert cancelled and jobs.job_status(store, job_id).state == "cancelled"
