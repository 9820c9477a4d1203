"""Driver for methods that prune each linear of a layer on its own (magnitude, Wanda, SparseGPT).

A subclass only implements ``prune_weight`` (or, for the score-and-mask methods without a
weight update, ``ScoreMethod.scores``): a ``WeightJob`` (a float32 (out, in) matrix, its
input statistics and the target) in, a ``PrunedWeight`` (the pruned matrix and its prune
mask) out. ``LinearwiseMethod.prune_layer``
does the rest for every linear the runner hands over: casting, writing the result back in
place in the weight's own dtype, and measuring what was achieved.

Pattern and sparsity: a target sparsity of 0 leaves the linear untouched (bit-identical)
whatever the pattern. Under an N:M pattern any other target is replaced by N/M, the
sparsity the pattern itself implies.
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass, field
from typing import Any, ClassVar

import torch
from torch import nn

from core.methods.base import SAMPLE_ROWS, LayerContext, LinearReport, LinearStats, Method
from core.methods.masks import check_sparsity, scope_dim, score_mask
from core.methods.work import LayerWork, MissingCostTerms, WorkShape
from core.names import SCOPES
from core.settings.field import option
from core.settings.patterns import parse_pattern

log = logging.getLogger(__name__)


def relative_reconstruction_error(
    W: torch.Tensor, W_new: torch.Tensor, gram: torch.Tensor
) -> float:
    """‖(W − Ŵ)X‖_F / ‖WX‖_F on the calibration inputs, exactly, from the Gram matrix.

    With G = X Xᵀ (in, in), ‖AX‖²_F = tr(A G Aᵀ), so the ratio is
    sqrt(tr(ΔW G ΔWᵀ) / tr(W G Wᵀ)) with ΔW = W − Ŵ; no token-sized product is formed.
    W, W_new: (out, in). Returns 0 when both traces vanish and inf when only the
    denominator does.
    """
    gram = gram.to(device=W.device, dtype=torch.float32)
    W = W.float()
    delta = W - W_new.to(device=W.device, dtype=torch.float32)  # (out, in)
    # Row-wise quadratic forms summed in float64; clamp the tiny negatives rounding can give.
    num = max(((delta @ gram) * delta).sum(dtype=torch.float64).item(), 0.0)
    den = max(((W @ gram) * W).sum(dtype=torch.float64).item(), 0.0)
    if den == 0.0:
        return 0.0 if num == 0.0 else math.inf
    return math.sqrt(num / den)


ERROR_BLOCK_BYTES = 4 * 2**20  # float32 rows of ΔW (and of their product) per block


def sample_reconstruction_error(
    W: torch.Tensor, W_new: torch.Tensor, sample: torch.Tensor
) -> float:
    """``relative_reconstruction_error`` on token rows S (k, in) without their Gram: sums of
    squares of (W − Ŵ)Sᵀ and WSᵀ, a block of output rows at a time, in float64.

    The same ratio as with gram = SᵀS up to float rounding, with ~4 MiB blocks alive instead
    of an (in, in) Gram and three (out, in) products (~100 MiB for a 1024 x 3584 weight), and
    fewer FLOPs whenever k < in (2·2·out·in·k instead of 2·in²·k + 2·2·out·in²).
    """
    S = sample.to(device=W.device, dtype=torch.float32)
    W = W.float()
    W_new = W_new.to(device=W.device, dtype=torch.float32)
    step = max(1, ERROR_BLOCK_BYTES // (4 * max(W.shape[1], S.shape[0], 1)))
    num = den = 0.0
    for r in range(0, W.shape[0], step):
        block = W[r : r + step]
        num += ((block - W_new[r : r + step]) @ S.T).double().square().sum().item()
        den += (block @ S.T).double().square().sum().item()
    if den == 0.0:
        return 0.0 if num == 0.0 else math.inf
    return math.sqrt(num / den)


def reconstruction_error(W: torch.Tensor, W_new: torch.Tensor, stats: LinearStats) -> float:
    """The relative error of ``W_new`` on the calibration inputs: exact from the Gram in full
    mode, on the token sample S (k, in) in light mode (``LinearStats``). On the sample, the
    cheaper of two ways to the same ratio: the products with Sᵀ (4·out·in·k multiply-adds)
    or the sample's Gram SᵀS (4·out·in², plus 2·k·in² the first time; shared by q/k/v and
    gate/up), which wins while the input is narrower than the sample."""
    if stats.gram is not None:
        return relative_reconstruction_error(W, W_new, stats.gram)
    out, inp = W.shape
    k = stats.sample.shape[0]
    via_gram = 4 * out * inp * inp + (0 if stats.has_error_gram else 2 * k * inp * inp)
    if via_gram < 4 * out * inp * k:
        return relative_reconstruction_error(W, W_new, stats.error_gram)
    return sample_reconstruction_error(W, W_new, stats.sample)


@dataclass(frozen=True)
class WeightJob:
    """One weight matrix to prune.

    W: (out, in) float32 copy of the weight; methods must not modify it in place (it is the
    reference the reconstruction error is measured against). stats: the linear's calibration
    statistics (None when the method asked for none). sparsity: the target in (0, 1).
    nm: (N, M), or None for unstructured pruning at ``sparsity``.
    """

    W: torch.Tensor
    stats: LinearStats | None
    sparsity: float
    nm: tuple[int, int] | None


@dataclass(frozen=True)
class PrunedWeight:
    """W: the pruned (out, in) float32 matrix; mask: (out, in) bool, True where pruned;
    extra: the method's own report fields for this linear."""

    W: torch.Tensor
    mask: torch.Tensor
    extra: dict[str, Any] = field(default_factory=dict)


