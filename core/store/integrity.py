"""Whether a stored run's folder is whole, and the one message when it is not.

A finished run's folder holds JSON (``config.json``, ``env.json``, ``metrics.json``), parquet
tables (``tables/<t>.parquet``) and safetensors arrays (``arrays/<a>.safetensors``). When the
run is committed its writer lists every one of them with its size in ``files.json`` (the
manifest), so a file that is later deleted or cut short is named as such, not mistaken for a
table the run never had. The checks, cheapest first, run whenever the store hands out a run
(``RunStore.load``) and when ``runs list`` or the Runs page mark damaged runs:

- the folder exists; ``config.json`` and ``metrics.json`` exist (every run writes them);
- every file the manifest lists exists and has the size it was written with;
- each file's format holds at its ends: JSON parses to an object; a parquet file starts and
  ends with its magic ``PAR1`` and its footer fits; a safetensors header parses and its
  tensors end exactly at the end of the file.

What these header-level checks cannot see (bytes changed inside a table's data pages) is met
when the file is read: ``core.store.record.Run`` turns the reader's error into the same
``DamagedRunError``. A run stored before manifests existed has no ``files.json``: its files
are checked as found (so are those of a run whose ``files.json`` alone was deleted: the one
loss that reads as no damage, as every file the run needs is still there and whole). Nothing
here writes to a run folder but ``write_manifest`` at commit.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from core.errors import DamagedRunError
from core.store.reindex import reindex_command

MANIFEST = "files.json"
REQUIRED = ("config.json", "metrics.json")  # written by every run (RunWriter, commit)
TABLES, ARRAYS = "tables/", "arrays/"  # where tables and arrays live in a run's folder
PARQUET_MAGIC = b"PAR1"


# ---- the manifest ------------------------------------------------------------------------------
def stored_files(folder: Path) -> dict[str, int]:
    """The files a run folder holds that the store reads: {relative path: size in bytes}."""
    found = [*folder.glob("*.json"), *folder.glob(f"{TABLES}*.parquet")]
    found += folder.glob(f"{ARRAYS}*.safetensors")
    return {p.relative_to(folder).as_posix(): p.stat().st_size for p in sorted(found)}


def write_manifest(folder: Path) -> None:
    """List the run's files with their sizes in ``files.json`` (at commit, before the folder
    is published)."""
    files = {k: v for k, v in stored_files(folder).items() if k != MANIFEST}
    (folder / MANIFEST).write_text(json.dumps(files, indent=2, sort_keys=True))


def manifest(folder: Path) -> tuple[dict[str, int] | None, str | None]:
    """(listed files, None), (None, None) for a run without a manifest, or (None, problem)."""
    path = folder / MANIFEST
    if not path.is_file():
        return None, None
    problem = json_problem(path)
    if problem is not None:
        return None, problem
    listed = json.loads(path.read_text())
    if not all(isinstance(v, int) for v in listed.values()):
        return None, "its sizes are not whole numbers"
    return listed, None


# ---- format checks -------------------------------------------------------------------------------
def json_problem(path: Path) -> str | None:
    """Why ``path`` is not a JSON object (None when it is)."""
    try:
        obj = json.loads(path.read_bytes().decode("utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        return f"not readable as JSON: {exc}"
    return None if isinstance(obj, dict) else f"holds a JSON {type(obj).__name__}, not an object"


def parquet_problem(path: Path) -> str | None:
    """Why ``path`` is not a whole parquet file at its ends (magic, footer length)."""
    size = path.stat().st_size
    if size < 12:
        return f"{size} bytes, shorter than an empty parquet file"
    with open(path, "rb") as fh:
        head = fh.read(4)
        fh.seek(size - 8)
        tail = fh.read(8)
    if head != PARQUET_MAGIC or tail[4:] != PARQUET_MAGIC:
        return "not a parquet file (its start or end lacks the PAR1 magic)"
    footer = int.from_bytes(tail[:4], "little")
    if footer > size - 12:
        return f"its footer claims {footer:,} bytes, more than the file holds"
    return None


def safetensors_problem(path: Path) -> str | None:
    """Why ``path`` is not a whole safetensors file: its 8-byte header length, its JSON
    header, and tensors that end exactly at the end of the file."""
    size = path.stat().st_size
    with open(path, "rb") as fh:
        n = int.from_bytes(fh.read(8), "little") if size >= 8 else -1
        if n < 2 or n > size - 8:
            return f"not a safetensors file (header length {n:,} in a {size:,}-byte file)"
        raw = fh.read(n)
    try:
        header = json.loads(raw.decode("utf-8"))
        ends = [int(t["data_offsets"][1]) for k, t in header.items() if k != "__metadata__"]
    except (UnicodeDecodeError, ValueError, KeyError, TypeError, IndexError, AttributeError):
        return "not a safetensors file (its header is not readable)"
    data = size - 8 - n
    if max(ends, default=0) != data:
        return f"its tensors need {max(ends, default=0):,} bytes of data, the file holds {data:,}"
    return None


CHECKS = {".json": json_problem, ".parquet": parquet_problem, ".safetensors": safetensors_problem}


# ---- a folder ------------------------------------------------------------------------------------
def folder_problem(folder: Path) -> tuple[str, str] | None:
    """(file relative to the folder, what is wrong) for the first damage found, else None."""
    if not folder.is_dir():
        return ".", "the run's folder is missing"
    listed, problem = manifest(folder)
    if problem is not None:
        return MANIFEST, problem
    present = stored_files(folder)
    expected = dict.fromkeys(REQUIRED) | (listed if listed is not None else present)
    for rel, size in expected.items():
        if rel not in present:
            return rel, "missing"
        if size is not None and present[rel] != size:
            return rel, f"{present[rel]:,} bytes, written as {size:,}"
    for rel in present:
        try:
            problem = CHECKS[Path(rel).suffix](folder / rel)
        except OSError as exc:  # unreadable (permissions), or gone since it was listed
            problem = f"cannot be read: {exc}"
        if problem is not None:
            return rel, problem
    return None


def files_stamp(runs: Path) -> tuple[tuple[str, int, int], ...]:
    """(path, size, mtime) of every file in the run folders under ``runs``: it changes
    whenever a file is written, cut or removed, so it keys a cache of ``folder_problem``
    over many runs (a stat per file, not a read)."""
    out = []
    for run in _entries(runs):
        for sub in ("", TABLES, ARRAYS):
            for e in _entries(Path(run.path, sub)):
                if e.is_file():
                    st = e.stat()
                    out.append((e.path, st.st_size, st.st_mtime_ns))
    return tuple(out)


def _entries(folder: Path) -> list[os.DirEntry]:
    try:
        with os.scandir(folder) as it:
            return list(it)
    except OSError:
        return []


def damaged_message(run_id: str, folder: Path, rel: str, problem: str) -> str:
    """One message for a damaged run: the run, the file, what is wrong and the way out."""
    root = folder.parent.parent
    store = f"--store {root}"
    where = folder if rel == "." else folder / rel
    problem = " ".join(problem.replace(str(where), "the file").split())  # a reader's, on one line
    return (
        f"run {run_id} is damaged: {where}: {problem.rstrip('.')}. Nothing was computed from it. "
        f"The way out: delete it (`python -m core runs delete {run_id} {store}`) and run it "
        "again, or rerun the command that made it with --force (a new folder replaces this "
        f"one); if its folder is gone, `{reindex_command(root)}` brings the index in line "
        "with the run folders."
    )


def check_folder(run_id: str, folder: Path) -> None:
    """Raise ``DamagedRunError`` when the run's folder is not whole (``folder_problem``)."""
    found = folder_problem(folder)
    if found is not None:
        raise DamagedRunError(damaged_message(run_id, folder, *found), run_id, found[0])
