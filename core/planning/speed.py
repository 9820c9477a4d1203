"""A device's speed, for the duration estimates (core.runs.estimate): its effective FLOP/s and
a factor per pruning method, measured on the store's finished runs (the defaults without).

- **Effective FLOP/s from a whole run's time, not its evaluation's.** A stored run's rate is
  its work outside the pruning phase (core.planning.cost: evaluation, effective dimension,
  latency, probes; the dense baseline too when the run computed it inline) over its wall time
  less the weights' load and its prune_seconds. A short evaluation alone is one instant of a
  machine whose load changes by the minute, and a dense run's is its cold first forwards. A
  run whose forwards took less than the load it is measured net of gives no rate (the load
  is predicted, not measured, so that difference would be its error). Runs of the planned
  run's model are used when the store has any (a tiny model's forwards are per-layer
  overhead, not FLOPs); the median over runs is the rate.
- **Method factors on a model that has its fixed costs.** A method's factor is the median of
  its runs' prune_seconds over the phase's predicted seconds at that run's own rate (the
  median rate for a run without one). The prediction counts the work that does not shrink
  with calibration tokens (choosing the weights, SparseGPT's column loop), so a small run's
  ratio is ~1 when the model holds. The factor is bounded to [1/2, 2] (``FACTOR_BOUNDS``):
  past that the run measured a regime the model does not describe (a load spike inside the
  phase, a model dominated by per-layer overhead) and carrying it to other sizes would do
  more harm than the bound.

How the rule was set, and what the earlier ones got wrong: docs/design-notes.md ("Duration
estimates").
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field
from functools import lru_cache

import torch

from core.errors import PruneScopeError
from core.methods import get_method
from core.names import EVAL, PRUNED_KINDS
from core.planning.cost import (
    Shape,
    changed_model_flops,
    dense_flops,
    device_type,
    model_shape,
    prune_phase_flops,
)
from core.settings.config import RunConfig
from core.store.run_store import RunStore

DEFAULT_FLOPS = {"mps": 1e12, "cuda": 2e13}  # effective FLOP/s, conservative; CPU: measured
# A CPU's effective rate: a float32 matmul of the embedded model's MLP shape for one batch of
# evaluation windows, (512, 576) @ (576, 1536), timed here, times the rate a whole batched
# forward of smollm2-135m reached against it on the 2-core machine (0.43-0.60 in three
# interleaved measurements under load; the middle taken).
CPU_BENCH = (512, 576, 1536)
CPU_EFFICIENCY = 0.5
CPU_BENCH_REPEATS = 9
# Reading the float32 weights (smollm2-135m's 538 MB: 3.7 s; 1.5-4.4 s on the quiet demo set).
LOAD_BYTES_PER_S = 1.5e8
FACTOR_BOUNDS = (0.5, 2.0)


@dataclass(frozen=True)
class Speed:
    """Effective FLOP/s of a device type and per-method overhead factors."""

    device: str
    flops_per_s: float
    overhead: dict[str, float] = field(default_factory=dict)
    n_runs: int = 0  # stored runs it was measured from (0: the defaults)

    def factor(self, method: str) -> float:
        """The method's factor measured on stored runs, else the share of its phase its
        cost terms miss as it declares it (``Method.cost_overhead``)."""
        if method in self.overhead:
            return self.overhead[method]
        return get_method(method).cost_overhead

    @property
    def source(self) -> str:
        if not self.n_runs:
            return (
                f"default speed of a {self.device.upper()} ({self.flops_per_s / 1e9:.0f} GFLOP/s)"
            )
        return f"measured on {self.n_runs} stored {self.device.upper()} run(s)"


@lru_cache(maxsize=1)
def cpu_flops() -> float:
    """This CPU's effective FLOP/s: the fastest of ``CPU_BENCH_REPEATS`` timed ``CPU_BENCH``
    matmuls after a warm-up (~0.2 s once per process) times ``CPU_EFFICIENCY``. The fastest,
    not the median: other processes only ever slow a repeat down, and the estimate of an
    empty store is for the machine, not for this instant's load."""
    m, k, n = CPU_BENCH
    a, b = torch.randn(m, k), torch.randn(k, n)
    a @ b
    best = float("inf")
    for _ in range(CPU_BENCH_REPEATS):
        t0 = time.perf_counter()
        a @ b
        best = min(best, time.perf_counter() - t0)
    return CPU_EFFICIENCY * 2.0 * m * k * n / max(best, 1e-6)


