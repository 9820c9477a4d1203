"""Magnitude, Wanda and SparseGPT on hand-sized layers: the invariants of papers.md §7."""

from __future__ import annotations

import logging

import pytest
import torch
from torch import nn

from core.errors import ConfigError, NumericalError
from core.methods import get_method
from core.methods.base import LayerContext, LinearStats
from core.methods.linear import relative_reconstruction_error
from core.methods.magnitude import Magnitude, MagnitudeOptions
from core.methods.masks import prune_count, score_mask
from core.methods.sparsegpt import SparseGPT, SparseGPTOptions, sparsegpt_prune
from core.methods.wanda import Wanda, WandaOptions, wanda_scores


def make_problem(seed: int, out: int = 64, d_in: int = 128, tokens: int = 512):
    """W (out, in) and X (tokens, in): correlated features plus a few outlier columns."""
    g = torch.Generator().manual_seed(seed)
    W = torch.randn(out, d_in, generator=g)
    X = torch.randn(tokens, 32, generator=g) @ torch.randn(32, d_in, generator=g)
    X += 0.3 * torch.randn(tokens, d_in, generator=g)
    X[:, torch.randperm(d_in, generator=g)[:4]] *= 10.0  # outlier features, as in LLMs
    return W, X


def quantised(W: torch.Tensor) -> torch.Tensor:
    """W rounded to 16 levels, so |W| ties a lot (like 4-bit dequantised weights)."""
    scale = W.abs().max() / 7
    return (W / scale).round().clamp(-8, 7) * scale


def error(W: torch.Tensor, W_new: torch.Tensor, X: torch.Tensor) -> float:
    return relative_reconstruction_error(W, W_new, X.T @ X)


def context(
    linears: dict[str, nn.Linear], X: torch.Tensor, sparsity: dict[str, float], pattern: str
) -> LayerContext:
    gram = X.T @ X  # one shared Gram, as the runner gives q/k/v
    stats = LinearStats(gram, n_tokens=X.shape[0])
    return LayerContext(
        index=0,
        n_layers=1,
        layer=nn.ModuleDict(linears),
        adapter=None,
        linears=linears,
        stats={role: stats for role in linears},
        inputs={},
        sparsity=sparsity,
        pattern=pattern,
        device=torch.device("cpu"),
    )


def make_linears(W: torch.Tensor, dtype: torch.dtype, roles=("q", "k")) -> dict[str, nn.Linear]:
    linears = {}
    for role in roles:
        lin = nn.Linear(W.shape[1], W.shape[0], bias=False).to(dtype)
        with torch.no_grad():
            lin.weight.copy_(W)
        linears[role] = lin
    return linears


METHODS = [
    Magnitude(MagnitudeOptions()),
    Magnitude(MagnitudeOptions(scope="row")),
    Wanda(WandaOptions()),
    SparseGPT(SparseGPTOptions(blocksize=32)),
]


# --- Magnitude ---------------------------------------------------------------------------


def test_magnitude_matrix_scope_exact_count_with_ties() -> None:
    W = quantised(make_problem(0)[0])
    mask = score_mask(W.abs(), 0.5, "matrix")
    assert mask.sum().item() == prune_count(W.numel(), 0.5)
    assert W.abs()[mask].max() <= W.abs()[~mask].min()  # kept = top-k by |W|


def test_magnitude_row_scope_and_nm() -> None:
    W = quantised(make_problem(1)[0])
    per_row = score_mask(W.abs(), 0.3, "row").sum(1)
    assert per_row.sum() == prune_count(64 * 128, 0.3)
    assert set(per_row.tolist()) <= {prune_count(128, 0.3), prune_count(128, 0.3) + 1}
    nm = score_mask(W.abs(), 0.5, "matrix", (2, 4)).reshape(64, 32, 4)
    assert (nm.sum(-1) == 2).all()


def test_magnitude_options_validated() -> None:
    with pytest.raises(ConfigError):
        MagnitudeOptions(scope="column")
    with pytest.raises(ConfigError):
        WandaOptions(scope="column")


# --- Wanda -------------------------------------------------------------------------------


def test_wanda_scores_formula() -> None:
    W = torch.tensor([[1.0, -2.0], [-3.0, 0.5]])
    scores = wanda_scores(W, torch.tensor([4.0, 9.0]))
    assert torch.equal(scores, torch.tensor([[2.0, 6.0], [6.0, 1.5]], dtype=torch.float64))


