"""The pre-registered effective dimension (core.analysis.effdim): centred covariance, attention-sink
position excluded, jackknife interval over windows."""

from __future__ import annotations

import math

import pytest
import torch

from core.analysis.effdim import (
    PRIMARY,
    centred_erank,
    collect_residual_dims,
    effective_dims,
    windows_needed,
)
from core.models.load import build_tiny_model


def orthonormal(rows: int, cols: int, seed: int) -> torch.Tensor:
    G = torch.randn(rows, cols, dtype=torch.float64, generator=torch.Generator().manual_seed(seed))
    return torch.linalg.qr(G).Q


def test_centring_removes_a_massive_mean_direction() -> None:
    # Rank-8 isotropic variation around a mean 1000x larger along one axis: the uncentred
    # energy sees one direction, the centred covariance sees the 8 the tokens vary in.
    r, d, T = 8, 32, 4000
    g = torch.Generator().manual_seed(0)
    X = torch.randn(T, r, dtype=torch.float64, generator=g) @ orthonormal(d, r, 1).T
    X[:, 0] += 1000.0
    dims = effective_dims(X)
    assert dims["erank"] < 1.1
    assert dims[PRIMARY] == pytest.approx(r, rel=0.05)


def test_centred_erank_from_sums_matches_direct() -> None:
    X = torch.randn(300, 6, dtype=torch.float64, generator=torch.Generator().manual_seed(2))
    direct = effective_dims(X)[PRIMARY]
    assert centred_erank(X.sum(0), X.T @ X, 300) == pytest.approx(direct, rel=1e-10)
    assert math.isnan(centred_erank(X[0], torch.outer(X[0], X[0]), 1))


def test_windows_needed_gives_ten_tokens_per_dimension() -> None:
    assert windows_needed(576, 512) == 12  # 12 × 511 = 6132 >= 5760
    assert windows_needed(64, 33) == 20


def test_primary_skips_the_first_position_and_has_an_interval() -> None:
    model = build_tiny_model("tiny-llama", seed=1).eval()
    ids = torch.randint(0, 256, (6, 24), generator=torch.Generator().manual_seed(5))
    res = collect_residual_dims(model, ids, batch_size=4)
    with torch.no_grad():
        hidden = model(input_ids=ids, output_hidden_states=True).hidden_states
    # hidden_states[i + 1] is layer i's output (the last one is after the final norm).
    for i in range(model.config.num_hidden_layers - 1):
        expected = effective_dims(hidden[i + 1][:, 1:])[PRIMARY]
        assert res["rows"][i][PRIMARY] == pytest.approx(expected, rel=1e-8)
    ov = res["overall"]
    assert ov[f"mean_{PRIMARY}_lo"] < ov[f"mean_{PRIMARY}"] < ov[f"mean_{PRIMARY}_hi"]
    assert ov["n_tokens"] == 6 * 23
    assert ov["enough_tokens"] is False  # 138 tokens < 10 · 64