class LinearwiseMethod(Method):
    """Base of methods whose layer step is: prune every linear independently.

    Cost terms: a subclass states its products on one linear (``linear_products``) and
    whether it loops over input columns (``loops_columns``); ``layer_work`` sums them over
    the targeted linears, counting a shared input's statistics once."""

    loops_columns: ClassVar[bool] = False  # a Python loop over every input column
    # Linears that read one input (q/k/v, gate/up) whose float32 weights total at most this
    # go to ``prune_weights`` together; 0: each alone. Together their copies are alive at
    # once, so a large model's groups stay one linear at a time (peak memory).
    joint_bytes: ClassVar[int] = 0

    def joins(self, shapes: list[tuple[int, int]]) -> bool:
        """Whether linears of these (out, in) shapes, reading one input, go together."""
        return len(shapes) > 1 and 4 * sum(o * i for o, i in shapes) <= self.joint_bytes

    def linear_products(self, out: int, inp: int, tokens: int, shared: bool) -> float:
        """FLOPs of the method's products on one (out, in) linear from ``tokens`` calibration
        tokens; ``shared``: its input statistics are already counted (q/k/v, gate/up)."""
        raise MissingCostTerms(f"method {self.name!r} declares no cost terms (linear_products)")

    def layer_work(self, shape: WorkShape) -> LayerWork:
        products, seen = 0.0, set()
        for role in shape.roles:
            out, inp = shape.linears[role]
            shared = shape.shares_input(role, seen)
            products += self.linear_products(out, inp, shape.tokens, shared)
        edited = [shape.linears[role] for role in shape.roles]
        columns = 0
        for group in shape.input_groups() if self.loops_columns else []:
            shapes = [shape.linears[role] for role in group]
            columns += shapes[0][1] if self.joins(shapes) else sum(i for _, i in shapes)
        return LayerWork(products, sum(o * i for o, i in edited), columns)

    def prune_weight(self, job: WeightJob) -> PrunedWeight:
        """Prune one weight matrix (see ``WeightJob`` for what the method may assume)."""
        raise NotImplementedError

    def prune_weights(self, jobs: list[WeightJob]) -> list[PrunedWeight]:
        """Prune linears that read one input (same ``stats``) together, when ``joins``."""
        return [self.prune_weight(job) for job in jobs]

    @torch.no_grad()
    def prune_layer(self, ctx: LayerContext) -> list[LinearReport]:
        nm = parse_pattern(ctx.pattern)
        reports = []
        for group in self._batches(ctx):
            if len(group) > 1:
                reports += self._prune_together(ctx, group, nm)
                continue
            role, linear = group[0]
            reports.append(
                self._prune_linear(
                    ctx.index, role, linear, ctx.stats.get(role), ctx.sparsity[role], nm
                )
            )
        return reports

    def _batches(self, ctx: LayerContext) -> list[list[tuple[str, nn.Module]]]:
        """The targeted linears, in order, as lists pruned together: consecutive linears with
        one ``LinearStats`` (one input) that ``joins`` and all get a target above 0; one
        linear each otherwise."""
        todo = [(role, lin) for role, lin in ctx.linears.items() if role in ctx.sparsity]
        batches, i = [], 0
        while i < len(todo):
            stats, j = ctx.stats.get(todo[i][0]), i + 1
            while j < len(todo) and stats is not None and ctx.stats.get(todo[j][0]) is stats:
                j += 1
            group = todo[i:j]
            shapes = [tuple(lin.weight.shape) for _, lin in group]
            if self.joins(shapes) and all(ctx.sparsity[role] > 0 for role, _ in group):
                batches.append(group)
            else:
                batches.extend([member] for member in group)
            i = j
        return batches

    def _prune_together(
        self, ctx: LayerContext, group: list[tuple[str, nn.Module]], nm: tuple[int, int] | None
    ) -> list[LinearReport]:
        """``prune_weights`` on a group reading one input; its time is shared by rows."""
        start = time.perf_counter()
        stats = ctx.stats.get(group[0][0])
        jobs = [
            WeightJob(
                lin.weight.detach().to(torch.float32, copy=True),
                stats,
                nm[0] / nm[1] if nm is not None else check_sparsity(ctx.sparsity[role]),
                nm,
            )
            for role, lin in group
        ]
        extras = []
        for (_, lin), out in zip(group, self.prune_weights(jobs), strict=True):
            lin.weight.copy_(out.W.to(lin.weight.dtype))
            extras.append({"pruned": int(out.mask.sum().item()), **out.extra})
        seconds = time.perf_counter() - start
        rows = sum(job.W.shape[0] for job in jobs)
        return [
            self._report(ctx.index, role, lin.weight, job, extra, seconds * job.W.shape[0] / rows)
            for (role, lin), job, extra in zip(group, jobs, extras, strict=True)
        ]

    def _prune_linear(
        self,
        layer: int,
        role: str,
        linear: nn.Linear,
        stats: LinearStats | None,
        sparsity: float,
        nm: tuple[int, int] | None,
    ) -> LinearReport:
        sparsity = check_sparsity(sparsity)
        weight = linear.weight  # (out, in), any dtype / device
        start = time.perf_counter()
        W = weight.detach().to(torch.float32, copy=True)
        if sparsity > 0.0 and nm is not None:
            sparsity = nm[0] / nm[1]
        job = WeightJob(W, stats, sparsity, nm)
        extra: dict[str, Any] = {}
        if sparsity > 0.0:
            out = self.prune_weight(job)
            weight.copy_(out.W.to(weight.dtype))
            extra = {"pruned": int(out.mask.sum().item()), **out.extra}
        return self._report(layer, role, weight, job, extra, time.perf_counter() - start)

    def _report(
        self,
        layer: int,
        role: str,
        weight: torch.Tensor,
        job: WeightJob,
        extra: dict[str, Any],
        seconds: float,
    ) -> LinearReport:
        """A pruned linear's report row: ``job.W`` is its weight before, ``weight`` after;
        ``seconds`` its pruning, timed after an ``.item()`` synchronised the device (so the
        asynchronous kernels are in it)."""
        zeros = int((weight == 0).sum().item())
        stats, sparsity = job.stats, job.sparsity
        if stats is None:
            rel_error = math.nan
        elif sparsity == 0.0:
            rel_error = 0.0
        else:
            rel_error = reconstruction_error(job.W, weight.detach(), stats)
            extra["error_tokens"] = stats.error_tokens
        log.debug("layer %d %s: sparsity %.4f, rel_error %.4g", layer, role, sparsity, rel_error)
        return LinearReport(
            layer=layer,
            role=role,
            shape=(weight.shape[0], weight.shape[1]),
            target_sparsity=sparsity,
            achieved_sparsity=zeros / weight.numel(),
            rel_error=rel_error,
            seconds=seconds,
            extra=extra,
        )