def test_wanda_ranks_scores_a_float32_product_would_tie() -> None:
    """|W|·‖X_j‖ in float64: (1+2⁻²³)·(1+2⁻²³) = 1+2⁻²²+2⁻⁴⁶ beats (1+2⁻²²)·1, so the second
    weight goes. Negative control: the float32 product rounds both to 1+2⁻²², and the tie
    rule would then prune the first (lower index) instead."""
    e = 2.0**-23
    W = torch.tensor([[1 + e, 1 + 2 * e]], dtype=torch.float32)
    sq_norms = torch.tensor([(1 + e) ** 2, 1.0], dtype=torch.float64)  # exact in float64
    scores = wanda_scores(W, sq_norms)
    assert scores.dtype == torch.float64
    assert score_mask(scores, 0.5, "row").tolist() == [[False, True]]
    float32_scores = W.abs() * sq_norms.float().sqrt()
    assert float32_scores[0, 0] == float32_scores[0, 1]
    assert score_mask(float32_scores, 0.5, "row").tolist() == [[True, False]]


@pytest.mark.parametrize("sparsity", [0.5, 0.3, 0.77])
def test_wanda_exact_row_sparsity_with_ties(sparsity: float) -> None:
    W = quantised(make_problem(2)[0])
    norms = torch.ones(128)
    norms[:64] = 4.0  # two activation levels: scores tie within and across them
    per_row = score_mask(wanda_scores(W, norms), sparsity, "row").sum(dim=1)
    # every row prunes ⌊p·in⌋ (+1 for some rows when p·in is fractional): exact matrix total
    assert per_row.sum() == prune_count(64 * 128, sparsity)
    assert set(per_row.tolist()) <= {prune_count(128, sparsity), prune_count(128, sparsity) + 1}
    if sparsity == 0.5:
        assert (per_row == 64).all()


