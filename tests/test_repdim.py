"""Paper A relation (papers.md §2, §7) and effective residual dimensions."""

from __future__ import annotations

import math

import pytest
import torch

from core.analysis.relation import (
    collect_residual_dims,
    effective_dims,
    effective_relation,
    linear_fit,
    predicted_ppl,
    relation_fit,
)
from core.errors import ConfigError
from core.methods.slicegpt import slice_model
from core.models.load import build_tiny_model


def random_ids(n: int, length: int, seed: int) -> torch.Tensor:
    return torch.randint(0, 256, (n, length), generator=torch.Generator().manual_seed(seed))


def orthonormal(rows: int, cols: int, seed: int) -> torch.Tensor:
    G = torch.randn(rows, cols, dtype=torch.float64, generator=torch.Generator().manual_seed(seed))
    return torch.linalg.qr(G).Q  # (rows, cols)


# ---- relation (A1) -------------------------------------------------------------------------------
def test_predicted_ppl() -> None:
    assert predicted_ppl(7.5, 0.0) == 7.5
    assert predicted_ppl(math.e, 0.5) == pytest.approx(math.e**2, rel=1e-12)
    with pytest.raises(ConfigError):
        predicted_ppl(7.5, 1.0)


def test_relation_fit_recovers_line_exactly() -> None:
    ppl0, a, b = 6.0, 0.8, 0.15
    s_values = [0.1, 0.2, 0.25, 0.3, 0.5]
    ppl = [math.exp(math.log(ppl0) / (a * (1 - s) + b)) for s in s_values]
    fit = relation_fit(s_values, ppl, ppl0, d=4096)
    assert fit["a"] == pytest.approx(a, abs=1e-10) and fit["b"] == pytest.approx(b, abs=1e-10)
    assert fit["r2"] == pytest.approx(1.0, abs=1e-12)
    row = fit["rows"][3]  # s = 0.3 on d = 4096: d' = 2864 (papers.md §2)
    assert row["d_sliced"] == 2864 and row["s_eff"] == pytest.approx(1 - 2864 / 4096)
    assert row["predicted"] == pytest.approx(predicted_ppl(ppl0, 0.3))
    assert row["rel_error"] == pytest.approx((row["predicted"] - row["measured"]) / row["measured"])
    assert all(r["rel_error_fit"] == pytest.approx(0.0, abs=1e-10) for r in fit["rows"])


def test_relation_fit_on_exact_a1_data_and_effective_sparsity() -> None:
    s_values = [0.0, 0.3, 0.5]
    ppl = [predicted_ppl(5.0, s) for s in s_values]
    fit = relation_fit(s_values, ppl, 5.0)
    assert (fit["a"], fit["b"]) == (pytest.approx(1.0), pytest.approx(0.0, abs=1e-12))
    assert all(r["rel_error"] == pytest.approx(0.0, abs=1e-12) for r in fit["rows"])
    assert fit["rows"][1]["d_sliced"] is None and fit["rows"][1]["s_eff"] == 0.3
    eff = relation_fit(s_values, ppl, 5.0, d=4096, use_effective=True)
    assert eff["a"] != pytest.approx(1.0, abs=1e-6)  # s_eff(0.3) = 0.3008 ≠ 0.3


def test_relation_fit_edge_cases() -> None:
    one = relation_fit([0.25], [9.0], 5.0)
    assert math.isnan(one["a"]) and len(one["rows"]) == 1
    with pytest.raises(ConfigError):
        relation_fit([0.1, 0.2], [9.0], 5.0)
    with pytest.raises(ConfigError):
        relation_fit([0.1], [9.0], 1.0)  # ln PPL0 = 0
    with pytest.raises(ConfigError):
        relation_fit([0.1], [9.0], 5.0, use_effective=True)


def test_linear_fit() -> None:
    a, b, r2 = linear_fit([0, 1, 2, 3], [1, 3, 5, 7])
    assert (a, b, r2) == (pytest.approx(2.0), pytest.approx(1.0), pytest.approx(1.0))


# ---- effective dimension -------------------------------------------------------------------------
def test_effective_dims_of_equal_energy_rank_r() -> None:
    r, d, T = 10, 32, 200
    X = orthonormal(T, r, 0) @ orthonormal(d, r, 1).T  # (T, d), r singular values all 1
    dims = effective_dims(X)
    assert dims["width"] == d
    assert dims["pca99"] == r and dims["pca90"] == 9
    assert dims["erank"] == pytest.approx(r, rel=1e-9)
    assert dims["erank_sv"] == pytest.approx(r, rel=1e-9)


def test_effective_dims_of_skewed_spectrum() -> None:
    sigma = torch.tensor([10.0, 1.0, 1.0, 0.0], dtype=torch.float64)
    X = orthonormal(50, 4, 0) @ torch.diag(sigma) @ orthonormal(4, 4, 1).T
    dims = effective_dims(X.reshape(5, 10, 4))  # any leading shape
    assert dims["pca90"] == 1 and dims["pca99"] == 2  # energies 100/102, 101/102
    p = torch.tensor([100.0, 1.0, 1.0], dtype=torch.float64) / 102
    assert dims["erank"] == pytest.approx(math.exp(-(p * p.log()).sum().item()), rel=1e-9)
    assert 1.0 < dims["erank"] < dims["erank_sv"] < 3.0


def test_effective_dims_of_zero_data() -> None:
    assert effective_dims(torch.zeros(5, 4))["pca99"] == 0.0


def test_collect_residual_dims_dense_and_sliced() -> None:
    model = build_tiny_model("tiny-llama", seed=1).eval()
    ids = random_ids(4, 32, seed=5)
    dense = collect_residual_dims(model, ids, layers="all", batch_size=2)
    assert [r["layer"] for r in dense["rows"]] == [0, 1, 2, 3]
    assert all(r["width"] == 64 and 1 <= r["pca99"] <= 64 for r in dense["rows"])
    assert dense["overall"]["final_pca99"] == dense["rows"][-1]["pca99"]
    assert dense["overall"]["mean_erank"] == pytest.approx(
        sum(r["erank"] for r in dense["rows"]) / 4
    )
    slice_model(model, random_ids(8, 32, seed=1), 0.5)
    sliced = collect_residual_dims(model, ids, layers=[0, 3])
    assert [r["width"] for r in sliced["rows"]] == [32, 64]  # the unsliced head's input is d
    assert sliced["rows"][0]["pca99"] <= 32
    with pytest.raises(ConfigError):
        collect_residual_dims(model, ids, layers=[7])


def test_effective_relation() -> None:
    ppl0, d = 6.0, 400.0
    runs = [
        {"method": "slicegpt", "s": s, "d_eff": d * (1 - s), "ppl": predicted_ppl(ppl0, s)}
        for s in (0.1, 0.3, 0.5)
    ]
    runs.append({"method": "wanda", "d_eff": 350.0, "ppl": 9.0})
    out = effective_relation(ppl0, d, runs)
    assert all(r["rel_error"] == pytest.approx(0.0, abs=1e-12) for r in out["rows"][:3])
    wanda = out["rows"][3]
    assert wanda["method"] == "wanda" and wanda["predicted"] == pytest.approx(ppl0 ** (400 / 350))
    assert out["mean_abs_rel_error"] == pytest.approx(abs(wanda["rel_error"]) / 4)
    with pytest.raises(ConfigError):
        effective_relation(ppl0, d, [{"ppl": 9.0}])
