"""How long a planned run will take, told before it starts (forms, demo sets, sweeps).

A run's work is counted in floating-point operations from the model's shapes (config.json
only, ``core.models.geometry``) and the run's token counts, phase by phase:

- evaluation: windows × seqlen tokens through the whole model (2 FLOPs per weight per
  token, plus causal attention 2·L·heads·head_dim per layer), for the dense baseline when
  the store lacks it and again for the changed model, plus the effective dimension (its
  windows read twice and a d×d eigendecomposition per layer and reading) and, for prune
  and slice runs, the latency forwards (batch 1) before and after the change (a lean run,
  core.settings.config.MEASURES, has neither for the changed model);
- calibration: nsamples × calib_seqlen tokens, twice through every decoder layer (the
  layer-wise runner collects statistics, then re-runs the pruned layer for the next one);
- the method's own work, as each method declares it (``Method.layer_work``; one without
  cost terms is refused), per targeted linear (out × in): magnitude / Wanda score and sort
  (~10·out·in) plus the error Gram on ≤ 2048 sampled rows; SparseGPT the full Gram
  2·tokens·in², the inverse Cholesky ~in³ and the OBS updates 2·out·in² (SparseGPT, Alg. 1);
  SliceGPT two PCA covariances 2·tokens·d² and eigendecompositions ~9·d³ per layer and the
  rotations 2·out·in·d; attention-GD (steps + 2·power_iters + checks) forward-backward
  passes of the attention scores of max_seq × max_len tokens per layer;
- zero-shot: items × choices × tokens per choice per task, for the dense and changed model;
- start-up: a fixed cost per device plus reading the weights.

- the method's work that does not shrink with calibration tokens (core.planning.cost.loop_flops):
  choosing each edited weight, and SparseGPT's Python loop over each edited input column;
- start-up: a fixed cost per device plus reading the weights; a sweep is one process.

Calibration to the device (core.planning.speed, where the rule and its reasons are written): the
effective FLOP/s is the median over the store's finished runs of that model (else of any
model) on the same device type of the run's work outside its pruning phase over the wall
time it took; each method's factor is the median of its runs' prune_seconds over the phase's
predicted seconds, bounded to [1/2, 2]. Without stored runs, the defaults hold: any CUDA GPU
at 20 TFLOP/s and Apple MPS at 1 TFLOP/s (well below their bf16 peaks), and a CPU at the rate
measured here by a small matmul benchmark (``cpu_flops``, its fastest repeat) times the
efficiency a real forward reached against it.

Why the rule is what it is, and what earlier rules got wrong: docs/design-notes.md.
"""

from __future__ import annotations

from collections.abc import Iterable

from core.errors import PruneScopeError
from core.names import EVAL, PRUNED_KINDS, RELATION_SWEEP, ZEROSHOT
from core.planning.cost import (
    Shape,
    changed_model_flops,
    dense_flops,
    device_type,
    model_shape,
    prune_phase_flops,
    zeroshot_flops,
)
from core.planning.speed import Speed, load_seconds, measured_speed
from core.runs.plan import relation_sweep_points
from core.settings.config import EvalConfig, RunConfig
from core.store.run_store import RunStore

# Start-up: Python, torch, transformers and core (`python -m core --help`: 4.5 s on the 2-core
# machine at load ~1.7), then reading the weights.
START_SECONDS = {"cpu": 6.0, "mps": 10.0, "cuda": 10.0}


# ---- estimates -----------------------------------------------------------------------------------
def _start_seconds(shape: Shape, device: str) -> float:
    return START_SECONDS.get(device, 12.0) + load_seconds(shape)


def _stored(store: RunStore | None, cfg: RunConfig) -> bool:
    if store is None:
        return False
    try:
        return store.get(cfg.run_id).status == "done"
    except PruneScopeError:
        return False


