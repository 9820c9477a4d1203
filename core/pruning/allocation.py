"""Per-layer sparsity allocation: uniform, or OWL (Yin et al., "Outlier Weighed Layerwise
Sparsity (OWL)", arXiv 2310.05175; luuyin/OWL).

OWL measures each decoder layer's outlier ratio D_l, the fraction of its Wanda scores
|W_ij|·‖X_j‖₂ above M times their mean (the paper's layerwise outlier distribution, LOD),
and gives layers with more outliers lower sparsity: the ratios are min-max scaled to
[0, 2λ] and subtracted from the target, so the sparsities span target ± λ.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import torch

from core.errors import ConfigError
from core.methods.masks import check_sparsity


def uniform_allocation(n_layers: int, target: float) -> list[float]:
    """Every layer at the target sparsity."""
    if n_layers < 0:
        raise ConfigError(f"n_layers must be >= 0, got {n_layers}")
    return [check_sparsity(target)] * n_layers


def layer_outlier_ratio(scores_list: Sequence[torch.Tensor], M: float = 5.0) -> float:
    """Fraction of a layer's scores above M × their mean, pooled over all its linears.

    scores_list: one Wanda score tensor (out, in) per linear of the layer. M: OWL's outlier
    threshold (the reference's ``Hyper_m``; 5 in its LLaMA-7B script). The reference reports
    a percentage; this is the same number / 100, which ``owl_allocation``'s min-max scaling
    ignores.
    """
    total = sum(s.numel() for s in scores_list)
    if total == 0:
        raise ConfigError("layer_outlier_ratio needs at least one non-empty score tensor")
    # Sums per tensor in float64: no concatenated copy of the layer and no float32 drift.
    mean = sum(s.sum(dtype=torch.float64).item() for s in scores_list) / total
    above = sum(int((s > M * mean).sum().item()) for s in scores_list)
    return above / total


def owl_allocation(
    outlier_ratios: Sequence[float],
    target: float,
    lam: float = 0.08,
    layer_params: Sequence[float] | None = None,
    max_sparsity: float = 0.99,
) -> list[float]:
    """OWL per-layer sparsities: more outliers -> lower sparsity, weighted mean = target.

    As in the reference, s_l = target − (a_l − ā) with a_l = 2λ·(D_l − min D)/(max D − min D)
    (all layers at the target when every D_l is equal). Here ā is the mean weighted by
    ``layer_params`` (the parameter count of each layer; equal weights by default, which is
    the reference), so the model-wide sparsity is exactly the target. Values are then
    confined to [0, max_sparsity]; when that clips a layer, one common shift is re-solved so
    that the weighted mean still equals the target.
    """
    target = check_sparsity(target)
    ratios = np.asarray(outlier_ratios, dtype=np.float64)
    if ratios.ndim != 1 or not np.isfinite(ratios).all():
        raise ConfigError("outlier_ratios must be a finite 1-D sequence")
    if not (math.isfinite(lam) and lam >= 0):
        raise ConfigError(f"lam must be >= 0, got {lam}")
    if not target <= check_sparsity(max_sparsity):
        raise ConfigError(f"target sparsity {target} is above max_sparsity {max_sparsity}")
    if layer_params is None:
        weights = np.ones_like(ratios)
    else:
        weights = np.asarray(layer_params, dtype=np.float64)
        if weights.shape != ratios.shape or not (
            np.isfinite(weights).all() and (weights > 0).all()
        ):
            raise ConfigError("layer_params must give a positive count for every layer")
    if ratios.size == 0:
        return []
    span = ratios.max() - ratios.min()
    spread = 2 * lam * (ratios - ratios.min()) / span if span > 0 else np.zeros_like(ratios)
    return _shift_to_mean(-spread, weights, target, 0.0, max_sparsity).tolist()


def _shift_to_mean(
    base: np.ndarray, weights: np.ndarray, target: float, lo: float, hi: float
) -> np.ndarray:
    """clip(base + c, lo, hi) with the one shift c that makes its weighted mean ``target``.

    f(c) = Σ w·clip(b + c) is non-decreasing and piecewise linear with kinks at lo − b and
    hi − b, going from lo·Σw to hi·Σw; find the linear piece holding target·Σw and solve it.
    """
    goal = target * weights.sum()

    def f(c: float) -> float:
        return float((weights * np.clip(base + c, lo, hi)).sum())

    kinks = np.unique(np.concatenate([lo - base, hi - base]))  # sorted
    values = np.array([f(c) for c in kinks])
    j = min(int(np.searchsorted(values, goal)), len(kinks) - 1)  # first kink with f >= goal
    if j == 0 or values[j] == values[j - 1]:
        shift = kinks[j]
    else:  # f is linear on [kinks[j-1], kinks[j]]
        slope = (values[j] - values[j - 1]) / (kinks[j] - kinks[j - 1])
        shift = kinks[j - 1] + (goal - values[j - 1]) / slope
    return np.clip(base + shift, lo, hi)
