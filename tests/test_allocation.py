"""OWL / uniform per-layer sparsity allocation (papers.md §7)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from core.errors import ConfigError
from core.pruning.allocation import layer_outlier_ratio, owl_allocation, uniform_allocation

RATIOS = [0.010, 0.050, 0.020, 0.030, 0.012, 0.041]


def weighted_mean(values: list[float], weights: list[float] | None = None) -> float:
    return float(np.average(values, weights=weights))


def test_uniform() -> None:
    assert uniform_allocation(3, 0.5) == [0.5, 0.5, 0.5]
    with pytest.raises(ConfigError):
        uniform_allocation(3, 1.0)


def test_owl_matches_reference_formula_with_equal_weights() -> None:
    lam, target = 0.08, 0.7
    out = owl_allocation(RATIOS, target, lam)
    r = np.array(RATIOS)
    a = (r - r.min()) / (r.max() - r.min()) * lam * 2  # luuyin/OWL, as density offsets
    np.testing.assert_allclose(out, target - (a - a.mean()), rtol=0, atol=1e-12)
    assert abs(weighted_mean(out) - target) < 1e-9
    assert max(out) - min(out) == pytest.approx(2 * lam)


def test_owl_more_outliers_lower_sparsity() -> None:
    out = owl_allocation(RATIOS, 0.5)
    order_ratio = np.argsort(RATIOS)
    assert list(np.argsort(out)) == list(order_ratio[::-1])


def test_owl_weighted_mean_exact() -> None:
    params = [3e6, 1e6, 2e6, 5e6, 1e6, 4e6]
    out = owl_allocation(RATIOS, 0.6, 0.1, layer_params=params)
    assert abs(weighted_mean(out, params) - 0.6) < 1e-9
    assert out[1] < out[3] < out[2] < out[0]  # ranking by outlier ratio survives the shift


@pytest.mark.parametrize("target", [0.03, 0.95])
def test_owl_clipping_keeps_the_mean(target: float) -> None:
    params = [1.0, 2.0, 1.0, 1.0, 3.0, 1.0]
    out = owl_allocation(RATIOS, target, 0.08, layer_params=params, max_sparsity=0.99)
    assert all(0.0 <= s <= 0.99 for s in out)
    assert min(out) == 0.0 or max(out) == 0.99  # clipping did happen
    assert abs(weighted_mean(out, params) - target) < 1e-9


def test_owl_equal_ratios_is_uniform() -> None:
    assert owl_allocation([0.02] * 4, 0.5) == pytest.approx([0.5] * 4, abs=1e-15)


def test_owl_rejects_bad_inputs() -> None:
    with pytest.raises(ConfigError):
        owl_allocation(RATIOS, 1.0)
    with pytest.raises(ConfigError):
        owl_allocation(RATIOS, -0.1)
    with pytest.raises(ConfigError):
        owl_allocation(RATIOS, 0.5, lam=-0.1)
    with pytest.raises(ConfigError):
        owl_allocation(RATIOS, 0.5, layer_params=[1.0, 2.0])
    with pytest.raises(ConfigError):
        owl_allocation(RATIOS, 0.995)  # above max_sparsity
    with pytest.raises(ConfigError):
        owl_allocation([0.1, float("nan")], 0.5)


def test_layer_outlier_ratio_by_hand() -> None:
    scores = torch.ones(100)
    scores[0] = 100.0  # mean = 1.99, threshold 5·1.99 = 9.95: one outlier of 100
    assert layer_outlier_ratio([scores.reshape(10, 10)], M=5.0) == pytest.approx(0.01)
    # Pooled over the layer's linears: splitting the scores changes nothing.
    assert layer_outlier_ratio([scores[:30].reshape(3, 10), scores[30:].reshape(7, 10)]) == (
        pytest.approx(0.01)
    )
    assert layer_outlier_ratio([scores], M=200.0) == 0.0
    with pytest.raises(ConfigError):
        layer_outlier_ratio([])
