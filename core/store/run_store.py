"""The results store: one folder per run, indexed in an embedded SQLite database.

Layout under the store root ($PRUNESCOPE_HOME or the platform user-data dir)::

    index.sqlite                 one row per run: id, kind, status, summary, config;
                                 one row per background job (core.store.jobs_table)
    runs/<id>/config.json        the resolved config (its hash is <id>)
    runs/<id>/env.json           versions, device, host, git commit
    runs/<id>/metrics.json       headline numbers
    runs/<id>/tables/<t>.parquet per-layer tables, trajectories, sweeps
    runs/<id>/arrays/<a>.safetensors  masks, attention maps
    runs/<id>/files.json         every file above with its size (core.store.integrity)
    progress/<id>.jsonl          live progress of a running job

A run is written into ``tmp/`` and renamed into ``runs/`` only when complete; the index row
goes from 'running' to 'done' after the rename, so a crash never leaves a half-written run
marked done. A running job refreshes its row's heartbeat (core.store.heartbeat); on open, rows
whose heartbeat went stale (or whose pid died on this host) are marked 'interrupted', so
several hosts can share a store. The index only caches what the run folders hold: a missing
one is rebuilt from them, a damaged one is named with the way out (``core.store.reindex``).
``import_run`` publishes a finished run folder from another store (a sweep worker's)
atomically under its run id.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import sqlite3
import time
import uuid
from pathlib import Path
from typing import Any

import pandas as pd
import torch
from platformdirs import user_data_dir
from safetensors.torch import save_file

from core.errors import StoreError, StoreIndexError
from core.settings.config import RunConfig
from core.store.heartbeat import STALE_S, Heartbeat, pid_alive, run_alive
from core.store.integrity import damaged_message, folder_problem, write_manifest
from core.store.record import Run, RunRecord
from core.store.reindex import INSERT, damage_message, is_corruption, open_index, row_values

__all__ = ["Run", "RunRecord", "RunStore", "RunWriter", "pid_alive"]


def default_root() -> Path:
    env = os.environ.get("PRUNESCOPE_HOME")
    if env:
        return Path(env).expanduser()
    return Path(user_data_dir("prunescope"))


class RunStore:
    """Create, list, load and delete runs. Safe to use from several processes."""

    def __init__(self, root: str | Path | None = None) -> None:
        self.root = Path(root).expanduser() if root is not None else default_root()
        try:
            for sub in ("runs", "tmp", "progress"):
                (self.root / sub).mkdir(parents=True, exist_ok=True)
            open_index(self.root)  # rebuilt when missing; StoreIndexError when damaged
            probe = self.root / "tmp" / f".probe-{uuid.uuid4().hex}"
            probe.write_text("ok")
            probe.unlink()
        except StoreIndexError:
            raise
        except (OSError, sqlite3.Error) as exc:
            raise StoreError(f"results store at {self.root} is not writable: {exc}") from exc
        self.reconcile()

    # ---- index ------------------------------------------------------------------------
    def _db(self) -> sqlite3.Connection:
        db = sqlite3.connect(self.root / "index.sqlite", timeout=30, isolation_level=None)
        db.row_factory = sqlite3.Row
        db.execute("PRAGMA journal_mode=WAL")
        return db

    def _query(self, sql: str, args: tuple = ()) -> list[sqlite3.Row]:
        try:
            db = self._db()
        except sqlite3.Error as exc:
            raise self._index_error(exc) from exc
        try:
            return db.execute(sql, args).fetchall()
        except sqlite3.Error as exc:
            raise self._index_error(exc) from exc
        finally:
            db.close()

    def query(self, sql: str, args: tuple = ()) -> list[sqlite3.Row]:
        """One statement on the index (the jobs table's, core.store.jobs_table)."""
        return self._query(sql, args)

    def _index_error(self, exc: sqlite3.Error) -> StoreError:
        """A damaged index says so (and how to rebuild it); other errors as they are."""
        if is_corruption(exc):
            return StoreIndexError(damage_message(self.root, str(exc)))
        return StoreError(f"results store {self.root}: {exc}")

    def version(self) -> tuple[int, ...]:
        """A stamp that changes whenever the index does (every write lands in SQLite's WAL
        file, a checkpoint rewrites the main one): keys caches of what pages read."""
        stamp: list[int] = []
        for name in ("index.sqlite", "index.sqlite-wal"):
            try:
                st = (self.root / name).stat()
            except OSError:
                stamp += [0, 0]
            else:
                stamp += [st.st_mtime_ns, st.st_size]
        return tuple(stamp)

    def reconcile(self) -> list[str]:
        """Mark running rows whose heartbeat is stale (or whose pid died on this host) as
        'interrupted'; drop orphaned temp folders. Other hosts' live runs are left alone."""
        rows = self._query("SELECT id, pid, host, heartbeat FROM runs WHERE status='running'")
        gone = [r["id"] for r in rows if not run_alive(r["pid"], r["host"], r["heartbeat"])]
        for run_id in gone:
            self._set_status(
                run_id, "interrupted", error="the process running it ended unexpectedly"
            )
        live = {r["id"] for r in self._query("SELECT id FROM runs WHERE status='running'")}
        for tmp in (self.root / "tmp").glob("*"):
            # an import in flight is young; one older than STALE_S was left by a dead process
            importing = ".import-" in tmp.name and time.time() - tmp.stat().st_mtime < STALE_S
            if tmp.name.split(".")[0] not in live and not importing:
                shutil.rmtree(tmp, ignore_errors=True)
        return gone

    def beat(self, run_id: str) -> None:
        """Refresh a running run's heartbeat (core.store.heartbeat)."""
        self._query(
            "UPDATE runs SET heartbeat=? WHERE id=? AND status='running'", (time.time(), run_id)
        )

    def _alive_row(self, run_id: str) -> bool:
        rows = self._query("SELECT status, pid, host, heartbeat FROM runs WHERE id=?", (run_id,))
        return bool(
            rows
            and rows[0]["status"] == "running"
            and run_alive(rows[0]["pid"], rows[0]["host"], rows[0]["heartbeat"])
        )

    def _set_status(self, run_id: str, status: str, error: str | None = None, summary=None) -> None:
        sets, args = ["status=?", "finished=?"], [status, time.time()]
        if error is not None:
            sets.append("error=?")
            args.append(error)
        if summary is not None:
            sets.append("summary=?")
            args.append(json.dumps(summary, default=str))
        self._query(f"UPDATE runs SET {', '.join(sets)} WHERE id=?", (*args, run_id))

    def running_elsewhere(self, run_id: str) -> bool:
        """True while another live process is computing ``run_id``."""
        rows = self._query("SELECT pid, host FROM runs WHERE id=?", (run_id,))
        mine = rows and rows[0]["pid"] == os.getpid() and rows[0]["host"] == socket.gethostname()
        return bool(rows) and not mine and self._alive_row(run_id)

    def wait_while_running(
        self, run_id: str, poll_s: float = 2.0, timeout_s: float = 86400
    ) -> None:
        """Block while another process computes ``run_id`` (e.g. a dense baseline that two
        jobs need at once), so the second reuses the first's result."""
        deadline = time.time() + timeout_s
        while self.running_elsewhere(run_id):
            if time.time() > deadline:
                raise StoreError(f"gave up waiting for run {run_id} after {timeout_s:.0f} s")
            time.sleep(poll_s)

    def get(self, run_id: str) -> RunRecord:
        rows = self._query("SELECT * FROM runs WHERE id=?", (run_id,))
        if not rows:
            rows = self._query("SELECT * FROM runs WHERE id LIKE ?", (run_id + "%",))
            if len(rows) != 1:
                raise StoreError(
                    f"no run {run_id!r} in {self.root}"
                    if not rows
                    else f"run id prefix {run_id!r} is ambiguous"
                )
        return RunRecord.from_row(rows[0])

    def list(self, kind: str | None = None, status: str | None = None) -> list[RunRecord]:
        sql, args = "SELECT * FROM runs", []
        conds = []
        if kind:
            conds.append("kind=?")
            args.append(kind)
        if status:
            conds.append("status=?")
            args.append(status)
        if conds:
            sql += " WHERE " + " AND ".join(conds)
        return [
            RunRecord.from_row(r) for r in self._query(sql + " ORDER BY created DESC", tuple(args))
        ]

    def delete(self, run_id: str) -> None:
        rec = self.get(run_id)
        if self._alive_row(rec.id):
            raise StoreError(f"run {rec.id} is still running; cancel it first")
        # Move the folder aside first so a crash leaves either the whole run or nothing.
        folder = self.run_dir(rec.id)
        trash = self.root / "tmp" / f"{rec.id}.deleted-{uuid.uuid4().hex[:6]}"
        if folder.exists():
            folder.rename(trash)
        self._query("DELETE FROM runs WHERE id=?", (rec.id,))
        shutil.rmtree(trash, ignore_errors=True)
        (self.root / "progress" / f"{rec.id}.jsonl").unlink(missing_ok=True)

    # ---- run folders --------------------------------------------------------------------
    def run_dir(self, run_id: str) -> Path:
        return self.root / "runs" / run_id

    def progress_path(self, run_id: str) -> Path:
        return self.root / "progress" / f"{run_id}.jsonl"

    def begin(self, config: RunConfig, force: bool = False) -> RunWriter:
        """Start writing a run. Raises StoreError if the same run is already running."""
        run_id = config.run_id
        if self._alive_row(run_id):
            raise StoreError(f"run {run_id} (same configuration) is already running")
        self._insert(config, "running", {}, os.getpid(), socket.gethostname())
        tmp = self.root / "tmp" / f"{run_id}.{uuid.uuid4().hex[:8]}"
        tmp.mkdir(parents=True)
        self.progress_path(run_id).write_text("")
        return RunWriter(self, run_id, tmp, config)

    def _insert(self, config: RunConfig, status: str, summary: dict, pid, host) -> None:
        self._query(INSERT, row_values(config, status, summary, pid, host))

    def import_run(self, folder: str | Path) -> bool:
        """Publish a finished run folder of another store (a worker's) under its run id.

        The folder is checked (its config hashes to its name, metrics.json exists), copied
        into tmp/ and renamed into runs/ in one step, then indexed 'done'. Returns False when
        this store already holds that run done (nothing is duplicated or replaced).
        """
        src = Path(folder)
        try:
            config = RunConfig.from_dict(json.loads((src / "config.json").read_text()))
            metrics = json.loads((src / "metrics.json").read_text())
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise StoreError(f"{src} is not a finished run folder: {exc}") from exc
        if config.run_id != src.name:
            raise StoreError(f"{src}: its config hashes to {config.run_id}, not {src.name}")
        rows = self._query("SELECT status FROM runs WHERE id=?", (config.run_id,))
        final = self.run_dir(config.run_id)
        if rows and rows[0]["status"] == "done" and final.is_dir():
            return False
        tmp = self.root / "tmp" / f"{config.run_id}.import-{uuid.uuid4().hex[:8]}"
        shutil.copytree(src, tmp)
        if final.exists():  # a failed/interrupted leftover: replace it
            old = self.root / "tmp" / f"{config.run_id}.replaced-{uuid.uuid4().hex[:6]}"
            final.rename(old)
            shutil.rmtree(old, ignore_errors=True)
        try:
            tmp.rename(final)
        except OSError:  # another importer published it first
            shutil.rmtree(tmp, ignore_errors=True)
            return False
        host = (
            json.loads((final / "env.json").read_text()).get("host")
            if (final / "env.json").is_file()
            else None
        )
        self._insert(config, "done", metrics, None, host)
        (self.root / "progress" / f"{config.run_id}.jsonl").unlink(missing_ok=True)
        return True

    def load(self, run_id: str) -> Run:
        """A finished run, its folder checked whole first (``DamagedRunError`` names the
        file and the way out, core.store.integrity)."""
        rec = self.get(run_id)
        if rec.status != "done":
            raise StoreError(f"run {rec.id} is {rec.status}, not done")
        run = Run(rec, self.run_dir(rec.id))
        run.check()
        return run

    def damage(self, rec: RunRecord) -> str | None:
        """The damaged-run message of a finished run; None when its folder is whole."""
        found = folder_problem(self.run_dir(rec.id)) if rec.status == "done" else None
        return None if found is None else damaged_message(rec.id, self.run_dir(rec.id), *found)


class RunWriter:
    """Collects one run's files in a temp folder; ``commit`` publishes them atomically."""

    def __init__(self, store: RunStore, run_id: str, tmp: Path, config: RunConfig) -> None:
        self.store, self.run_id, self.dir, self.config = store, run_id, tmp, config
        self._write_json("config.json", config.to_dict())
        self._done = False
        self._heart = Heartbeat(lambda: store.beat(run_id))

    def _write_json(self, name: str, obj: Any) -> None:
        (self.dir / name).write_text(json.dumps(obj, indent=2, sort_keys=True, default=str))

    def write_env(self, env: dict[str, Any]) -> None:
        self._write_json("env.json", env)

    def write_table(self, name: str, rows: list[dict[str, Any]] | pd.DataFrame) -> None:
        df = rows if isinstance(rows, pd.DataFrame) else pd.DataFrame(rows)
        (self.dir / "tables").mkdir(exist_ok=True)
        df.to_parquet(self.dir / "tables" / f"{name}.parquet", index=False)

    def write_arrays(self, name: str, arrays: dict[str, torch.Tensor]) -> None:
        (self.dir / "arrays").mkdir(exist_ok=True)
        save_file(
            {k: v.detach().cpu().contiguous() for k, v in arrays.items()},
            str(self.dir / "arrays" / f"{name}.safetensors"),
        )

    def progress(self, stage: str, done: int, total: int, detail: str = "") -> None:
        """A ProgressFn that appends JSON lines the app can poll."""
        event = {"t": time.time(), "stage": stage, "done": done, "total": total, "detail": detail}
        with self.store.progress_path(self.run_id).open("a") as fh:
            fh.write(json.dumps(event) + "\n")

    def commit(self, metrics: dict[str, Any]) -> Path:
        self._write_json("metrics.json", metrics)
        write_manifest(self.dir)  # what a later read checks the folder against
        final = self.store.run_dir(self.run_id)
        if final.exists():  # a forced re-run replaces the old folder
            old = self.store.root / "tmp" / f"{self.run_id}.replaced-{uuid.uuid4().hex[:6]}"
            final.rename(old)
            shutil.rmtree(old, ignore_errors=True)
        self.dir.rename(final)
        self._heart.stop()
        self.store._set_status(self.run_id, "done", summary=metrics)
        self._done = True
        return final

    def fail(self, error: str, status: str = "failed") -> None:
        self._heart.stop()
        shutil.rmtree(self.dir, ignore_errors=True)
        self.store._set_status(self.run_id, status, error=error)
        self._done = True

    def __enter__(self) -> RunWriter:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if self._done:
            return
        if exc_type is None:
            self.fail("run ended without results")
        elif issubclass(exc_type, KeyboardInterrupt):
            self.fail("cancelled by the user", status="cancelled")
        else:
            self.fail(f"{exc_type.__name__}: {exc}")
