"""The ``sweep`` command's two meanings, chosen here once, and the grid sweep's executors.

``sweep`` runs one of two things (core.names): the relation sweep (SliceGPT over a grid of s
with Paper A's relation, core.runs.relation_sweep) or the grid sweep (any method over methods
× sparsities × patterns × allocations × seeds on an executor, core.sweeps). ``sweep_kind`` is
the one rule, kept as it always was for users:

- ``--grid`` asks for the grid sweep;
- else the relation sweep when ``--method`` is slicegpt alone (the default, with or without
  --seeds) and nothing only a grid has is given (another pattern, allocation or target set,
  a METHOD.KEY option, an executor flag, --recover-steps);
- else the grid sweep.

Below this edge nothing guesses: the relation sweep is planned by
``plan_request(RELATION_SWEEP, ...)``, the grid by ``core.requests.request.grid_spec``.

Examples::

    python -m core sweep --method magnitude,wanda,sparsegpt --sparsities 0.3,0.5,0.7
    python -m core sweep --method sparsegpt --patterns unstructured,2:4 --allocations uniform,owl
    python -m core sweep --method wanda --seeds 0,1,2 --executor local --workers 2
    python -m core sweep --method wanda,sparsegpt --executor gpus --gpus 0,1,2,3
    python -m core sweep --method wanda --executor ray     # RAY_ADDRESS, a local head, or private
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from core.errors import ConfigError
from core.names import GRID_SWEEP, RECOVER, RELATION_SWEEP
from core.progress import ProgressFn
from core.requests import request as requests
from core.runs import execute
from core.settings.field import method_list
from core.store.run_store import RunStore
from core.sweeps.executors import EXECUTORS, make_executor
from core.sweeps.orchestrate import DENSE, run_sweep_grid, table_lines
from core.sweeps.recovery import recovered_lines, recovered_table

EXECUTOR_DEFAULTS = {
    "executor": "local",
    "workers": 1,
    "gpus": None,
    "ray_address": None,
    "scratch": None,
}
# Values of the sweep command's fields that only a grid sweep has a use for: their defaults.
GRID_ONLY = {"patterns": "unstructured", "allocations": "uniform", "targets": "all", "budgets": ""}


def add_grid_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("grid sweeps and their executors")
    g.add_argument(
        "--grid",
        action="store_true",
        help="run the grid sweep of any method (also for slicegpt alone, which otherwise "
        "runs the relation sweep)",
    )
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
        help="local: worker processes (default 1: this process); ray on a private cluster: "
        "tasks sharing this machine's cores",
    )
    g.add_argument(
        "--gpus",
        default=None,
        help="gpus executor: comma list of GPU indices (default: every visible GPU)",
    )
    g.add_argument(
        "--ray-address",
        default=None,
        help="ray executor: HOST:PORT or ray://HOST:PORT of a cluster, auto (the one running "
        "on this machine), or local (a private one). Default, as ray.init(): $RAY_ADDRESS, "
        "else the cluster `ray start` runs on this machine, else a private local one",
    )
    g.add_argument(
        "--recover-steps",
        type=int,
        default=None,
        metavar="N",
        help="then recover every pruned point by N steps of LoRA fine-tuning (core.runs.recover) "
        "and print perplexity before and after",
    )
    g.add_argument(
        "--scratch",
        default=None,
        metavar="DIR",
        help="where workers keep their own stores (default: the system temp dir)",
    )


def sweep_kind(args: argparse.Namespace, values: dict[str, Any]) -> str:
    """RELATION_SWEEP or GRID_SWEEP for a parsed ``sweep`` line (the rule in the module's
    docstring)."""
    if args.grid:
        return GRID_SWEEP
    v = requests.values_of(RELATION_SWEEP, values)
    executor = any(getattr(args, k) != d for k, d in EXECUTOR_DEFAULTS.items())
    executor = executor or args.recover_steps is not None  # recovering points is a grid's
    grid_axes = any(str(v[k]).replace(" ", "") != d for k, d in GRID_ONLY.items())
    own = requests.split_options(v["option"])[1]
    alone = method_list(v["method"]) == ["slicegpt"]
    return RELATION_SWEEP if alone and not (executor or grid_axes or own) else GRID_SWEEP


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
    (core.requests.request.grid_spec) the app's sweep form uses too."""
    if args.force:
        raise ConfigError(
            "--force is for single runs; a sweep reuses stored points (delete "
            "runs with `python -m core runs delete` to recompute them)"
        )
    spec = requests.grid_spec(values)
    executor = make_executor(
        args.executor, args.workers, _ints(args.gpus, "--gpus"), args.ray_address, args.scratch
    )
    executor.check()
    if args.recover_steps is not None and args.recover_steps < 1:
        raise ConfigError(f"--recover-steps must be >= 1, got {args.recover_steps}")
    print(f"executor {executor.name}: {executor.where}", file=sys.stderr)
    out = run_sweep_grid(spec, store, executor, grid_progress(progress))
    if args.recover_steps is not None:
        recover_points(store, out["table"], args.recover_steps, progress)
        out["recovered"] = recovered_table(store, out["table"], args.recover_steps)
    return out


def recover_points(
    store: RunStore, rows: list[dict[str, Any]], steps: int, progress: ProgressFn | None = None
) -> list[str]:
    """Recover every pruned point of a sweep table for ``steps`` steps, one after another in
    this process (every recovery is planned first: a bad point fails before any training);
    returns the recover runs' ids."""
    ids = [i for r in rows if r["method"] != DENSE for i in str(r["run_ids"]).split(",") if i]
    configs = [requests.plan_request(RECOVER, {"run": i, "steps": steps}, store) for i in ids]
    return [execute(cfg, store, progress)["run_id"] for cfg in configs]


def grid_progress(progress) -> Any:
    """An on_event callback of a grid sweep that advances the CLI's progress bar."""
    counts = {"done": 0, "total": 0}

    def on_event(event: dict[str, Any]) -> None:
        if event["state"] in ("queued", "cached"):
            counts["total"] += 1
        counts["done"] += event["state"] in ("cached", "done", "failed")
        progress("sweep", counts["done"], counts["total"], f"{event['run_id']} {event['state']}")

    return on_event


def grid_lines(out: dict[str, Any]) -> list[str]:
    head = (
        f"{len(out['run_ids'])} runs ({out['computed']} computed, {out['cached']} reused) "
        f"on executor {out['executor']} ({out['device']}): {out.get('where', '')}"
    )
    return [head, *table_lines(out["table"]), *recovered_lines(out.get("recovered", []))]
