"""Files the app hands in and out: uploaded corpora, zips of runs and saved models, and
deleting a run with everything a job left for it."""

from __future__ import annotations

import hashlib
import io
import shutil
import zipfile
from collections.abc import Mapping
from pathlib import Path

from core.errors import ConfigError
from core.jobs.records import config_path, log_path, model_dir
from core.store.jobs_table import delete_job, jobs_of_run
from core.store.run_store import RunStore


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


def delete_run(store: RunStore, run_id: str) -> None:
    """Delete a run with its jobs (their rows and files) and any model the app saved for
    it."""
    rec = store.get(run_id)
    store.delete(rec.id)
    for job_id in {rec.id, *(j.id for j in jobs_of_run(store, rec.id))}:
        delete_job(store, job_id)
        log_path(store, job_id).unlink(missing_ok=True)
        config_path(store, job_id).unlink(missing_ok=True)
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