def default_speed(device: str) -> Speed:
    """The speed before any run on ``device`` is stored: a CPU's is measured here."""
    if device in DEFAULT_FLOPS:
        return Speed(device, DEFAULT_FLOPS[device])
    return Speed(device, cpu_flops())


def load_seconds(shape: Shape) -> float:
    """Reading the float32 weights."""
    return 4.0 * shape.n_params / LOAD_BYTES_PER_S


_SPEEDS: dict[tuple, Speed] = {}  # (store root, device, model, recent, version) -> Speed


def measured_speed(
    store: RunStore | None, device: str, model: str | None = None, recent: int = 30
) -> Speed:
    """Speed of ``device`` from the ``recent`` newest finished prune/slice/eval runs on it,
    those of ``model`` when there are any (the defaults when there are none); read once per
    version of the store's index, since a form asks on every rerun."""
    if store is None:
        return default_speed(device)
    key = (str(store.root), device, model, recent, store.version())
    if key not in _SPEEDS:
        if len(_SPEEDS) > 64:
            _SPEEDS.clear()
        samples = _samples(store, device, recent)
        own = [s for s in samples if s.model == model]
        _SPEEDS[key] = fit_speed(device, own or samples)
    return _SPEEDS[key]


@dataclass(frozen=True)
class Sample:
    """What one finished run tells: its model and method, its rate (None when its measured
    forwards were shorter than the weights' load they are measured net of: a lean demo run's
    ~0.5 s evaluation beside ~4 s of predicted load is the load's error, not a rate), and its
    pruning phase's measured seconds and predicted work."""

    model: str
    method: str | None = None
    rate: float | None = None
    prune_seconds: float = 0.0
    phase_flops: float = 0.0


def fit_speed(device: str, samples: list[Sample]) -> Speed:
    """The rule of the module docstring over the runs' ``samples``: the median rate, and per
    method the median of prune_seconds over the phase's seconds at the run's own rate (the
    median rate for a run without one), bounded."""
    rates = [s.rate for s in samples if s.rate is not None]
    if not rates:
        return default_speed(device)
    median = statistics.median(rates)
    ratios: dict[str, list[float]] = {}
    for s in samples:
        if s.method is not None and s.prune_seconds > 0 and s.phase_flops > 0:
            predicted = s.phase_flops / (s.rate or median)
            ratios.setdefault(s.method, []).append(s.prune_seconds / predicted)
    lo, hi = FACTOR_BOUNDS
    overhead = {k: min(hi, max(lo, statistics.median(v))) for k, v in ratios.items()}
    return Speed(device, median, overhead, len(rates))


def run_sample(cfg: RunConfig, wall: float, metrics: dict, inline_dense: bool) -> Sample:
    """A finished run's rate and phase. ``wall``: its index row's finished − created;
    ``inline_dense``: its dense baseline ran inside that time."""
    shape = model_shape(cfg.model)
    changing = cfg.kind in PRUNED_KINDS
    work = changed_model_flops(cfg, shape) if changing else dense_flops(cfg, shape)
    if changing and inline_dense:
        work += dense_flops(cfg, shape)
    prune_s = float(metrics.get("prune_seconds") or 0.0) if changing else 0.0
    seconds = wall - load_seconds(shape) - prune_s
    rate = work / seconds if work > 0 and seconds >= load_seconds(shape) else None
    if not changing:
        return Sample(cfg.model.name, rate=rate)
    return Sample(cfg.model.name, cfg.prune.method, rate, prune_s, prune_phase_flops(cfg, shape))


def _samples(store: RunStore, device: str, recent: int) -> list[Sample]:
    recs = [r for r in store.list(status="done") if r.kind in (EVAL, *PRUNED_KINDS)]
    created = {r.id: r.created for r in recs}
    samples = []
    for rec in recs[:recent]:
        try:
            cfg = RunConfig.from_dict(rec.config)
            if device_type(cfg.model) != device or rec.finished is None:
                continue
            # the index row's summary is the run's metrics.json (RunWriter.commit)
            m = rec.summary or store.load(rec.id).metrics
            inline = created.get(m.get("dense_run"), 0.0) >= rec.created
            samples.append(run_sample(cfg, rec.finished - rec.created, m, inline))
        except (PruneScopeError, OSError, ValueError, KeyError, TypeError):
            continue
    return samples
