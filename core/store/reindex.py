"""The store's SQLite index: its layout, whether it can be read, and its rebuild from the
run folders.

The index (``index.sqlite``) is a cache of what the run folders hold: every finished run is
``runs/<id>/`` with its ``config.json`` (which hashes to ``<id>``) and ``metrics.json``. So a
damaged index loses nothing a rebuild cannot restore but the rows of runs that have no
folder (failed, cancelled, interrupted, running). The rules:

- missing (or empty) index: rebuilt from the folders at once, by itself (nothing to lose);
- older layout, readable: missing nullable columns and the jobs table (core.store.jobs_table)
  added in place (every row kept); a layout that lacks a required column is set aside and
  rebuilt by itself, as it cannot be read;
- damaged (not an SQLite database, truncated, malformed): ``StoreIndexError`` naming the file
  and the way out, ``python -m core runs reindex``. Not done by itself: the store may be
  shared with other hosts whose writers are live, and the damaged file may still hold
  failed runs' rows that a person may want to read.

A rebuild carries the jobs table's rows over from a readable old index (no folder holds
them) and keeps the old files aside (``index.sqlite.damaged-<time>``, with its -wal/-shm: a
stale write-ahead log beside a new index would be replayed into it) and builds the new index
under a temporary name, renamed into place in one step.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import shlex
import sqlite3
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from core.errors import StoreIndexError
from core.settings.config import RunConfig
from core.store.jobs_table import JOBS_INDEX, JOBS_SCHEMA

log = logging.getLogger(__name__)

INDEX_FILE = "index.sqlite"
SIDE_FILES = ("-wal", "-shm")  # SQLite's write-ahead log and its shared-memory index
LOCK_FILE = ".index.lock"
SQLITE_MAGIC = b"SQLite format 3\x00"
_CORRUPT_CODES = (11, 26)  # SQLITE_CORRUPT, SQLITE_NOTADB

SCHEMA = """
CREATE TABLE IF NOT EXISTS runs (
    id TEXT PRIMARY KEY, kind TEXT NOT NULL, status TEXT NOT NULL,
    created REAL NOT NULL, finished REAL, model TEXT, method TEXT, sparsity REAL,
    pattern TEXT, dataset TEXT, summary TEXT, config TEXT NOT NULL, error TEXT,
    pid INTEGER, host TEXT, heartbeat REAL
)"""
REQUIRED = ("id", "kind", "status", "created", "config")
OPTIONAL = {
    "finished": "REAL",
    "model": "TEXT",
    "method": "TEXT",
    "sparsity": "REAL",
    "pattern": "TEXT",
    "dataset": "TEXT",
    "summary": "TEXT",
    "error": "TEXT",
    "pid": "INTEGER",
    "host": "TEXT",
    "heartbeat": "REAL",
}
COLUMNS = (
    "id", "kind", "status", "created", "finished", "model", "method", "sparsity", "pattern",
    "dataset", "summary", "config", "error", "pid", "host", "heartbeat",
)  # fmt: skip
INSERT = (
    f"INSERT OR REPLACE INTO runs ({', '.join(COLUMNS)}) VALUES ({', '.join('?' * len(COLUMNS))})"
)


def row_values(
    config: RunConfig,
    status: str,
    summary: dict[str, Any],
    pid: int | None,
    host: str | None,
    created: float | None = None,
) -> tuple:
    """The index row of a run, in ``COLUMNS`` order."""
    d = config.to_dict()
    prune = d.get("prune") or {}
    data = ((d.get("eval") or {}).get("data") or {}).get("dataset")
    if config.kind == "zeroshot":  # its eval field is unused: show the tasks instead
        data = "tasks: " + ",".join((d["extra"].get("zeroshot") or {}).get("tasks") or [])
    now = time.time()
    created = now if created is None else created
    return (
        config.run_id,
        config.kind,
        status,
        created,
        None if status == "running" else created,
        config.model.name,
        prune.get("method"),
        prune.get("sparsity"),
        prune.get("pattern"),
        data,
        json.dumps(summary, default=str),
        config.canonical_json(),
        None,  # error
        pid,
        host,
        now,
    )


# ---- health ------------------------------------------------------------------------------------
def is_corruption(exc: BaseException) -> bool:
    """An sqlite3 error that says the file is damaged (not locked, not read-only)."""
    code = getattr(exc, "sqlite_errorcode", None)
    return (
        isinstance(exc, sqlite3.DatabaseError)
        and code is not None
        and code & 0xFF in (_CORRUPT_CODES)
    )


def _sqlite_problem(path: Path) -> str | None:
    """What SQLite's quick_check finds wrong (None: nothing)."""
    try:
        db = sqlite3.connect(path, timeout=30)
        try:
            rows = db.execute("PRAGMA quick_check").fetchall()
        finally:
            db.close()
    except sqlite3.DatabaseError as exc:
        return str(exc) if is_corruption(exc) else None
    first = rows[0][0] if rows else "ok"
    return None if first == "ok" else str(first)


