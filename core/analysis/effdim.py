"""Effective dimension of the residual stream, with one statistic fixed in advance.

Paper A's open question is whether the representation dimension governs methods that keep the
width d (Wanda, SparseGPT, attention-mask pruning). That needs a dimension measured, not set.
The statistic was chosen before any run was looked at (docs/statistics.md):

    PRIMARY = "erank_c": the entropy effective rank exp(H(p)), p = λ / Σλ, of the eigenvalues λ
    of the *centred* covariance of the layer's output tokens, averaged over decoder layers,

- centred, because a few massive-activation dimensions put most of the uncentred energy in the
  mean direction, which says nothing about how many directions the tokens vary in;
- the first position of every window excluded: it is the attention sink, whose hidden states
  are orders of magnitude larger than the rest;
- at least ``MIN_TOKENS_PER_DIM`` · d = 10·d tokens, so a d×d covariance is estimated from
  more samples than it has entries per row by an order of magnitude (runs with fewer carry
  ``enough_tokens = False``);
- entropy rank rather than a PCA count: it uses the whole spectrum, has no threshold, and moves
  continuously (a pca99 count jumps by whole dimensions).

Its interval is a delete-one-window jackknife (normal 95%): each window's tokens are
left out in turn and the statistic recomputed. The older statistics (pca99, pca90, erank and
erank_sv of the uncentred Gram) stay as secondary columns.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

import torch
from torch import nn

from core.errors import ConfigError
from core.machine.device import single_thread
from core.methods.slicegpt import as_adapter

PRIMARY = "erank_c"
MIN_TOKENS_PER_DIM = 10
SKIP_POSITIONS = 1  # the attention-sink position at the start of each window
ENERGY_LEVELS = {"pca99": 0.99, "pca90": 0.90}
SECONDARY = ("pca99", "pca90", "erank", "erank_sv")
Z95 = 1.959963984540054


def windows_needed(width: int, seqlen: int) -> int:
    """Evaluation windows of ``seqlen`` tokens that give at least 10·width usable tokens."""
    return math.ceil(MIN_TOKENS_PER_DIM * width / max(seqlen - SKIP_POSITIONS, 1))


def entropy_rank(weights: torch.Tensor) -> float:
    """exp(H(p)) with p = weights / Σ weights (zeros ignored)."""
    p = weights / weights.sum()
    p = p[p > 0]
    return math.exp(-(p * p.log()).sum().item())


def _spectrum(matrix: torch.Tensor) -> torch.Tensor:
    """Descending eigenvalues of a symmetric PSD matrix, those under the float64 rounding floor
    of the largest set to 0 (numerical rank)."""
    # One LAPACK thread: with two on the loaded 2-core machine a 576 × 576 eigvalsh took
    # 3.8 s instead of 0.08 s, and a run makes ~10 per layer and jackknife window.
    with single_thread(matrix.device):
        lam = torch.linalg.eigvalsh(matrix.to(torch.float64)).flip(0)
    floor = lam[0].clamp_min(0.0) * matrix.shape[0] * torch.finfo(torch.float64).eps
    return torch.where(lam > floor, lam, torch.zeros_like(lam))


def dims_from_gram(gram: torch.Tensor) -> dict[str, float]:
    """Secondary dimensions from an uncentred Gram matrix G = XᵀX (d, d).

    pcaXX: fewest principal components holding XX% of Σλ; erank: exp(H(p)), p = λ/Σλ;
    erank_sv: Roy & Vetterli's original effective rank, p = σ/Σσ; width: d.
    """
    lam = _spectrum(gram)
    total = lam.sum()
    out: dict[str, float] = {"width": float(gram.shape[0])}
    if total <= 0:
        return out | dict.fromkeys(SECONDARY, 0.0)
    cum = torch.cumsum(lam, 0) / total
    for key, level in ENERGY_LEVELS.items():
        # 1e-12 absorbs rounding in the cumulative sum at exact-rank data.
        target = torch.tensor(level - 1e-12, dtype=cum.dtype)
        out[key] = float(int(torch.searchsorted(cum, target)) + 1)
    out["erank"] = entropy_rank(lam)
    out["erank_sv"] = entropy_rank(lam.sqrt())
    return out


def centred_erank(s1: torch.Tensor, s2: torch.Tensor, n: int) -> float:
    """PRIMARY of n tokens from their sums: s1 = Σx (d,), s2 = Σ x xᵀ (d, d), float64."""
    if n < 2:
        return math.nan
    mean = s1 / n
    cov = (s2 - n * torch.outer(mean, mean)) / (n - 1)
    lam = _spectrum(cov)
    return entropy_rank(lam) if lam.sum() > 0 else 0.0


def effective_dims(hidden: torch.Tensor) -> dict[str, float]:
    """All dimensions of token representations ``hidden`` (T, d) or (..., d)."""
    flat = hidden.reshape(-1, hidden.shape[-1]).to(torch.float64)
    s2 = flat.T @ flat
    return dims_from_gram(s2) | {PRIMARY: centred_erank(flat.sum(0), s2, flat.shape[0])}


class _Sums:
    """Per-layer Σx and Σxxᵀ (float64) of layer outputs, first positions dropped."""

    def __init__(self) -> None:
        self.s1: dict[int, torch.Tensor] = {}
        self.s2: dict[int, torch.Tensor] = {}
        self.n: dict[int, int] = {}

    def hook(self, i: int):
        def fn(_m: nn.Module, _args: tuple, out: Any) -> None:
            h = out[0] if isinstance(out, tuple) else out  # (B, L, width)
            flat = h[:, SKIP_POSITIONS:].reshape(-1, h.shape[-1]).to(torch.float64)
            if i not in self.s1:
                width = flat.shape[1]
                self.s1[i] = torch.zeros(width, dtype=torch.float64, device=flat.device)
                self.s2[i] = torch.zeros(width, width, dtype=torch.float64, device=flat.device)
                self.n[i] = 0
            self.s1[i] += flat.sum(0)
            self.s2[i].addmm_(flat.T, flat)
            self.n[i] += flat.shape[0]

        return fn


def _run(adapter: Any, ids: torch.Tensor, chosen: list[int], device, batch_size: int) -> _Sums:
    sums = _Sums()
    handles = [adapter.layers[i].register_forward_hook(sums.hook(i)) for i in chosen]
    try:
        for start in range(0, ids.shape[0], batch_size):
            adapter.backbone(input_ids=ids[start : start + batch_size].to(device), use_cache=False)
    finally:
        for h in handles:
            h.remove()
    return sums


@torch.no_grad()
def collect_residual_dims(
    model: Any,
    ids: torch.Tensor,
    device: torch.device | str = "cpu",
    layers: str | Iterable[int] = "all",
    batch_size: int = 8,
) -> dict[str, Any]:
    """Effective dimensions of the residual stream after each decoder layer on held-out ids.

    ids: (N, L). Hooks accumulate Σx and XᵀX per layer (float64), so no activations are
    stored; a second pass, one window at a time, gives the jackknife replicates. The model
    must already be on ``device``. Returns {"rows": [{layer, width, erank_c, pca99, pca90,
    erank, erank_sv}], "overall": {"mean_<key>", "final_<key>", "mean_erank_c_lo/_hi",
    "n_tokens", "enough_tokens"}}. Works for sliced models (widths d′).
    """
    adapter = as_adapter(model)
    n_layers = adapter.n_layers
    if isinstance(layers, str) and layers != "all":
        raise ConfigError(f"layers must be 'all' or a list of layer indices, got {layers!r}")
    chosen = list(range(n_layers)) if isinstance(layers, str) else sorted({int(i) for i in layers})
    if not chosen or any(not 0 <= i < n_layers for i in chosen):
        raise ConfigError(f"layers must be 'all' or indices in [0, {n_layers}), got {layers!r}")
    if ids.shape[1] <= SKIP_POSITIONS:
        raise ConfigError(f"windows of {ids.shape[1]} tokens leave none after the first")
    device = torch.device(device)
    total = _run(adapter, ids, chosen, device, batch_size)
    rows = [
        {
            "layer": i,
            **dims_from_gram(total.s2[i]),
            PRIMARY: centred_erank(total.s1[i], total.s2[i], total.n[i]),
        }
        for i in chosen
    ]
    keys = (PRIMARY, *SECONDARY)
    overall = {f"mean_{k}": sum(r[k] for r in rows) / len(rows) for k in keys}
    overall |= {f"final_{k}": rows[-1][k] for k in keys}
    lo, hi = _jackknife(adapter, ids, chosen, device, total, overall[f"mean_{PRIMARY}"])
    n_tokens = total.n[chosen[0]]
    width = int(rows[0]["width"])
    overall |= {
        f"mean_{PRIMARY}_lo": lo,
        f"mean_{PRIMARY}_hi": hi,
        "n_tokens": n_tokens,
        "enough_tokens": n_tokens >= MIN_TOKENS_PER_DIM * width,
    }
    return {"rows": rows, "overall": overall}


def _jackknife(
    adapter: Any, ids: torch.Tensor, chosen: list[int], device, total: _Sums, estimate: float
) -> tuple[float, float]:
    """Normal 95% interval of the layer-mean PRIMARY from delete-one-window replicates:
    SE² = (n−1)/n · Σ (θ₋ᵢ − θ̄)²."""
    n = ids.shape[0]
    if n < 2:
        return math.nan, math.nan
    reps = []
    for w in range(n):
        part = _run(adapter, ids[w : w + 1], chosen, device, 1)
        vals = [
            centred_erank(
                total.s1[i] - part.s1[i], total.s2[i] - part.s2[i], total.n[i] - part.n[i]
            )
            for i in chosen
        ]
        reps.append(sum(vals) / len(vals))
    t = torch.tensor(reps, dtype=torch.float64)
    se = math.sqrt((n - 1) / n * float(((t - t.mean()) ** 2).sum()))
    return estimate - Z95 * se, estimate + Z95 * se
