"""One dispatcher from a run's ``Plan`` to its run kind's executor (``KINDS``).

Background jobs write the plan's config as JSON and run ``python -m core run --config
FILE``, which lands here: the same code path as every CLI command and the Python API. A
caller that holds a config alone (that file, a sweep's worker) hands it over as it is and
it is planned here, once; every executor takes the Plan as its argument.
"""

from __future__ import annotations

from typing import Any

from core.errors import ConfigError
from core.names import (
    EVAL,
    PRUNE,
    RECOVER,
    RELATION_SWEEP,
    SENSITIVITY,
    SLICE,
    STRUCTURED,
    ZEROSHOT,
)
from core.progress import ProgressFn
from core.runs.common import KindRunner, RunOptions
from core.runs.dense import execute_eval
from core.runs.plan import plan_config, plan_zeroshot
from core.runs.planned import Plan
from core.runs.prune import execute_prune
from core.runs.recover import execute_recover
from core.runs.relation_sweep import execute_relation_sweep
from core.runs.sensitivity import execute_sensitivity
from core.runs.slice import execute_slice
from core.runs.structured import execute_structured
from core.runs.zeroshot import execute_zeroshot
from core.settings.config import RunConfig, zeroshot_from
from core.store.run_store import RunStore


def _eval(plan: Plan, store: RunStore, progress, opts: RunOptions) -> dict[str, Any]:
    return execute_eval(plan.cfg, store, progress, opts.force)


def _relation_sweep(plan: Plan, store: RunStore, progress, opts: RunOptions) -> dict[str, Any]:
    return execute_relation_sweep(plan, store, progress, opts.force)


def _zeroshot(plan: Plan, store: RunStore, progress, opts: RunOptions) -> dict[str, Any]:
    cfg = plan.cfg  # checked against its source run here
    source = cfg.extra_value("source_run")
    zs = zeroshot_from(cfg.extra_value("zeroshot"))
    planned, src = plan_zeroshot(None if source else cfg.model, zs, store, source)
    return execute_zeroshot(planned, src, store, progress, opts.force)


KINDS: dict[str, KindRunner] = {
    EVAL: _eval,
    PRUNE: execute_prune,
    SLICE: execute_slice,
    STRUCTURED: execute_structured,
    RELATION_SWEEP: _relation_sweep,
    ZEROSHOT: _zeroshot,
    RECOVER: execute_recover,
    SENSITIVITY: execute_sensitivity,
}


def execute(
    run: Plan | RunConfig,
    store: RunStore,
    on_progress: ProgressFn | None = None,
    opts: RunOptions | None = None,
) -> dict[str, Any]:
    """Run a plan with its kind's executor; a config held alone is planned first
    (``core.runs.plan.plan_config``: checked at the edge, before anything loads)."""
    kind = run.cfg.kind if isinstance(run, Plan) else run.kind
    if kind not in KINDS:
        raise ConfigError(f"unknown run kind {kind!r}; one of {', '.join(KINDS)}")
    plan = run if isinstance(run, Plan) else plan_config(run)
    return KINDS[kind](plan, store, on_progress, opts or RunOptions())
