"""How long a planned run will take, told before it starts (forms, demo sets, sweeps).

A run's work is counted in floating-point operations from the model's shapes (config.json
only, ``core.geometry``) and the run's token counts, phase by phase:

- evaluation: windows × seqlen tokens through the whole model (2 FLOPs per weight per
  token, plus causal attention 2·L·heads·head_dim per layer), for the dense baseline when
  the store lacks it and again for the changed model, plus the effective dimension (its
  windows read twice and a d×d eigendecomposition per layer and reading) and, for prune
  and slice runs, the latency forwards (batch 1) before and after the change (a lean run,
  core.config.MEASURES, has neither for the changed model);
- calibration: nsamples × calib_seqlen tokens, twice through every decoder layer (the
  layer-wise runner collects statistics, then re-runs the pruned layer for the next one);
- the method's own work per targeted linear (out × in): magnitude / Wanda score and sort
  (~10·out·in) plus the error Gram on ≤ 2048 sampled rows; SparseGPT the full Gram
  2·tokens·in², the inverse Cholesky ~in³ and the OBS updates 2·out·in² (SparseGPT, Alg. 1);
  SliceGPT two PCA covariances 2·tokens·d² and eigendecompositions ~9·d³ per layer and the
  rotations 2·out·in·d; attention-GD (steps + 2·power_iters + checks) forward-backward
  passes of the attention scores of max_seq × max_len tokens per layer;
- zero-shot: items × choices × tokens per choice per task, for the dense and changed model;
- start-up: a fixed cost per device plus reading the weights.

Calibration to the device (``measured_speed``): the effective FLOP/s is the median over the
store's finished runs on the same device type of eval_tokens_per_s × FLOPs per token of that
run's model; each method's overhead factor is the median of its runs' measured
prune_seconds over the predicted method+calibration seconds. Without stored runs, the
defaults below hold: any CUDA GPU at 20 TFLOP/s and Apple MPS at 1 TFLOP/s (well below
their bf16 peaks), overheads for the small, serial linear algebra of SparseGPT and SliceGPT,
and a CPU at the rate measured here by a small matmul benchmark (``cpu_flops``) times the
efficiency a real forward reached against it. The former fixed 12 GFLOP/s, and a cost model
that left out the effective dimension's two passes and eigendecompositions and the latency
forwards, made the demo set's estimate ~50 min on an empty store while its slowest share
(the effective dimension) was not counted where it was spent.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import lru_cache

import torch

from core.config import EvalConfig, RunConfig
from core.cost import (
    Shape,
    changed_model_flops,
    dense_flops,
    device_type,
    model_shape,
    prune_phase_flops,
    zeroshot_flops,
)
from core.errors import PruneScopeError
from core.names import EVAL, PRUNE, SLICE, SWEEP, ZEROSHOT
from core.runs.plan import sweep_points
from core.store import RunStore

DEFAULT_FLOPS = {"mps": 1e12, "cuda": 2e13}  # effective FLOP/s, conservative; CPU: measured
# A CPU's effective rate: a float32 matmul of the embedded model's MLP shape for one batch of
# evaluation windows, (512, 576) @ (576, 1536), timed here, times the rate a whole batched
# forward of smollm2-135m reached against it on the 2-core machine (0.43-0.60 in three
# interleaved measurements under load; the middle taken).
CPU_BENCH = (512, 576, 1536)
CPU_EFFICIENCY = 0.5
# Start-up: Python, torch, transformers and core (`python -m core --help`: 4.5 s on the 2-core
# machine at load ~1.7), then reading the float32 weights (smollm2-135m's 538 MB: 3.7 s).
START_SECONDS = {"cpu": 6.0, "mps": 10.0, "cuda": 10.0}
LOAD_BYTES_PER_S = 1.5e8
METHOD_OVERHEAD = {"sparsegpt": 1.5, "slicegpt": 2.0}  # others 1.0


# ---- the device's speed ----------------------------------------------------------------------------
@dataclass(frozen=True)
class Speed:
    """Effective FLOP/s of a device type and per-method overhead factors."""

    device: str
    flops_per_s: float
    overhead: dict[str, float] = field(default_factory=dict)
    n_runs: int = 0  # stored runs it was measured from (0: the defaults)

    def factor(self, method: str) -> float:
        return self.overhead.get(method, METHOD_OVERHEAD.get(method, 1.0))

    @property
    def source(self) -> str:
        if not self.n_runs:
            return (
                f"default speed of a {self.device.upper()} ({self.flops_per_s / 1e9:.0f} GFLOP/s)"
            )
        return f"measured on {self.n_runs} stored {self.device.upper()} run(s)"


@lru_cache(maxsize=1)
def cpu_flops() -> float:
    """This CPU's effective FLOP/s: the median of 5 timed ``CPU_BENCH`` matmuls after a
    warm-up (~0.1 s once per process) times ``CPU_EFFICIENCY``."""
    m, k, n = CPU_BENCH
    a, b = torch.randn(m, k), torch.randn(k, n)
    a @ b
    times = []
    for _ in range(5):
        t0 = time.perf_counter()
        a @ b
        times.append(time.perf_counter() - t0)
    return CPU_EFFICIENCY * 2.0 * m * k * n / max(statistics.median(times), 1e-6)


def default_speed(device: str) -> Speed:
    """The speed before any run on ``device`` is stored: a CPU's is measured here."""
    if device in DEFAULT_FLOPS:
        return Speed(device, DEFAULT_FLOPS[device])
    return Speed(device, cpu_flops())