@pytest.mark.parametrize(("n", "m"), [(2, 4), (4, 8), (1, 3)])
def test_wanda_exact_nm(n: int, m: int) -> None:
    W, X = make_problem(3, d_in=96)
    mask = score_mask(wanda_scores(W, (X.T @ X).diagonal()), 0.5, "row", (n, m))
    assert (mask.reshape(64, 96 // m, m).sum(-1) == n).all()


def test_wanda_scaling_inputs_keeps_mask() -> None:
    W, X = make_problem(4)
    base = score_mask(wanda_scores(W, (X * X).sum(0)), 0.5, "row")
    for c in (0.01, 3.0, 250.0):
        assert torch.equal(score_mask(wanda_scores(W, ((c * X) ** 2).sum(0)), 0.5, "row"), base)


def test_wanda_equal_norms_is_row_magnitude() -> None:
    W = quantised(make_problem(5)[0])
    for norm_sq in (1.0, 16.0, 7.3):
        mask = score_mask(wanda_scores(W, torch.full((128,), norm_sq)), 0.5, "row")
        assert torch.equal(mask, score_mask(W.abs(), 0.5, "row"))


def test_wanda_beats_magnitude_on_outlier_features() -> None:
    for seed in range(3):
        W, X = make_problem(seed)
        wanda = W.masked_fill(score_mask(wanda_scores(W, (X * X).sum(0)), 0.5, "row"), 0.0)
        magnitude = W.masked_fill(score_mask(W.abs(), 0.5, "matrix"), 0.0)
        assert error(W, wanda, X) < 0.8 * error(W, magnitude, X)


# --- SparseGPT ---------------------------------------------------------------------------


def hessian(X: torch.Tensor) -> torch.Tensor:
    return 2 * X.T @ X / X.shape[0]


@pytest.mark.parametrize(("sparsity", "blocksize"), [(0.5, 128), (0.3, 48), (0.77, 7)])
def test_sparsegpt_exact_total_sparsity(sparsity: float, blocksize: int) -> None:
    W, X = make_problem(6)
    H = hessian(X)
    W_new, mask, _ = sparsegpt_prune(W, H, sparsity, blocksize=blocksize, selection="exact")
    k = prune_count(W.numel(), sparsity)
    assert mask.sum().item() == k
    assert (W_new == 0).sum().item() == k
    assert (W_new[mask] == 0).all()
    # the reference's rule (default): ⌊p·rows·B⌋+1 per block of B columns, no ties here
    _, mask, _ = sparsegpt_prune(W, H, sparsity, blocksize=blocksize)
    blocks = [min(blocksize, W.shape[1] - i) for i in range(0, W.shape[1], blocksize)]
    assert mask.sum().item() == sum(prune_count(W.shape[0] * b, sparsity) + 1 for b in blocks)


@pytest.mark.parametrize(("n", "m", "blocksize"), [(2, 4, 128), (4, 8, 32), (2, 4, 6)])
def test_sparsegpt_exact_nm(n: int, m: int, blocksize: int) -> None:
    W, X = make_problem(7)
    W_new, mask, info = sparsegpt_prune(W, hessian(X), 0.5, nm=(n, m), blocksize=blocksize)
    assert info["blocksize"] % m == 0
    assert ((W_new == 0).reshape(64, 128 // m, m).sum(-1) == n).all()
    assert torch.equal(W_new == 0, mask)


def test_sparsegpt_beats_wanda_and_magnitude() -> None:
    for seed in range(3):
        W, X = make_problem(seed)
        sgpt = sparsegpt_prune(W, hessian(X), 0.5)[0]
        wanda = W.masked_fill(score_mask(wanda_scores(W, (X * X).sum(0)), 0.5, "row"), 0.0)
        magnitude = W.masked_fill(score_mask(W.abs(), 0.5, "matrix"), 0.0)
        assert error(W, sgpt, X) < 0.8 * error(W, wanda, X)
        assert error(W, sgpt, X) < 0.5 * error(W, magnitude, X)


def test_sparsegpt_sweep_matches_plain_obs() -> None:
    """Blocked lazy updates equal the textbook column-by-column OBS on the same mask."""
    W, X = make_problem(8, out=8, d_in=24, tokens=96)
    H = hessian(X)
    W_new, mask, info = sparsegpt_prune(W, H, 0.5, blocksize=5)
    Hd = H.double()
    Hd.diagonal().add_(info["percdamp"] * Hd.diagonal().mean())
    w = W.double()
    for j in range(24):
        Hinv = torch.linalg.inv(Hd[j:, j:])  # inverse Hessian of the columns still free
        q = w[:, j].masked_fill(mask[:, j], 0.0)
        w[:, j:] -= torch.outer((w[:, j] - q) / Hinv[0, 0], Hinv[0])
        w[:, j] = q
    torch.testing.assert_close(W_new, w.float(), rtol=1e-5, atol=1e-5)


def test_sparsegpt_leaves_inputs_alone_and_zero_sparsity_is_identity() -> None:
    W, X = make_problem(9)
    H = hessian(X)
    W0, H0 = W.clone(), H.clone()
    W_new, mask, _ = sparsegpt_prune(W, H, 0.0)
    assert torch.equal(W_new, W) and not mask.any()
    sparsegpt_prune(W, H, 0.5)
    assert torch.equal(W, W0) and torch.equal(H, H0)


def test_sparsegpt_dead_columns_zeroed() -> None:
    W, X = make_problem(10)
    X[:, [3, 50, 51]] = 0.0
    W_new, mask, info = sparsegpt_prune(W, hessian(X), 0.5)
    assert info["dead_columns"] == 3
    assert (W_new[:, [3, 50, 51]] == 0).all() and mask[:, [3, 50, 51]].all()
    # dead weights (score 0) go first; the reference rule prunes one more in the single block
    assert (W_new == 0).sum().item() == prune_count(W.numel(), 0.5) + 1


def test_sparsegpt_raises_damping_when_not_pd(caplog: pytest.LogCaptureFixture) -> None:
    g = torch.Generator().manual_seed(11)
    X = torch.randn(8, 64, generator=g) * 100  # 8 tokens: a rank-8 Gram for 64 inputs
    W = torch.randn(16, 64, generator=g)
    with caplog.at_level(logging.WARNING, logger="core.methods.sparsegpt"):
        W_new, _, info = sparsegpt_prune(W, hessian(X), 0.5, percdamp=1e-9)
    assert info["damp_increases"] > 0
    assert info["percdamp"] == pytest.approx(1e-9 * 10 ** info["damp_increases"])
    assert "raising the damping" in caplog.text
    assert torch.isfinite(W_new).all()


@pytest.mark.parametrize("kind", ["indefinite", "nan"])
def test_sparsegpt_unfixable_hessian_raises(kind: str) -> None:
    H = torch.eye(32)
    if kind == "indefinite":  # eigenvalue -19, beyond what damping up to mean(diag H) can repair
        v = torch.ones(32) / 32**0.5
        H -= 20 * torch.outer(v, v)
    else:
        H[0, 1] = H[1, 0] = float("nan")
    with pytest.raises(NumericalError, match="not positive definite"):
        sparsegpt_prune(torch.randn(4, 32), H, 0.5, percdamp=1e-4)


def test_sparsegpt_options_validated() -> None:
    for bad in ({"percdamp": 0.0}, {"percdamp": -1.0}, {"blocksize": 0}, {"blocksize": 2.5}):
        with pytest.raises(ConfigError):
            SparseGPTOptions(**bad)


# --- The shared driver: prune_layer ------------------------------------------------------


@pytest.mark.parametrize("method", METHODS, ids=lambda m: f"{m.name}-{m.options}")
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_zero_sparsity_is_bit_identical(method, dtype: torch.dtype) -> None:
    W, X = make_problem(12)
    linears = make_linears(W, dtype)
    before = {r: lin.weight.detach().clone() for r, lin in linears.items()}
    for pattern in ("unstructured", "2:4"):
        reports = method.prune_layer(context(linears, X, {"q": 0.0, "k": 0.0}, pattern))
        assert [r.rel_error for r in reports] == [0.0, 0.0]
        for role, lin in linears.items():
            assert torch.equal(lin.weight, before[role])


@pytest.mark.parametrize("method", METHODS, ids=lambda m: f"{m.name}-{m.options}")
def test_prune_layer_writes_back_and_reports(method) -> None:
    W, X = make_problem(13)
    linears = make_linears(W, torch.float16, roles=("q", "k", "v"))
    ctx = context(linears, X, {"q": 0.5, "k": 0.25}, "unstructured")
    gram_before = ctx.stats["q"].gram.clone()
    reports = method.prune_layer(ctx)
    assert [r.role for r in reports] == ["q", "k"]
    assert torch.equal(ctx.stats["q"].gram, gram_before)  # the shared Gram is not touched
    assert torch.equal(linears["v"].weight, W.half())  # not in ctx.sparsity: untouched
    for rep in reports:
        weight = linears[rep.role].weight
        assert weight.dtype == torch.float16 and rep.shape == (64, 128)
        assert rep.achieved_sparsity == pytest.approx(rep.target_sparsity, abs=1 / 128)
        assert rep.achieved_sparsity == (weight == 0).float().mean().item()
        assert rep.extra["pruned"] == (weight == 0).sum().item()
        direct = torch.linalg.norm((W.half().float() - weight.float()) @ X.T)
        direct /= torch.linalg.norm(W.half().float() @ X.T)
        assert rep.rel_error == pytest.approx(direct.item(), rel=1e-3)
        assert 0 < rep.rel_error < 1 and rep.seconds >= 0
        if method.name != "sparsegpt":  # no update: kept weights are bit-identical
            kept = weight != 0
            assert torch.equal(weight[kept], W.half()[kept])


@pytest.mark.parametrize("method", METHODS, ids=lambda m: f"{m.name}-{m.options}")
def test_prune_layer_nm_pattern(method) -> None:
    W, X = make_problem(14)
    linears = make_linears(W, torch.float32, roles=("q",))
    (rep,) = method.prune_layer(context(linears, X, {"q": 0.7}, "4:8"))
    assert rep.target_sparsity == 0.5  # N:M decides
    assert ((linears["q"].weight == 0).reshape(64, 16, 8).sum(-1) == 4).all()


@pytest.mark.parametrize(
    ("sparsity", "pattern", "width"),
    [(1.0, "unstructured", 8), (-0.1, "unstructured", 8), (0.5, "4:2", 8), (0.5, "2:3", 8)],
)
def test_prune_layer_rejects_bad_config(sparsity: float, pattern: str, width: int) -> None:
    W, X = make_problem(15, out=4, d_in=width, tokens=16)
    linears = make_linears(W, torch.float32, roles=("q",))
    for method in METHODS:
        with pytest.raises(ConfigError):
            method.prune_layer(context(linears, X, {"q": sparsity}, pattern))


def test_registry() -> None:
    assert get_method("magnitude") is Magnitude
    assert get_method("wanda") is Wanda
    assert get_method("SparseGPT") is SparseGPT


def test_relative_error_from_gram_matches_direct() -> None:
    W, X = make_problem(16)
    W_new = W.masked_fill(score_mask(W.abs(), 0.5, "matrix"), 0.0)
    direct = torch.linalg.norm((W - W_new) @ X.T) / torch.linalg.norm(W @ X.T)
    assert relative_reconstruction_error(W, W_new, X.T @ X) == pytest.approx(direct.item(), 1e-4)
    assert relative_reconstruction_error(W, W, X.T @ X) == 0.0


def test_sparsegpt_rejects_unusable_diagonal() -> None:
    with pytest.raises(NumericalError, match="diagonal"):
        sparsegpt_prune(torch.randn(4, 32), -torch.eye(32), 0.5)
