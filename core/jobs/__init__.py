"""Background jobs for the app: plan a run, execute its resolved config in a subprocess
(``python -m core run --config FILE``: every job, grid sweeps and demo pieces too), poll the
results store, cancel, clean up.

    job = start_job(store, "prune", {"model": "tiny-llama", "method": "wanda", ...})
    status = job_status(store, job)      # state, stage, done/total, elapsed, ETA, error
    cancel(store, job)                   # SIGINT, then SIGTERM after GRACE_S
"""

from core.jobs.exports import delete_run, export_runs, save_corpus, zip_folder, zip_folders
from core.jobs.launch import GRACE_S, cancel, start_config_job, start_job
from core.jobs.records import config_path, job_path, log_path, model_dir, read_job
from core.jobs.status import (
    FINISHED,
    JobStatus,
    job_status,
    log_error,
    log_result,
    read_progress,
    stage_eta,
)

__all__ = [
    "FINISHED",
    "GRACE_S",
    "JobStatus",
    "cancel",
    "config_path",
    "delete_run",
    "export_runs",
    "job_path",
    "job_status",
    "log_error",
    "log_path",
    "log_result",
    "model_dir",
    "read_job",
    "read_progress",
    "save_corpus",
    "stage_eta",
    "start_config_job",
    "start_job",
    "zip_folder",
    "zip_folders",
]
