"""One dispatcher from a resolved ``RunConfig`` to its run kind's executor (``KINDS``).

Background jobs write the resolved config as JSON and run ``python -m core run --config
FILE``, which lands here: the same code path as every CLI command and the Python API.
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
from core.runs.plan import plan_zeroshot, resolved
from core.runs.prune import execute_prune
from core.runs.recover import execute_recover
from core.runs.relation_sweep import execute_relation_sweep
from core.runs.sensitivity import execute_sensitivity
from core.runs.slice import execute_slice
from core.runs.structured import execute_structured
from core.runs.zeroshot import execute_zeroshot
from core.settings.config import RunConfig, zeroshot_from
from core.store.run_store import RunStore


def _eval(cfg: RunConfig, store: RunStore, progress, opts: RunOptions) -> dict[str, Any]:
    return execute_eval(cfg, store, progress, opts.force)


def _relation_sweep(cfg: RunConfig, store: RunStore, progress, opts: RunOptions) -> dict[str, Any]:
    return execute_relation_sweep(cfg, store, progress, opts.force)


def _zeroshot(cfg: RunConfig, store: RunStore, progress, opts: RunOptions) -> dict[str, Any]:
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
    cfg: RunConfig,
    store: RunStore,
    on_progress: ProgressFn | None = None,
    opts: RunOptions | None = None,
) -> dict[str, Any]:
    """Run a resolved config with its kind's executor, after checking it at the edge."""
    if cfg.kind not in KINDS:
        raise ConfigError(f"unknown run kind {cfg.kind!r}; one of {', '.join(KINDS)}")
    if cfg.kind not in (ZEROSHOT, RECOVER):  # checked against their source/parent run
        resolved(cfg)  # checked here unless this process planned it
    return KINDS[cfg.kind](cfg, store, on_progress, opts or RunOptions())