def index_damage(root: str | Path) -> str | None:
    """Why the index of the store at ``root`` cannot be read; None when it can (or is
    absent). Reads its 100-byte header; a file shorter than the header says is confirmed
    with SQLite's quick_check (a checkpoint in progress may be extending it)."""
    path = Path(root) / INDEX_FILE
    try:
        size = path.stat().st_size
        if size == 0:
            return None
        with open(path, "rb") as fh:
            head = fh.read(100)
    except OSError:  # absent, or the store itself unreadable (RunStore says so)
        return None
    if not head.startswith(SQLITE_MAGIC[: len(head)]) or len(head) < len(SQLITE_MAGIC):
        return "file is not a database"
    if len(head) < 100:
        return f"truncated to {size} bytes, shorter than its own header"
    page = int.from_bytes(head[16:18], "big")
    page = 65536 if page == 1 else page
    pages = int.from_bytes(head[28:32], "big")
    expected = page * pages
    if head[24:28] == head[92:96] and pages and size < expected:
        problem = _sqlite_problem(path)
        if problem:
            return f"truncated: {size:,} of {expected:,} bytes ({problem})"
    return None


def reindex_command(root: str | Path) -> str:
    """The CLI command that rebuilds this store's index."""
    return f"python -m core runs reindex --store {shlex.quote(str(root))}"


def damage_message(root: str | Path, problem: str) -> str:
    """One message for a damaged index: what, where, what is intact and the way out."""
    root = Path(root)
    n = sum(1 for _ in run_folders(root))
    return (
        f"the index of the results store at {root} is damaged: {root / INDEX_FILE}: {problem}. "
        f"The {n} run folder(s) under {root / 'runs'} are untouched; rebuild the index from "
        f"them with `{reindex_command(root)}` (the damaged file is kept aside)"
    )