def scope_option(default: str, expert: bool = False) -> Any:
    """The ``scope`` option of the methods that compare scores ("row" or "matrix")."""
    return option(
        default,
        "Compare scores within",
        "each output row, or the whole weight matrix",
        SCOPES,
        expert,
    )


@dataclass(frozen=True)
class ScopedOptions:
    """scope: the comparison group of the scores, "row" (per output row) or "matrix"."""

    scope: str = scope_option("row")

    def __post_init__(self) -> None:
        scope_dim(self.scope)  # validates


class ScoreMethod(LinearwiseMethod):
    """Methods that score every weight and zero the lowest, keeping the rest unchanged: one
    selection rule (``core.methods.masks.score_mask``) over each method's own scores."""

    updates_weights = False
    options: ScopedOptions
    needs_gram = False  # column norms + a token sample suffice (no O(in²) Gram products)

    def scores(self, W: torch.Tensor, stats: LinearStats | None) -> torch.Tensor:
        """Importance of every weight, (out, in) like W: the lowest are pruned."""
        raise NotImplementedError

    def linear_products(self, out: int, inp: int, tokens: int, shared: bool) -> float:
        """A score per weight and its sort (~10·out·in), plus the Gram of the token sample
        the reconstruction error is measured on (``SAMPLE_ROWS`` rows at most)."""
        gram = 0.0 if shared else 2.0 * min(tokens, SAMPLE_ROWS) * inp**2
        return gram + 10.0 * out * inp

    def prune_weight(self, job: WeightJob) -> PrunedWeight:
        mask = score_mask(self.scores(job.W, job.stats), job.sparsity, self.options.scope, job.nm)
        return PrunedWeight(job.W.masked_fill(mask, 0.0), mask)