_SPEEDS: dict[tuple, Speed] = {}  # (store root, device, recent, store version) -> Speed


def measured_speed(store: RunStore | None, device: str, recent: int = 30) -> Speed:
    """Speed of ``device`` from the ``recent`` newest finished prune/slice/eval runs on it
    (the defaults when there are none); read once per version of the store's index, since
    a form asks on every rerun and each stored run is a folder read."""
    if store is None:
        return default_speed(device)
    key = (str(store.root), device, recent, store.version())
    if key not in _SPEEDS:
        if len(_SPEEDS) > 64:
            _SPEEDS.clear()
        _SPEEDS[key] = _measure(store, device, recent)
    return _SPEEDS[key]


def _measure(store: RunStore, device: str, recent: int) -> Speed:
    flops, ratios = [], {}
    base = default_speed(device)
    recs = [r for r in store.list(status="done") if r.kind in (EVAL, PRUNE, SLICE)]
    for rec in recs[:recent]:
        try:
            cfg = RunConfig.from_dict(rec.config)
            if device_type(cfg.model) != device:
                continue
            # the index row's summary is the run's metrics.json (RunWriter.commit)
            m, shape = rec.summary or store.load(rec.id).metrics, model_shape(cfg.model)
        except (PruneScopeError, OSError, ValueError, KeyError, TypeError):
            continue
        tps = m.get("eval_tokens_per_s") or m.get("tokens_per_s")
        if tps:
            flops.append(float(tps) * shape.forward_flops(cfg.eval.seqlen))
        if cfg.kind in (PRUNE, SLICE) and m.get("prune_seconds") and tps:
            predicted = prune_phase_flops(cfg, shape) / flops[-1]
            ratios.setdefault(cfg.prune.method, []).append(m["prune_seconds"] / predicted)
    if not flops:
        return base
    overhead = {k: statistics.median(v) for k, v in ratios.items()}
    return Speed(device, statistics.median(flops), overhead, len(flops))


# ---- estimates --------------------------------------------------------------------------------------
def _start_seconds(shape: Shape, device: str) -> float:
    return START_SECONDS.get(device, 12.0) + 4.0 * shape.n_params / LOAD_BYTES_PER_S


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
    core.sweep_grid.baselines builds them)."""
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
    speed = speed or measured_speed(store, device)
    start = _start_seconds(shape, device)
    if cfg.kind == EVAL:
        return start + dense_flops(cfg, shape) / speed.flops_per_s
    if cfg.kind == ZEROSHOT:
        return start + zeroshot_flops(cfg.extra_value("zeroshot"), shape) / speed.flops_per_s
    if cfg.kind in (PRUNE, SLICE):
        return _changed_seconds(cfg, shape, speed) + _baseline_seconds(cfg, shape, speed, store)
    if cfg.kind == SWEEP:
        points = [c for _, configs in sweep_points(cfg) for c in configs]
        todo = [c for c in points if not _stored(store, c)]
        if not todo:
            return start
        changed = sum(_changed_seconds(c, shape, speed) for c in todo)
        return changed + _baseline_seconds(cfg, shape, speed, store)
    return start


def estimate_many(
    configs: Iterable[RunConfig], store: RunStore | None = None, speed: Speed | None = None
) -> float:
    """Seconds for runs executed one after another: a grid sweep's configs
    (core.sweep_grid.resolve_grid), whose dense baselines are configs of their own, so a
    prune/slice config here counts without them. Stored runs are free."""
    speeds: dict[str, Speed] = {}
    total = 0.0
    for cfg in configs:
        if _stored(store, cfg):
            continue
        device = device_type(cfg.model)
        sp = speed or speeds.setdefault(device, measured_speed(store, device))
        if cfg.kind in (PRUNE, SLICE):
            total += _changed_seconds(cfg, model_shape(cfg.model), sp)
        else:
            total += estimate_seconds(cfg, store, sp)
    return total
