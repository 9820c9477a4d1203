"""``python -m core runs ACTION``: list, show, delete, export, report or reindex stored runs.

A finished run whose folder is damaged (core.store.integrity) shows as 'damaged' in ``list``
and ``show``; the commands that read it (export, report) refuse it with the one message naming
the file and the way out. Output paths are checked first (core.settings.outputs).

``list`` also shows the background jobs at work (their state and progress, from the store's
jobs table alone: core.jobs.status): a run's row carries its job's, and a job whose run has
no row yet is a row of its own. Listing first reconciles (``reconcile_jobs``): a job that
reads 'lost' is stored so, and run rows its process left 'running' become 'interrupted'.
"""

from __future__ import annotations

import argparse
import dataclasses
import shutil
from pathlib import Path
from typing import Any

from core.errors import DamagedRunError, StoreError
from core.jobs.status import JobStatus, active_jobs, reconcile_jobs
from core.report import write_report
from core.settings.outputs import FOLDER, check_output
from core.store.reindex import rebuild_index
from core.store.run_store import RunStore, default_root

RUNS_ACTIONS = {
    "list": "table of stored runs",
    "show": "one run's config and metrics",
    "delete": "delete a run",
    "export": "copy a run's folder into DEST (an existing folder) as DEST/<run id>",
    "report": "write a run's self-contained HTML report (provenance, metrics, charts)",
    "reindex": "rebuild the store's index from its run folders (the old index is kept aside)",
}


def add_parser(sub: argparse._SubParsersAction) -> None:
    runs = sub.add_parser("runs", help="list, show, delete or export stored runs")
    rsub = runs.add_subparsers(dest="runs_command", required=True, metavar="ACTION")
    for name, helptext in RUNS_ACTIONS.items():
        rp = rsub.add_parser(name, help=helptext)
        if name not in ("list", "reindex"):
            rp.add_argument("run_id", help="run id (a unique prefix is enough)")
        if name == "export":
            rp.add_argument("dest", help="an existing folder; the copy is DEST/<run id>")
        if name == "report":
            rp.add_argument("out", help="the HTML file to write (its folder must exist)")
        if name in ("export", "report"):
            rp.add_argument("--force", action="store_true", help="replace an existing copy/file")
        if name == "list":
            rp.add_argument("--kind", default=None)
            rp.add_argument("--status", default=None)
        rp.add_argument("--store", default=None)
        rp.add_argument("--json", action="store_true")
        rp.add_argument("-v", "--verbose", action="store_true")


def cmd_reindex(root: str | None) -> dict[str, Any]:
    """``runs reindex``: rebuild the index from the run folders (core.store.reindex)."""
    root_path = Path(root).expanduser() if root is not None else default_root()
    if not (root_path / "runs").is_dir():
        raise StoreError(f"{root_path} holds no results store (no runs/ folder)")
    done = rebuild_index(root_path)
    RunStore(root_path)  # the rebuilt index opens (and reconciles) as any other
    return {"store": str(root_path), **dataclasses.asdict(done)}


def job_fields(status: JobStatus | None) -> dict[str, Any]:
    """A job's state and progress as ``runs list`` shows them beside its run."""
    if status is None:
        return {"job": None}
    return {
        "job": status.job_id,
        "job_state": status.state,
        "phase": status.phase,
        "stage": status.stage,
        "done": status.done,
        "total": status.total,
        "progress": status.fraction,
        "elapsed": status.elapsed,
    }


def runs_list(store: RunStore, kind: str | None, status: str | None) -> list[dict[str, Any]]:
    """``runs list``: one row per run, then one per active job whose run has no row yet; a
    run's row carries its active job's state and progress; a finished run whose folder is
    damaged shows as 'damaged', its error the message naming the file and the way out."""
    reconcile_jobs(store)
    by_run = {j.run_id or j.job_id: j for j in reversed(active_jobs(store))}  # newest wins
    rows = []
    for r in store.list(kind, status):
        damage = store.damage(r)
        rows.append(
            {
                "id": r.id,
                "kind": r.kind,
                "status": "damaged" if damage else r.status,
                "model": r.model,
                "method": r.method,
                "sparsity": r.sparsity,
                "pattern": r.pattern,
                "dataset": r.dataset,
                "ppl": r.summary.get("ppl"),
                "created": r.created,
                "error": damage or r.error,
                **job_fields(by_run.pop(r.id, None)),
            }
        )
    for run_id, job in by_run.items():  # started, its run not begun yet
        if (kind is None or job.kind == kind) and (status is None or job.state == status):
            rows.append({"id": run_id, "kind": job.kind, "status": job.state, **job_fields(job)})
    return rows


def runs_show(store: RunStore, run_id: str) -> dict[str, Any]:
    """``runs show``: what the index holds, and the folder's environment and tables; a
    damaged folder shows as status 'damaged' with its message (the rest from the index)."""
    rec = store.get(run_id)
    out = {
        "run_id": rec.id,
        "kind": rec.kind,
        "status": rec.status,
        "config": rec.config,
        "metrics": rec.summary,
        "error": rec.error,
    }
    if rec.status == "done":
        try:
            run = store.load(rec.id)
            out.update(env=run.env, tables=run.tables())
        except DamagedRunError as exc:
            out.update(status="damaged", error=str(exc))
    return out


def runs_export(store: RunStore, run_id: str, dest: str, force: bool) -> dict[str, Any]:
    """``runs export``: the run's folder copied to DEST/<run id>, checked whole first."""
    rec = store.get(run_id)
    target = check_output(Path(dest) / rec.id, f"run {rec.id}'s copy", FOLDER, force)
    run = store.load(rec.id)
    if target.exists():
        shutil.rmtree(target)
    return {"exported": rec.id, "to": str(shutil.copytree(run.dir, target))}


def cmd_runs(args: argparse.Namespace) -> dict[str, Any] | list[dict[str, Any]]:
    if args.runs_command == "reindex":
        return cmd_reindex(args.store)
    if args.runs_command == "report":  # the output checked before the store is opened
        out = check_output(args.out, "the report", force=args.force)
    store = RunStore(args.store)
    if args.runs_command == "list":
        return runs_list(store, args.kind, args.status)
    if args.runs_command == "show":
        return runs_show(store, args.run_id)
    if args.runs_command == "export":
        return runs_export(store, args.run_id, args.dest, args.force)
    rec = store.get(args.run_id)
    if args.runs_command == "report":
        return {"report": str(write_report(store, rec.id, out)), "run_id": rec.id}
    store.delete(rec.id)
    return {"deleted": rec.id}