# ---- rebuild -----------------------------------------------------------------------------------
@contextlib.contextmanager
def index_lock(root: Path) -> Iterator[None]:
    """Hold the store's index lock (one checker or rebuilder at a time, across processes)."""
    with open(root / LOCK_FILE, "a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def run_folders(root: Path) -> Iterator[Path]:
    """Finished run folders (``runs/<id>/`` with metrics.json), sorted by id."""
    runs = root / "runs"
    if runs.is_dir():
        yield from (p for p in sorted(runs.iterdir()) if (p / "metrics.json").is_file())


@dataclass(frozen=True)
class Reindexed:
    """What a rebuild did: runs indexed, folders skipped (with why), files kept aside and
    rows carried over from a readable old index (runs without a folder)."""

    runs: int
    skipped: list[tuple[str, str]] = field(default_factory=list)
    kept_aside: list[str] = field(default_factory=list)
    carried: int = 0


def _old_rows(path: Path, table: str = "runs") -> list[dict[str, Any]]:
    """The rows of a table of a readable old index (none when it cannot be read)."""
    if not path.is_file() or index_damage(path.parent) is not None:
        return []
    try:
        db = sqlite3.connect(path, timeout=30)
        db.row_factory = sqlite3.Row
        try:
            return [dict(r) for r in db.execute(f"SELECT * FROM {table}")]
        finally:
            db.close()
    except sqlite3.Error:
        return []


def create_tables(db: sqlite3.Connection) -> None:
    """The runs table and the jobs table (core.store.jobs_table), where absent."""
    db.execute(SCHEMA)
    db.execute(JOBS_SCHEMA)
    db.execute(JOBS_INDEX)


def _set_aside(root: Path, label: str) -> list[str]:
    """Rename the index and its -wal/-shm to ``index.sqlite.<label>-<time>[-wal|-shm]``."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    moved = []
    for suffix in ("", *SIDE_FILES):
        src = root / f"{INDEX_FILE}{suffix}"
        if src.exists():
            dest = root / f"{INDEX_FILE}.{label}-{stamp}{suffix}"
            os.replace(src, dest)
            moved.append(str(dest))
    return moved


def _folder_row(folder: Path, old: dict[str, dict[str, Any]]) -> tuple:
    """The 'done' row of a run folder (its config must hash to its name)."""
    config = RunConfig.from_dict(json.loads((folder / "config.json").read_text()))
    if config.run_id != folder.name:
        raise ValueError(f"its config hashes to {config.run_id}")
    metrics = json.loads((folder / "metrics.json").read_text())
    env = folder / "env.json"
    host = json.loads(env.read_text()).get("host") if env.is_file() else None
    prev = old.get(folder.name) or {}
    created = prev.get("created") or (folder / "metrics.json").stat().st_mtime
    return row_values(config, "done", metrics, None, host, created)


def rebuild_index(root: str | Path, label: str = "damaged", locked: bool = False) -> Reindexed:
    """Rebuild ``root``'s index from its run folders (old files kept aside as
    ``index.sqlite.<label>-<time>``). Rows of runs without a folder are carried over from
    the old index when it can still be read. Returns what was done."""
    root = Path(root).expanduser()
    if not locked:
        with index_lock(root):
            return rebuild_index(root, label, locked=True)
    old = {r["id"]: r for r in _old_rows(root / INDEX_FILE)}
    rows, skipped = [], []
    for folder in run_folders(root):
        try:
            rows.append(_folder_row(folder, old))
        except (OSError, ValueError, KeyError, TypeError) as exc:
            skipped.append((folder.name, str(exc)))
            log.warning("run folder %s not indexed: %s", folder, exc)
    done = {r[0] for r in rows}
    carried = [
        tuple(r.get(c) for c in COLUMNS)
        for r in old.values()
        if r["id"] not in done and r.get("status") != "done"
    ]
    jobs = _old_rows(root / INDEX_FILE, "jobs")  # job rows are not in the folders: kept
    tmp = root / f".{INDEX_FILE}.rebuilding-{uuid.uuid4().hex[:8]}"
    db = sqlite3.connect(tmp, isolation_level=None)
    try:
        create_tables(db)
        db.execute("BEGIN")
        db.executemany(INSERT, rows + carried)
        for job in jobs:
            marks = ", ".join("?" * len(job))
            db.execute(f"INSERT INTO jobs ({', '.join(job)}) VALUES ({marks})", [*job.values()])
        db.execute("COMMIT")
    finally:
        db.close()
    kept = _set_aside(root, label)
    os.replace(tmp, root / INDEX_FILE)
    log.warning("rebuilt the index of %s from %d run folder(s)", root, len(rows))
    return Reindexed(len(rows), skipped, kept, len(carried))


def open_index(root: Path) -> None:
    """Make the index at ``root`` usable before a store works with it: rebuild it by itself
    when missing or of an unreadable older layout, add missing nullable columns, or raise
    ``StoreIndexError`` when it is damaged (see the module docstring)."""
    with index_lock(root):
        path = root / INDEX_FILE
        absent = not path.is_file() or path.stat().st_size == 0
        if absent and any(True for _ in run_folders(root)):
            rebuild_index(root, "empty", locked=True)
            return
        problem = index_damage(root)
        if problem is not None:
            raise StoreIndexError(damage_message(root, problem))
        try:
            db = sqlite3.connect(path, timeout=30, isolation_level=None)
            try:
                db.execute("PRAGMA journal_mode=WAL")
                create_tables(db)  # an index older than the jobs table gains it here
                cols = {r[1] for r in db.execute("PRAGMA table_info(runs)")}
                if not set(REQUIRED) <= cols:
                    missing = sorted(set(REQUIRED) - cols)
                    log.warning("index of %s lacks %s (older layout): rebuilding", root, missing)
                else:
                    for col, typ in OPTIONAL.items():
                        if col not in cols:  # an index written before the column existed
                            db.execute(f"ALTER TABLE runs ADD COLUMN {col} {typ}")
                    return
            finally:
                db.close()
        except sqlite3.DatabaseError as exc:
            if is_corruption(exc):
                raise StoreIndexError(damage_message(root, str(exc))) from exc
            raise
        rebuild_index(root, "older-layout", locked=True)
