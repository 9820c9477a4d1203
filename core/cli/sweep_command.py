"""CLI of grid sweeps of any method (``python -m core sweep``) and their executors.

``sweep --method slicegpt`` alone (the default, with or without --seeds) keeps the SliceGPT
sweep with Paper A's relation (core.runs.relation_sweep); a method list, any grid axis, a METHOD.KEY
option or an executor flag runs the grid sweep of core.sweeps.orchestrate on the chosen executor and
prints the perplexity-vs-sparsity table. The grid comes from the sweep command's fields
through core.settings.request.sweep_spec, the path the app's sweep form takes too.

Examples::

    python -m core sweep --method magnitude,wanda,sparsegpt --sparsities 0.3,0.5,0.7
    python -m core sweep --method sparsegpt --patterns unstructured,2:4 --allocations uniform,owl
    python -m core sweep --method wanda --seeds 0,1,2 --executor local --workers 2
    python -m core sweep --method wanda,sparsegpt --executor gpus --gpus 0,1,2,3
    python -m core sweep --method wanda --executor ray --ray-address auto
"""

from __future__ import annotations

import argparse
from typing import Any

from core.errors import ConfigError
from core.settings import request as requests
from core.store.run_store import RunStore
from core.sweeps.executors import EXECUTORS, make_executor
from core.sweeps.orchestrate import run_sweep_grid, table_lines

EXECUTOR_DEFAULTS = {
    "executor": "local",
    "workers": 1,
    "gpus": None,
    "ray_address": "auto",
    "scratch": None,
}


def add_grid_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("executors (grid sweeps)")
    g.add_argument(
        "--executor",
        default="local",
        choices=EXECUTORS,
        help="local: this process, or --workers processes; gpus: one worker per GPU; "
        "ray: one task per configuration on a Ray cluster",
    )
    g.add_argument(
        "--workers",
        type=int,
        default=1,
        help="local: worker processes (default 1: this process); ray with "
        "--ray-address local: CPUs of the private cluster",
    )
    g.add_argument(
        "--gpus",
        default=None,
        help="gpus executor: comma list of GPU indices (default: every visible GPU)",
    )
    g.add_argument(
        "--ray-address",
        default="auto",
        help="ray executor: auto (this machine's cluster), HOST:PORT, ray://HOST:PORT, "
        "or local (start a private one)",
    )
    g.add_argument(
        "--scratch",
        default=None,
        metavar="DIR",
        help="where workers keep their own stores (default: the system temp dir)",
    )


def is_grid(args, values: dict[str, Any]) -> bool:
    """Whether ``sweep`` runs the grid of core.sweeps.orchestrate (else SliceGPT's relation sweep)."""
    executor = any(getattr(args, k) != v for k, v in EXECUTOR_DEFAULTS.items())
    return executor or requests.is_grid(values)


def _ints(text: str | None, flag: str) -> tuple[int, ...] | None:
    if text is None:
        return None
    try:
        return tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError as exc:
        raise ConfigError(f"{flag} expects integers separated by commas, got {text!r}") from exc


def cmd_grid(args, progress, values: dict[str, Any], store: RunStore) -> dict[str, Any]:
    """Validate everything (grid, executor) before any work; run; return the table.
    ``values``: the sweep command's field values, read by the one request path
    (core.settings.request.sweep_spec) the app's sweep form uses too."""
    if args.force:
        raise ConfigError(
            "--force is for single runs; a sweep reuses stored points (delete "
            "runs with `python -m core runs delete` to recompute them)"
        )
    spec = requests.sweep_spec(values)
    executor = make_executor(
        args.executor, args.workers, _ints(args.gpus, "--gpus"), args.ray_address, args.scratch
    )
    counts = {"done": 0, "total": 0}

    def on_event(event: dict[str, Any]) -> None:
        if event["state"] in ("queued", "cached"):
            counts["total"] += 1
        counts["done"] += event["state"] in ("cached", "done", "failed")
        progress("sweep", counts["done"], counts["total"], f"{event['run_id']} {event['state']}")

    return run_sweep_grid(spec, store, executor, on_event)


def grid_lines(out: dict[str, Any]) -> list[str]:
    head = (
        f"{len(out['run_ids'])} runs ({out['computed']} computed, {out['cached']} reused) "
        f"on executor {out['executor']} ({out['device']})"
    )
    return [head, *table_lines(out["table"])]
