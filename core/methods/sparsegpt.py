"""SparseGPT: one-shot pruning with OBS weight updates (Frantar & Alistarh; arXiv 2301.00774).

Per linear it solves min ‖WX − ŴX‖²₂ over masked Ŵ greedily, column by column (papers.md §5):
with H = 2XXᵀ/n and U the upper Cholesky factor of H⁻¹, eliminating column j sets the
pruned entries of w_j to 0 and moves the error onto the columns not yet eliminated,

    err = (w_j − q_j) / U_jj,        W[:, j:] −= err ⊗ U[j, j:]        (OBS update),

which is δ = −(w_m/[H⁻¹]_mm)·H⁻¹_{:,m} with the inverse Hessians of the shrinking problems
read off the rows of U. Columns go in blocks of ``blocksize`` with lazy batched updates to
the rest of the matrix, and the mask of each block is chosen adaptively, at its start, from
the already-updated weights with the OBS saliency w²/U_jj² (the paper's "adaptive mask
selection").

Each block's unstructured mask follows the reference by default (``selection="threshold"``:
prune ``score <= sorted(score)[⌊p·numel⌋]``, i.e. ⌊p·numel⌋+1 per block, more on ties, the
invariant papers.md §5 states); ``selection="exact"`` prunes the block's share of the
cumulative budget ⌊p·rows·i2⌋ − ⌊p·rows·i1⌋ instead, ties to the lower index, so the matrix
total is exactly ⌊p·rows·in⌋. On the embedded model the two differ by one weight per block
(2·10⁻⁶ of the weights); docs/benchmarks.md gives what that does to perplexity.

Differences from the reference ``fasterprune``:
- H⁻¹ and its Cholesky factor are computed in float64 (``core.methods.obs_factor``), then
  the sweep runs in float32: LLM inputs have outlier features, which make H badly
  conditioned.
- Decisions do not hang on the last bit of a CPU-dependent float32 product: the saliencies
  w²/U_jj² are compared in float64 (U_jj from the float64 factor), and the block's batched
  update of the later columns is a float64 product rounded once (``lazy_update``). The
  column loop's own steps are elementwise, correctly rounded on every CPU. What still
  depends on the CPU is upstream: the Gram's float32 products and, from layer 1 on, the
  layer forwards that produce the inputs (docs/benchmarks.md, "SparseGPT across CPUs").
- If the damped H is still not positive definite, the damping is raised tenfold (up to
  ``MAX_PERCDAMP``) with a warning; the damping used is returned in ``info``.
- H = 2·gram/n_tokens where the reference divides by the number of sequences: a constant
  factor, which changes neither the mask nor the update (λ scales with mean(diag H)).
- The linears that read one input (q/k/v, gate/up) share one factor and, while their weights
  total at most ``SparseGPT.joint_bytes``, one sweep (``sparsegpt_prune_group``): the same
  numbers as one linear at a time, in fewer Python steps.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass
from typing import Any

import torch

from core.errors import ConfigError
from core.methods import register
from core.methods.base import LayerContext, LinearReport, LinearStats
from core.methods.linear import LinearwiseMethod, PrunedWeight, WeightJob
from core.methods.masks import (
    check_nm,
    check_sparsity,
    lowest_k_mask,
    nm_prune_mask,
    prune_count,
    select_kth,
)
from core.methods.obs_factor import HessianFactor, hessian_factor
from core.settings.field import option

# How each block's unstructured mask is chosen from the OBS saliency w²/U_jj²:
#   "exact": the block's share of the cumulative budget ⌊p·rows·i2⌋ − ⌊p·rows·i1⌋, ties to
#            the lower index, so the matrix total is exactly ⌊p·rows·in⌋;
#   "threshold": the reference's ``score <= sorted(score)[⌊p·numel⌋]``, one more per block
#            (more on ties).
MASK_SELECTIONS = ("exact", "threshold")
_UPDATE_ROWS = 1024  # rows of W per float64 lazy-update product


def check_sparsegpt_options(percdamp: float, blocksize: int, selection: str = "threshold") -> None:
    if isinstance(percdamp, bool) or not isinstance(percdamp, numbers.Real):
        raise ConfigError(f"percdamp must be a positive number, got {percdamp!r}")
    if not (math.isfinite(percdamp) and percdamp > 0):
        raise ConfigError(f"percdamp must be a positive number, got {percdamp!r}")
    if isinstance(blocksize, bool) or not isinstance(blocksize, int) or blocksize < 1:
        raise ConfigError(f"blocksize must be an integer >= 1, got {blocksize!r}")
    if selection not in MASK_SELECTIONS:
        raise ConfigError(f"selection must be one of {MASK_SELECTIONS}, got {selection!r}")


def block_mask(scores: torch.Tensor, sparsity: float, rows: int, i1: int, i2: int, selection: str):
    """Unstructured prune mask (out, B) of block [i1, i2) from its saliencies (out, B)."""
    if selection == "threshold":
        # sorted(scores)[k], selected rather than sorted: the same value, O(numel)
        k = prune_count(scores.numel(), sparsity)
        return scores <= select_kth(scores.flatten(), k + 1)
    k = prune_count(rows * i2, sparsity) - prune_count(rows * i1, sparsity)
    return lowest_k_mask(scores, k, dim=None)


def lazy_update(W2: torch.Tensor, err: torch.Tensor, U12: torch.Tensor) -> None:
    """W2 −= err @ U12, the block's batched OBS update of the later columns, in place.

    W2: (out, rest) float32 view; err: (out, B) float32; U12: (B, rest) float64 rows of U.
    The product is taken in float64 and rounded once into W2: a float32 product's last bits
    depend on which kernels the BLAS picks on this CPU (MKL code path, vector width), and
    the next block's mask is chosen from these weights. It is ~out·in²/2 multiply-adds per
    matrix, small beside the Gram. Rows go ``_UPDATE_ROWS`` at a time to bound the float64
    temporary."""
    if W2.shape[1] == 0:
        return
    for r in range(0, W2.shape[0], _UPDATE_ROWS):
        W2[r : r + _UPDATE_ROWS] -= err[r : r + _UPDATE_ROWS].double() @ U12


@torch.no_grad()
def sparsegpt_prune(
    W: torch.Tensor,
    H: torch.Tensor | None,
    sparsity: float,
    nm: tuple[int, int] | None = None,
    blocksize: int = 128,
    percdamp: float = 0.01,
    selection: str = "threshold",
    h_scale: float = 1.0,
    factor: HessianFactor | None = None,
) -> tuple[torch.Tensor, torch.Tensor, dict[str, Any]]:
    """Prune W with SparseGPT's OBS sweep; W and H are not modified.

    W: (out, in); H: (in, in) = 2XXᵀ/n, or XXᵀ with ``h_scale`` = 2/n (the product is then
    taken in H's dtype block by block, the same numbers without an (in, in) copy); float64
    H is used as it is, any other dtype as float32. ``factor``: H's ``hessian_factor``
    when already computed (H is then not read). Unstructured: ⌊p·numel⌋+1 weights per
    block of ``blocksize`` columns, more on ties (``selection="threshold"``), or exactly
    ⌊p·out·in⌋ in all, ties to the lower index (``"exact"``); see MASK_SELECTIONS. N:M:
    every group of M consecutive columns of each row has exactly N pruned, chosen when the
    sweep reaches the group; ``sparsity`` is ignored and ``blocksize`` is rounded down to a
    multiple of M so no group straddles two blocks.
    Inputs never active (diag H = 0) have their columns zeroed. With p = 0 (unstructured)
    W is returned unchanged without factorising H.

    Returns (W_new (out, in) float32, prune mask (out, in) bool, info) where info holds
    ``percdamp`` (the damping used), ``damp_increases``, ``dead_columns``, ``blocksize``
    and ``obs_loss`` = Σ (w − q)² / (2 U_jj²), the sweep's own estimate of the added error.
    """
    check_sparsegpt_options(percdamp, blocksize, selection)
    cols = W.shape[1]
    shape = tuple((factor.U if factor is not None else H).shape)
    if shape != (cols, cols):
        raise ConfigError(f"Hessian shape {shape} does not match weight {tuple(W.shape)}")
    if nm is None and check_sparsity(sparsity) == 0.0:
        return W.detach().to(torch.float32, copy=True), torch.zeros_like(W, dtype=torch.bool), {}
    if factor is None:
        factor = hessian_factor(H, percdamp, h_scale, W.device)
    return sparsegpt_prune_group([W], [sparsity], factor, nm, blocksize, selection)[0]


@torch.no_grad()
def sparsegpt_prune_group(
    Ws: list[torch.Tensor],
    sparsities: list[float],
    factor: HessianFactor,
    nm: tuple[int, int] | None = None,
    blocksize: int = 128,
    selection: str = "threshold",
) -> list[tuple[torch.Tensor, torch.Tensor, dict[str, Any]]]:
    """``sparsegpt_prune`` of the weights that read one input (Ws (out_m, in) each, sharing
    H's ``factor``), swept as one (Σ out_m, in) matrix; Ws are not modified.

    Every step of the sweep acts on rows alone (the column loop's updates, an N:M group's
    choice), and each member keeps what is its own: its block masks (unstructured, at its
    sparsity, as if alone), its float64 lazy updates and its loss. So every member comes out
    as ``sparsegpt_prune`` gives it alone, bit for bit, in one Python loop instead of one per
    member (q/k/v: three, gate/up: two). Returns (W_new, mask, info) per member.
    """
    cols = factor.U.shape[0]
    if any(w.shape[1] != cols for w in Ws):
        raise ConfigError(f"weights {[tuple(w.shape) for w in Ws]} do not match H ({cols})")
    sparsities = [check_sparsity(s) for s in sparsities]
    if nm is not None:
        check_nm(*nm)
        if cols % nm[1]:
            raise ConfigError(f"N:M pattern {nm[0]}:{nm[1]} needs a width divisible by {nm[1]}")
        blocksize = max(nm[1], blocksize - blocksize % nm[1])
    ends = torch.tensor([w.shape[0] for w in Ws]).cumsum(0).tolist()
    members = [slice(a, b) for a, b in zip([0, *ends[:-1]], ends, strict=True)]
    W = torch.cat([w.detach().float() for w in Ws])  # (Σ out, in), the sweep edits it in place
    mask = torch.zeros(W.shape, dtype=torch.bool, device=W.device)
    U, dead = factor.U, factor.dead
    W[:, dead] = 0.0
    d64 = U.diagonal().clone()  # (in,) float64: the saliency's denominators

    losses = [torch.zeros((), dtype=torch.float64, device=W.device) for _ in Ws]
    for i1 in range(0, cols, blocksize):
        i2 = min(i1 + blocksize, cols)
        W1 = W[:, i1:i2]  # (Σ out, B) view: updated in place
        U1 = U[i1:i2, i1:i2].to(torch.float32)  # (B, B): the sweep's own float32 factor
        d, dd = U1.diagonal(), d64[i1:i2].square()  # (B,) float32, (B,) float64
        err1 = torch.zeros_like(W1)  # (Σ out, B) scaled errors for the lazy update
        mask1 = mask[:, i1:i2]  # (Σ out, B) view
        if nm is None:
            # OBS saliency on the already-updated block (MASK_SELECTIONS), in float64, each
            # member's mask from its own rows
            for r, p in zip(members, sparsities, strict=True):
                scores = W1[r].double().square() / dd
                mask1[r] |= block_mask(scores, p, r.stop - r.start, i1, i2, selection)
            keep1 = ~mask1
        else:
            keep1 = torch.empty_like(mask1)
        for j in range(i2 - i1):
            if nm is not None and j % nm[1] == 0:
                g = slice(j, j + nm[1])
                mask1[:, g] = nm_prune_mask(W1[:, g].double().square() / dd[g], *nm)
                keep1[:, g] = ~mask1[:, g]
            # (w − q)/U_jj with q = w on kept rows: w/U_jj where pruned, +0 where kept
            err = W1[:, j].masked_fill(keep1[:, j], 0.0).div_(d[j])  # (Σ out,)
            W1[:, j + 1 :] -= torch.outer(err, U1[j, j + 1 :])
            err1[:, j] = err
        # q: column j is final once visited (later columns update only j+1:), so the pruned
        # weights are set to exactly 0 for the whole block at once
        W1.masked_fill_(mask1, 0.0)
        for r, loss in zip(members, losses, strict=True):
            loss += err1[r].double().square().sum()
            lazy_update(W[r, i2:], err1[r], U[i1:i2, i2:])

    W[:, dead] = 0.0
    mask[:, dead] = True
    info = {
        "percdamp": factor.percdamp,
        "damp_increases": factor.increases,
        "dead_columns": int(dead.sum().item()),
        "blocksize": blocksize,
    }
    return [
        (W[r], mask[r], {**info, "obs_loss": loss.item() / 2})
        for r, loss in zip(members, losses, strict=True)
    ]


@dataclass(frozen=True)
class SparseGPTOptions:
    """percdamp: damping λ = percdamp · mean(diag H); blocksize: columns per lazy-update block;
    selection: how a block's unstructured mask is chosen (MASK_SELECTIONS; the reference's
    "threshold" by default, "exact" for an exact count)."""

    percdamp: float = option(
        0.01,
        "Hessian damping",
        "added to the diagonal as a fraction of its mean (reference 0.01)",
        (0.0, 1.0),
    )
    blocksize: int = option(128, "Columns per update block", "lazy-update block width", (1, 8192))
    selection: str = option(
        "threshold",
        "Mask selection",
        "'threshold' as the reference; 'exact' for an exact count per block",
        MASK_SELECTIONS,
        expert=True,
    )

    def __post_init__(self) -> None:
        check_sparsegpt_options(self.percdamp, self.blocksize, self.selection)


@register
class SparseGPT(LinearwiseMethod):
    """SparseGPT with H = 2·gram/n_tokens, the reference's running mean of 2xxᵀ."""

    name = "sparsegpt"
    options_cls = SparseGPTOptions
    options: SparseGPTOptions
    loops_columns = True  # the OBS sweep (Alg. 1) visits every input column in Python
    joint_bytes = 64 * 2**20  # q/k/v or gate/up swept as one matrix up to 64 MiB of float32

    def linear_products(self, out: int, inp: int, tokens: int, shared: bool) -> float:
        """The full Gram 2·tokens·in² (once per shared input), the inverse Cholesky factor
        ~in³ and the OBS updates 2·out·in² (SparseGPT Alg. 1)."""
        gram = 0.0 if shared else 2.0 * tokens * inp**2
        return gram + float(inp) ** 3 + 2.0 * out * inp**2

    _factor: tuple[LinearStats, HessianFactor] | None = None

    def prune_layer(self, ctx: LayerContext) -> list[LinearReport]:
        try:
            return super().prune_layer(ctx)
        finally:
            self._factor = None  # not kept alive past the layer (peak memory)

    def prune_weight(self, job: WeightJob) -> PrunedWeight:
        return self.prune_weights([job])[0]

    def prune_weights(self, jobs: list[WeightJob]) -> list[PrunedWeight]:
        """One OBS sweep over linears reading one input (``sparsegpt_prune_group``), from
        their shared factor."""
        stats = jobs[0].stats
        if stats is None or stats.n_tokens == 0:
            raise ConfigError("sparsegpt needs calibration statistics from at least one token")
        opts = self.options
        if self._factor is None or self._factor[0] is not stats:
            # q/k/v and gate/up share one LinearStats, so one factor serves the group;
            # H = 2·gram/n is scaled inside block by block: no (in, in) float32 copy
            self._factor = None  # the previous group's factor goes before the next is made
            h_scale = 2.0 / stats.n_tokens
            factor = hessian_factor(stats.gram, opts.percdamp, h_scale, jobs[0].W.device)
            self._factor = (stats, factor)
        done = sparsegpt_prune_group(
            [job.W for job in jobs],
            [job.sparsity for job in jobs],
            self._factor[1],
            jobs[0].nm,
            opts.blocksize,
            opts.selection,
        )
        return [PrunedWeight(W, mask, info) for W, mask, info in done]
