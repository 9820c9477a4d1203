"""Background jobs for the app: plan a run, execute its resolved config in a subprocess
(``python -m core run --config FILE --job ID``: every job, grid sweeps and demo pieces too),
read each job's state from its row of the store's jobs table, cancel, clean up.

    job = start_job(store, "prune", {"model": "tiny-llama", "method": "wanda", ...})
    status = job_status(store, job)      # state, stage, done/total, elapsed, ETA, error
    cancel(store, job)                   # SIGTERM, then SIGKILL after GRACE_S
"""

from core.jobs.exports import delete_run, export_runs, save_corpus, zip_folder, zip_folders
from core.jobs.launch import GRACE_S, cancel, is_active, start_config_job, start_job
from core.jobs.records import config_path, log_path, model_dir
from core.jobs.status import (
    FINISHED,
    JobStatus,
    active_jobs,
    job_status,
    jobs_frame,
    reconcile_jobs,
    row_eta,
    status_of,
)

__all__ = [
    "FINISHED",
    "GRACE_S",
    "JobStatus",
    "active_jobs",
    "cancel",
    "config_path",
    "delete_run",
    "export_runs",
    "is_active",
    "job_status",
    "jobs_frame",
    "log_path",
    "model_dir",
    "reconcile_jobs",
    "row_eta",
    "save_corpus",
    "start_config_job",
    "start_job",
    "status_of",
    "zip_folder",
    "zip_folders",
]
