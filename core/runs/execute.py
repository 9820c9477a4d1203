"""One dispatcher from a resolved ``RunConfig`` to its run kind, and the parts-based API
(``run_eval``, ``run_prune``, ``run_slice``, ``run_sweep``) that plans a config and executes it.

Background jobs write the resolved config as JSON and run ``python -m core run --config
FILE``, which lands here: the same code path as every CLI command and the Python API.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from core.config import (
    CalibConfig,
    EvalConfig,
    ModelSpec,
    PruneConfig,
    RunConfig,
    ZeroShotConfig,
    zeroshot_from,
)
from core.errors import ConfigError
from core.names import EVAL, PRUNE, SLICE, SWEEP, ZEROSHOT
from core.progress import ProgressFn
from core.runs.common import Executor, RunOptions
from core.runs.dense import execute_eval
from core.runs.plan import (
    check_run,
    plan_eval,
    plan_prune,
    plan_slice,
    plan_sweep,
    plan_zeroshot,
)
from core.runs.prune import execute_prune
from core.runs.slice import execute_slice
from core.runs.sweep import execute_sweep
from core.runs.zeroshot import execute_zeroshot
from core.store import RunStore


def _eval(cfg: RunConfig, store: RunStore, progress, opts: RunOptions) -> dict[str, Any]:
    return execute_eval(cfg, store, progress, opts.force)


def _sweep(cfg: RunConfig, store: RunStore, progress, opts: RunOptions) -> dict[str, Any]:
    return execute_sweep(cfg, store, progress, opts.force)


def _zeroshot(cfg: RunConfig, store: RunStore, progress, opts: RunOptions) -> dict[str, Any]:
    source = cfg.extra_value("source_run")
    zs = zeroshot_from(cfg.extra_value("zeroshot"))
    planned, src = plan_zeroshot(None if source else cfg.model, zs, store, source)
    return execute_zeroshot(planned, src, store, progress, opts.force)


KINDS: dict[str, Executor] = {
    EVAL: _eval,
    PRUNE: execute_prune,
    SLICE: execute_slice,
    SWEEP: _sweep,
    ZEROSHOT: _zeroshot,
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
    if cfg.kind != ZEROSHOT:  # a zeroshot config is checked against its source run
        check_run(cfg)
    return KINDS[cfg.kind](cfg, store, on_progress, opts or RunOptions())


# ---- the parts API: plan, then execute with the kind's executor --------------------------------
def run_eval(
    model: ModelSpec, eval_cfg: EvalConfig, store: RunStore, on_progress: ProgressFn | None = None
) -> dict[str, Any]:
    """Dense perplexity of a model; reuses a finished run with the same config."""
    return _eval(plan_eval(model, eval_cfg), store, on_progress, RunOptions())


def run_prune(
    model: ModelSpec,
    prune: PruneConfig,
    calib: CalibConfig,
    eval_cfg: EvalConfig,
    store: RunStore,
    zeroshot: ZeroShotConfig | None = None,
    on_progress: ProgressFn | None = None,
    opts: RunOptions | None = None,
    plan: Callable[..., RunConfig] = plan_prune,
) -> dict[str, Any]:
    """Prune a model with a registered method, evaluate it against the dense model (perplexity,
    and zero-shot accuracy when ``zeroshot`` is given), store it. The method decides the run
    kind: 'prune' for layer-wise methods, 'slice' for SliceGPT. ``plan``: how the parts
    become a config (``plan_slice`` insists on a slicing method)."""
    cfg = plan(model, prune, calib, eval_cfg, zeroshot)
    return KINDS[cfg.kind](cfg, store, on_progress, opts or RunOptions())


def run_slice(*parts: Any, **kwargs: Any) -> dict[str, Any]:
    """``run_prune`` (the same arguments) for a method that slices: a 'slice' run, or
    ConfigError for a method that does not."""
    return run_prune(*parts, plan=plan_slice, **kwargs)


def run_sweep(
    model: ModelSpec,
    sparsities: tuple[float, ...],
    calib: CalibConfig,
    eval_cfg: EvalConfig,
    store: RunStore,
    options: tuple = (),
    zeroshot: ZeroShotConfig | None = None,
    seeds: tuple[int, ...] = (),
    on_progress: ProgressFn | None = None,
    opts: RunOptions | None = None,
) -> dict[str, Any]:
    """SliceGPT at every s of the grid and calibration seed (each a stored 'slice' run) and
    Paper A's relations with intervals: (A1) for perplexity always, (A2) for accuracy per
    task and averaged when ``zeroshot``."""
    cfg = plan_sweep(model, sparsities, calib, eval_cfg, options, zeroshot, seeds)
    return _sweep(cfg, store, on_progress, opts or RunOptions())