def _changed_seconds(cfg: RunConfig, shape: Shape, speed: Speed) -> float:
    """One prune/slice run without its dense baselines: start, prune, measure."""
    work = changed_model_flops(cfg, shape)
    work += prune_phase_flops(cfg, shape) * speed.factor(cfg.prune.method)
    return _start_seconds(shape, speed.device) + work / speed.flops_per_s


def _baseline_seconds(cfg: RunConfig, shape: Shape, speed: Speed, store: RunStore | None) -> float:
    """The dense runs a prune/slice run compares with, unless stored (as
    core.sweeps.grid.baselines builds them)."""
    seconds = 0.0
    if not _stored(store, RunConfig(EVAL, cfg.model, cfg.eval)):
        seconds += dense_flops(cfg, shape) / speed.flops_per_s
    zs = cfg.extra_value("zeroshot")
    if zs is not None:
        extra = (("source_run", None), ("zeroshot", zs))
        if not _stored(store, RunConfig(ZEROSHOT, cfg.model, EvalConfig(), extra=extra)):
            seconds += zeroshot_flops(zs, shape) / speed.flops_per_s
    return seconds


def estimate_seconds(
    cfg: RunConfig, store: RunStore | None = None, speed: Speed | None = None
) -> float:
    """Seconds a planned run takes on its device: 0 when the store already holds it, the
    dense baselines it needs counted unless stored. Kinds: eval, prune (every method), slice,
    sweep (SliceGPT's relation sweep: one baseline, a slice run per point and seed),
    zeroshot; any other kind (effdim: a report over stored runs) costs its start-up."""
    if _stored(store, cfg):
        return 0.0
    shape, device = model_shape(cfg.model), device_type(cfg.model)
    speed = speed or measured_speed(store, device, cfg.model.name)
    start = _start_seconds(shape, device)
    if cfg.kind == EVAL:
        return start + dense_flops(cfg, shape) / speed.flops_per_s
    if cfg.kind == ZEROSHOT:
        return start + zeroshot_flops(cfg.extra_value("zeroshot"), shape) / speed.flops_per_s
    if cfg.kind in PRUNED_KINDS:
        return _changed_seconds(cfg, shape, speed) + _baseline_seconds(cfg, shape, speed, store)
    if cfg.kind == RELATION_SWEEP:
        return _sweep_seconds(cfg, shape, speed, store) + _baseline_seconds(
            cfg, shape, speed, store
        )
    return start


def _sweep_seconds(cfg: RunConfig, shape: Shape, speed: Speed, store: RunStore | None) -> float:
    """SliceGPT's relation sweep without its dense baseline: the points the store lacks, in
    one process (the start-up once, then each point re-reads the weights)."""
    todo = [
        c for _, configs in relation_sweep_points(cfg) for c in configs if not _stored(store, c)
    ]
    if not todo:
        return _start_seconds(shape, speed.device)
    changed = sum(_changed_seconds(c, shape, speed) for c in todo)
    return changed - (len(todo) - 1) * START_SECONDS.get(speed.device, 12.0)


def estimate_many(
    configs: Iterable[RunConfig], store: RunStore | None = None, speed: Speed | None = None
) -> float:
    """Seconds for runs executed one after another: a grid sweep's configs
    (core.sweeps.grid.resolve_grid) or the demo set's, whose dense baselines are configs of
    their own, so a prune/slice/sweep config here counts without them. Stored runs are free."""
    speeds: dict[str, Speed] = {}
    total = 0.0
    for cfg in configs:
        if _stored(store, cfg):
            continue
        device = device_type(cfg.model)
        key = f"{device}:{cfg.model.name}"
        if speed is None and key not in speeds:
            speeds[key] = measured_speed(store, device, cfg.model.name)
        sp = speed or speeds[key]
        if cfg.kind in PRUNED_KINDS:
            total += _changed_seconds(cfg, model_shape(cfg.model), sp)
        elif cfg.kind == RELATION_SWEEP:
            total += _sweep_seconds(cfg, model_shape(cfg.model), sp, store)
        else:
            total += estimate_seconds(cfg, store, sp)
    return total
