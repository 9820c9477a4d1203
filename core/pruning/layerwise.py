"""The shared layer-by-layer calibration runner (Wanda / SparseGPT "sequential" scheme).

1. Capture the inputs of decoder layer 0 for the calibration batch, and the keyword
   arguments of every layer kind (``core.models.layer_inputs.capture_layer_inputs``: no layer runs
   and only the embeddings need the device).
2. For each decoder layer in turn: fetch it to the compute device (``core.models.offload``: from
   memory, or read from safetensors when streamed), hook its linears to accumulate input
   statistics (Gram matrices x xᵀ; raw inputs when a method asks), let the method edit the
   weights, re-run the layer so its *pruned* outputs feed the next layer, and release it
   (home again, or written out and dropped when streamed). Only one layer's weights sit on
   the device at a time; calibration activations can live on the CPU.

Three savings over the reference implementations' loop: the statistics pass stops once the
last hooked linear has read its input (for all seven roles, ~a quarter of the layer's
linear FLOPs are skipped); the pruned outputs overwrite the inputs batch by batch, so one
(N, L, d) activation buffer serves the whole walk; and the last layer's pruned outputs,
which would feed nothing, are not computed.

The layer calls' matrix products run in float32 (the reference's arithmetic) or, with
``calib_dtype="bfloat16"``, in bfloat16 with float32 accumulation under autocast: the
products take about half the time where the hardware has bfloat16 units (elsewhere they are
emulated and slower: a warning says so). The statistics are still taken and summed in
float32/float64 from what the hooks receive; only the forwards' products are rounded.

Layer calls go through ``core.models.layer_inputs.forward_layer`` with the keyword arguments the
model itself passed to a layer of the same kind, so they survive transformers drift.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from core.adapters import SHARED_INPUT, ModelAdapter
from core.machine.device import native_bf16
from core.machine.process_memory import trim_heap
from core.methods.base import SAMPLE_ROWS, LayerContext, LinearReport, LinearStats, Method
from core.models.layer_inputs import (
    LayerInputs,
    StopForward,
    capture_layer_inputs,
    forward_layer,
    move,
    propagate,
)
from core.models.offload import Offload
from core.names import BF16, F32
from core.progress import ProgressFn, report
from core.pruning.gram import GRAM_DTYPE, GramSum

log = logging.getLogger(__name__)


def forward_precision(
    device: torch.device, calib_dtype: str = F32
) -> contextlib.AbstractContextManager:
    """The context the runner's layer calls run in: none for float32; autocast to bfloat16
    (products in bfloat16, accumulated in float32; norms and softmax kept float32 by
    autocast's own lists) for bfloat16."""
    if calib_dtype == BF16:
        return torch.autocast(device.type, dtype=torch.bfloat16)
    return contextlib.nullcontext()


def warn_if_emulated(device: torch.device, calib_dtype: str) -> None:
    """A warning when bfloat16 forwards were asked for where they would be emulated."""
    if calib_dtype == BF16 and not native_bf16(device):
        log.warning(
            "bfloat16 calibration forwards on %s without bfloat16 units are emulated and "
            "slower than float32; --calib-dtype float32 is faster here",
            device,
        )


class _StatsCollector:
    """Forward pre-hooks that accumulate input statistics (and optionally raw inputs) per role.

    Statistics need only a linear's input, so they are taken before the linear runs. Roles
    reading the same tensor (q/k/v, gate/up) share one LinearStats: SHARED_INPUT maps them.
    Full mode: gram (in, in) on the compute device, summed by a ``GramSum``
    (``core.pruning.gram``: fixed chunks of calibration sequences, float64 sum, float32
    hand-over), so the runner's batch does not move SparseGPT's masks.
    Light mode: column squared norms (in,), summed in float64 (Wanda's scores are compared
    in float64, see ``core.methods.wanda``), plus the token rows at every ``stride``-th
    position (about SAMPLE_ROWS of them), written into a buffer allocated once.

    The collector learns on the first batch which hooked linear reads its input last; from
    then on that hook raises ``StopForward`` (``stop_at``), ending the layer call early.
    """

    def __init__(
        self,
        linears: dict[str, nn.Module],
        hooks: dict[str, nn.Module],
        want_gram: bool,
        want_inputs: frozenset[str],
        input_store: torch.device,
        n_tokens: int,
    ) -> None:
        self.stats: dict[str, LinearStats] = {}
        self.raw: dict[str, list[torch.Tensor]] = {r: [] for r in want_inputs if r in linears}
        self.handles = []
        self.stride = max(1, n_tokens // SAMPLE_ROWS)
        n_sample = -(-n_tokens // self.stride)  # rows at positions 0, stride, 2·stride, ...
        self.grams: dict[int, GramSum] = {}  # id(stat) -> its running Gram sum
        self.fired: list[nn.Module] = []  # hooked linears in the order they ran (first batch)
        self.learned = False
        self.stop_at: nn.Module | None = None
        owners: dict[str, str] = {}
        for role in linears:
            owner = SHARED_INPUT.get(role, role)
            owners[role] = owner if owner in linears else role
        for role, lin in linears.items():
            if owners[role] != role:
                continue  # the owner's hook accumulates for it
            dev, n_in = lin.weight.device, lin.in_features
            if want_gram:
                gram = GramSum(n_in, dev)
                stat = LinearStats(gram=gram.acc)
                self.grams[id(stat)] = gram
            else:
                stat = LinearStats(
                    sq_norms=torch.zeros(n_in, device=dev, dtype=GRAM_DTYPE),
                    sample=torch.zeros(n_sample, n_in, device=dev),
                )
            hook_roles = [r for r, o in owners.items() if o == role]
            for r in hook_roles:
                self.stats[r] = stat
            self.handles.append(
                hooks[role].register_forward_pre_hook(
                    self._make_hook(stat, hook_roles, input_store)
                )
            )

    def _make_hook(self, stat: LinearStats, hook_roles: list[str], store: torch.device):
        def hook(module: nn.Module, args: tuple) -> None:
            x = args[0]  # (B, L, in), float32 or (bfloat16 forwards) bfloat16
            flat = x.reshape(-1, x.shape[-1])
            if stat.gram is not None:
                self.grams[id(stat)].add(x.float())
            else:
                # float32 squares are exact in float64; the CPU's vector width then moves
                # the sum by ~1e-16 relative, not float32's ~1e-7 (bfloat16 goes straight
                # to float64: the same values as through float32)
                stat.sq_norms += flat.to(GRAM_DTYPE).square_().sum(0)
                # rows at global token positions that are multiples of the stride
                offset = (-stat.n_tokens) % self.stride
                rows = flat[offset :: self.stride].float()
                start = (stat.n_tokens + offset) // self.stride
                stat.sample[start : start + rows.shape[0]] = rows
            stat.n_tokens += flat.shape[0]
            for r in hook_roles:
                if r in self.raw:
                    self.raw[r].append(x.detach().float().to(store))
            if not self.learned:
                self.fired.append(module)
            elif module is self.stop_at:
                raise StopForward

        return hook

    def batch_done(self) -> None:
        """After the first full layer call, remember the linear whose input came last (no
        early stop if a hooked linear ran twice in one call: "last" is then ambiguous)."""
        if not self.learned:
            self.learned = True
            once = len({id(m) for m in self.fired}) == len(self.fired)
            self.stop_at = self.fired[-1] if self.fired and once else None

    def remove(self) -> None:
        for h in self.handles:
            h.remove()

    def finish(self) -> None:
        """Hand each Gram sum over to its stats in float32 (shared stats once)."""
        for stat in {id(s): s for s in self.stats.values()}.values():
            if stat.gram is not None:
                stat.gram = self.grams.pop(id(stat)).result()


@torch.no_grad()
def collect_statistics(
    layer: nn.Module,
    inputs: LayerInputs,
    device: torch.device,
    collector: _StatsCollector,
    index: int = 0,
) -> None:
    """Run one layer over every calibration batch for its hooks only (outputs discarded).

    From the second batch on, the call stops as soon as the last hooked linear has read its
    input (``_StatsCollector.stop_at``): what follows it (for all seven roles, the down
    projection's product and the residual add) is not needed.
    """
    for h, kw in zip(inputs.hidden, inputs.for_layer(index), strict=True):
        with contextlib.suppress(StopForward):
            forward_layer(layer, h.to(device), move(kw, device))
        collector.batch_done()


@dataclass
class RunnerResult:
    """What a layer-wise pass produced: per-linear reports plus method-defined tables/arrays."""

    reports: list[LinearReport] = field(default_factory=list)
    tables: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    arrays: dict[str, torch.Tensor] = field(default_factory=dict)
    layer_seconds: list[float] = field(default_factory=list)


LayerFn = Callable[[LayerContext], list[LinearReport]]


@torch.no_grad()
def run_layerwise(
    adapter: ModelAdapter,
    calib_ids: torch.Tensor,
    layer_fn: LayerFn,
    roles: Sequence[str],
    sparsity: Sequence[dict[str, float]] | None = None,
    pattern: str = "unstructured",
    device: torch.device | str = "cpu",
    needs_gram: bool = True,
    needs_inputs: frozenset[str] = frozenset(),
    batch_size: int = 4,  # sequences per layer call: bounds the forward's transient memory
    activations_on_cpu: bool = False,
    on_progress: ProgressFn | None = None,
    stage: str = "prune",
    offload: Offload | None = None,
    changes: bool = True,
    calib_dtype: str = F32,
) -> RunnerResult:
    """Walk the decoder layers sequentially, calling ``layer_fn`` on each.

    sparsity[i] maps role -> target sparsity of layer i (None: 0 for every role). Layers
    visit ``device`` one at a time through ``offload`` (default: in memory, each layer
    moved to ``device`` and back home); ``changes``: whether ``layer_fn`` edits weights
    (a streamed walk then writes each layer out, and closes its output at the end);
    ``calib_dtype``: the layer calls' precision (``forward_precision``).
    """
    device = torch.device(device)
    warn_if_emulated(device, calib_dtype)
    offload = offload or Offload(adapter.model, device)
    store = torch.device("cpu") if activations_on_cpu else device
    inputs = capture_layer_inputs(adapter, calib_ids, device, batch_size, store, offload)
    result = RunnerResult()
    n = adapter.n_layers
    report(on_progress, stage, 0, n)
    for i, layer in enumerate(adapter.layers):
        t0 = time.perf_counter()
        offload.fetch(layer)
        linears = adapter.linears(layer, tuple(roles))
        hooks = {role: adapter.input_module(layer, role) for role in linears}
        collector = _StatsCollector(
            linears, hooks, needs_gram, needs_inputs, store, inputs.n_tokens
        )
        try:
            with forward_precision(device, calib_dtype):
                collect_statistics(layer, inputs, device, collector, i)
        finally:
            collector.remove()
        collector.finish()
        ctx = LayerContext(
            index=i,
            n_layers=n,
            layer=layer,
            adapter=adapter,
            linears=linears,
            stats=collector.stats,
            inputs={r: torch.cat(v) for r, v in collector.raw.items()},
            sparsity=dict(sparsity[i]) if sparsity is not None else {r: 0.0 for r in roles},
            pattern=pattern,
            device=device,
            position_embeddings=inputs.position_embeddings(device, i),
        )
        result.reports.extend(layer_fn(ctx))
        for name, rows in ctx.tables.items():
            result.tables.setdefault(name, []).extend(rows)
        result.arrays.update({k: v.detach().cpu() for k, v in ctx.arrays.items()})
        del collector, ctx
        if i + 1 < n:  # pruned outputs feed layer i+1; the last layer's feed nothing
            with forward_precision(device, calib_dtype):
                propagate(layer, inputs, device, i)
        offload.release(layer, changed=changes)
        trim_heap()  # hand back this layer's freed working set, so RSS does not creep
        result.layer_seconds.append(time.perf_counter() - t0)
        log.debug("layer %d/%d done in %.2fs", i + 1, n, result.layer_seconds[-1])
        report(on_progress, stage, i + 1, n, f"layer {i + 1}/{n}")
    if changes:
        offload.finish()
    return result


def run_method(
    method: Method,
    adapter: ModelAdapter,
    calib_ids: torch.Tensor,
    roles: Sequence[str],
    sparsity: Sequence[dict[str, float]],
    pattern: str,
    device: torch.device | str,
    **kwargs: Any,
) -> RunnerResult:
    """Prune every decoder layer with a registered method."""
    return run_layerwise(
        adapter,
        calib_ids,
        method.prune_layer,
        roles,
        sparsity,
        pattern,
        device,
        needs_gram=method.needs_gram,
        needs_inputs=method.needs_inputs,
        **kwargs,
    )
