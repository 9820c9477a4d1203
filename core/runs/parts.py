"""The parts API: ``run_eval``, ``run_prune``, ``run_slice``, ``run_relation_sweep`` take a run's
parts (model, method, calibration and evaluation settings), plan the run once (``plan``) and
execute the plan with its kind's executor (``execute.KINDS``): the path of the CLI and the app.
"""

from __future__ import annotations

from typing import Any

from core.names import EVAL, RELATION_SWEEP, SLICE
from core.progress import ProgressFn
from core.runs.common import RunOptions
from core.runs.execute import KINDS
from core.runs.plan import plan_eval, plan_prune, plan_relation_sweep, require_kind
from core.settings.config import CalibConfig, EvalConfig, ModelSpec, PruneConfig, ZeroShotConfig
from core.store.run_store import RunStore


def run_eval(
    model: ModelSpec, eval_cfg: EvalConfig, store: RunStore, on_progress: ProgressFn | None = None
) -> dict[str, Any]:
    """Dense perplexity of a model; reuses a finished run with the same config."""
    return KINDS[EVAL](plan_eval(model, eval_cfg), store, on_progress, RunOptions())


def run_prune(
    model: ModelSpec,
    prune: PruneConfig,
    calib: CalibConfig,
    eval_cfg: EvalConfig,
    store: RunStore,
    zeroshot: ZeroShotConfig | None = None,
    *,
    on_progress: ProgressFn | None = None,
    opts: RunOptions | None = None,
    kind: str | None = None,
) -> dict[str, Any]:
    """Prune a model with a registered method, evaluate it against the dense model (perplexity,
    and zero-shot accuracy when ``zeroshot`` is given), store it. The method decides the run
    kind: 'prune' for layer-wise methods, 'slice' for SliceGPT; ``kind``: the one the caller
    insists on (ConfigError for a method of another kind)."""
    plan = require_kind(plan_prune(model, prune, calib, eval_cfg, zeroshot), kind)
    return KINDS[plan.cfg.kind](plan, store, on_progress, opts or RunOptions())


def run_slice(*parts: Any, **kwargs: Any) -> dict[str, Any]:
    """``run_prune`` (the same arguments) for a method that slices: a 'slice' run, or
    ConfigError for a method that does not."""
    return run_prune(*parts, kind=SLICE, **kwargs)


def run_relation_sweep(
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
    plan = plan_relation_sweep(model, sparsities, calib, eval_cfg, options, zeroshot, seeds)
    return KINDS[RELATION_SWEEP](plan, store, on_progress, opts or RunOptions())
