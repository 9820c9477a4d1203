"""Paper B's attention-mask GD (core.evaluation.attention_ops, core.methods.attention_gd): papers.md
§3, §7."""

from __future__ import annotations

import itertools
import math
from types import SimpleNamespace

import pytest
import torch
from torch import nn

from core.errors import ConfigError
from core.evaluation.attention_ops import (
    apply_rope,
    attention_errors,
    attention_probs,
    rope_adjoint,
)
from core.methods import get_method
from core.methods.attention_gd import (
    AttentionGD,
    AttentionGDOptions,
    GroupProblem,
    binarize,
    gd_prune_group,
    initial_mask,
    lipschitz_upper_bound,
    to_heads,
    to_linear,
)
from core.methods.base import LayerContext, LinearStats
from core.methods.masks import score_mask
from core.methods.wanda import wanda_scores

D, HEAD_DIM, L = 16, 4, 8
F64 = torch.float64


def rope_for(length: int, head_dim: int = HEAD_DIM, dtype=F64) -> tuple[torch.Tensor, torch.Tensor]:
    """Llama RoPE tables (length, head_dim), base 10000."""
    inv = 1.0 / 10000 ** (torch.arange(0, head_dim, 2, dtype=dtype) / head_dim)
    freqs = torch.outer(torch.arange(length, dtype=dtype), inv)
    emb = torch.cat([freqs, freqs], dim=-1)
    return emb.cos(), emb.sin()


def group_problem(seed: int = 0, r: int = 2, n_seq: int = 2):
    """X (N, L, d), Wq (r, d, d_h), Wk (d, d_h) and random masks in [0, 1], float64."""
    gen = torch.Generator().manual_seed(seed)
    X = torch.randn(n_seq, L, D, generator=gen, dtype=F64)
    Wq = torch.randn(r, D, HEAD_DIM, generator=gen, dtype=F64) / 2
    Wk = torch.randn(D, HEAD_DIM, generator=gen, dtype=F64) / 2
    Mq = torch.rand(r, D, HEAD_DIM, generator=gen, dtype=F64)
    Mk = torch.rand(D, HEAD_DIM, generator=gen, dtype=F64)
    return X, Wq, Wk, Mq, Mk


def rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return ((a - b).norm() / b.norm()).item()


# ---- core.evaluation.attention_ops ---------------------------------------------------------------


def test_rope_adjoint_is_the_transpose_of_rope():
    gen = torch.Generator().manual_seed(1)
    x, y = torch.randn(2, L, HEAD_DIM, generator=gen, dtype=F64)
    cos, sin = torch.randn(2, L, HEAD_DIM, generator=gen, dtype=F64)  # any tables, not rotations
    lhs = (apply_rope(x, cos, sin) * y).sum()
    rhs = (x * rope_adjoint(y, cos, sin)).sum()
    assert lhs.item() == pytest.approx(rhs.item(), rel=1e-12)


def test_attention_probs_gqa_causal_rows():
    gen = torch.Generator().manual_seed(2)
    X = torch.randn(L, D, generator=gen, dtype=F64)
    Wq = torch.randn(4 * HEAD_DIM, D, generator=gen, dtype=F64)
    Wk = torch.randn(2 * HEAD_DIM, D, generator=gen, dtype=F64)
    cos, sin = rope_for(L)
    P = attention_probs(X, Wq, Wk, 4, 2, HEAD_DIM, causal=True, rope=(cos[None], sin[None]))
    assert P.shape == (4, L, L)
    torch.testing.assert_close(P.sum(-1), torch.ones(4, L, dtype=F64))
    assert (P.triu(1) == 0).all()
    # Query head 3 belongs to group 1 (heads 2, 3) and uses key head 1.
    one = attention_probs(X, Wq[3 * HEAD_DIM :], Wk[HEAD_DIM:], 1, 1, HEAD_DIM, rope=(cos, sin))
    torch.testing.assert_close(P[3], one[0])


def test_attention_errors_by_hand():
    P = torch.tensor([[[1.0, 0.0], [0.5, 0.5]]], dtype=F64)  # (H=1, 2, 2)
    Q = torch.tensor([[[1.0, 0.0], [0.0, 1.0]]], dtype=F64)
    e = attention_errors(P, Q)
    assert e["fro"].item() == pytest.approx(math.sqrt(0.5))
    assert e["tv_max"].item() == pytest.approx(0.5)
    assert e["fro_rel"].item() == pytest.approx(math.sqrt(0.5) / math.sqrt(1.5))
    assert attention_errors(P, P)["fro"].item() == 0.0


# ------------------------------------------------------------------------ loss and gradient


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("use_rope", [False, True])
def test_closed_form_gradient_matches_autograd(causal, use_rope):
    # 4 query heads sharing 2 key heads = 2 groups of r = 2; each group checked on its own.
    X, Wq, Wk, Mq, Mk = group_problem(seed=3, r=4)
    Wk2 = torch.stack([Wk, Wk.flip(0)])  # two key heads
    rope = rope_for(L) if use_rope else None
    for g in range(2):
        problem = GroupProblem(X, Wq[2 * g : 2 * g + 2], Wk2[g], causal, rope)
        args = (Mq[2 * g : 2 * g + 2], Mk, 0.3)
        ours, ref = problem.loss_and_grad(*args), problem.reference_loss_and_grad(*args)
        assert ours.loss.item() == pytest.approx(ref.loss.item(), rel=1e-10)
        torch.testing.assert_close(ours.data, ref.data, rtol=1e-10, atol=1e-14)
        assert rel(ours.grad_q, ref.grad_q) <= 1e-6
        assert rel(ours.grad_k, ref.grad_k) <= 1e-6


def test_sequences_of_different_lengths():
    X, Wq, Wk, Mq, Mk = group_problem(seed=4)
    seqs = [X[0], X[1, :5]]
    problem = GroupProblem(seqs, Wq, Wk, True, rope_for(L))
    ours, ref = problem.loss_and_grad(Mq, Mk, 0.1), problem.reference_loss_and_grad(Mq, Mk, 0.1)
    assert rel(ours.grad_q, ref.grad_q) <= 1e-6 and rel(ours.grad_k, ref.grad_k) <= 1e-6


def test_data_term_and_its_gradient_vanish_at_ones():
    X, Wq, Wk, Mq, Mk = group_problem(seed=5)
    ones_q, ones_k = torch.ones_like(Mq), torch.ones_like(Mk)
    lam = 0.25
    ev = GroupProblem(X, Wq, Wk, True, rope_for(L)).loss_and_grad(ones_q, ones_k, lam)
    assert (ev.data == 0).all()
    torch.testing.assert_close(ev.grad_q, lam * ones_q, rtol=0, atol=0)
    torch.testing.assert_close(ev.grad_k, lam * ones_k, rtol=0, atol=0)


# ------------------------------------------------------------------------------ descent


def test_loss_non_increasing_below_the_lipschitz_bound():
    X, Wq, Wk, Mq, Mk = group_problem(seed=6)
    lam = 0.05  # the λ GD uses: λ_rel · n_rows / n_params with n_rows = 2·8·2, n_params = 3·16·4
    bound = lipschitz_upper_bound(X, Wq, Wk, lam, mask_bound=1.0)  # valid on the [0, 1] box
    opts = AttentionGDOptions(
        lam=lam * 192 / 32,
        optimizer="gd",
        steps=8,
        tol=0.0,
        step="fixed",
        eta=1.0 / bound,
        clip=True,
        dtype="float64",
    )
    res = gd_prune_group(X, Wq, Wk, opts, rope_for(L), Mq0=Mq, Mk0=Mk)
    group = [row for row in res.trajectory if row["matrix"] == "group"]
    losses = [row["loss"] for row in group]
    assert len(losses) == 9
    assert all(b <= a + 1e-12 for a, b in itertools.pairwise(losses))
    assert losses[-1] < losses[0]
    # The measured secant constants never exceed the sound bound.
    assert max(row["lipschitz_est"] for row in group[1:]) <= bound


@pytest.mark.parametrize("step", ["auto", "backtracking"])
def test_adaptive_steps_descend_and_record(step):
    X, Wq, Wk, _, _ = group_problem(seed=7)
    opts = AttentionGDOptions(
        lam=0.05, optimizer="gd", steps=6, tol=0.0, step=step, init="ones", dtype="float64"
    )
    res = gd_prune_group(X, Wq, Wk, opts, rope_for(L))
    group = [row for row in res.trajectory if row["matrix"] == "group"]
    losses = [row["loss"] for row in group]
    assert len(losses) == 7
    assert all(b <= a + 1e-12 for a, b in itertools.pairwise(losses))
    # From M0 = 1 the first step is the uniform shrink: data term 0, then positive.
    assert group[0]["data_loss"] == 0.0 and group[1]["data_loss"] > 0.0
    assert {row["matrix"] for row in res.trajectory} == {"group", "q", "k"}
    assert res.mask_delta > 0


def test_stops_on_relative_loss_change():
    X, Wq, Wk, Mq, Mk = group_problem(seed=7)
    opts = AttentionGDOptions(lam=1e-3, optimizer="gd", steps=500, tol=1e-3, dtype="float64")
    res = gd_prune_group(X, Wq, Wk, opts, rope_for(L), Mq, Mk)
    group = [row["loss"] for row in res.trajectory if row["matrix"] == "group"]
    assert len(group) < 501
    assert abs(group[-2] - group[-1]) <= 1e-3 * group[-2]


def test_anneal_runs_three_stages():
    X, Wq, Wk, Mq, Mk = group_problem(seed=8)
    opts = AttentionGDOptions(
        lam=1e-2, optimizer="gd", lam_schedule="anneal", steps=9, tol=0.0, dtype="float64"
    )
    res = gd_prune_group(X, Wq, Wk, opts, rope_for(L), Mq, Mk)
    lams = sorted({row["lam"] for row in res.trajectory}, reverse=True)
    assert len(lams) == 3 and lams[0] == pytest.approx(100 * lams[2])
    assert res.lam == lams[2]


# ---------------------------------------------------------------------------- binarisation


@pytest.mark.parametrize("scope", ["row", "matrix"])
@pytest.mark.parametrize("sparsity", [0.5, 0.3, 0.0])
def test_binarize_exact_sparsity_with_ties(scope, sparsity):
    scores = torch.randint(0, 3, (6, 10), generator=torch.Generator().manual_seed(8)).float()
    keep = binarize(scores, sparsity, scope)
    pruned = (~keep).sum(-1) if scope == "row" else (~keep).sum()
    expected = math.floor(sparsity * (10 if scope == "row" else 60))
    assert (pruned == expected).all()
    assert torch.equal(keep, binarize(scores, sparsity, scope))  # deterministic


def test_binarize_breaks_ties_by_lower_index():
    keep = binarize(torch.ones(2, 4), 0.5, "row")
    assert keep.tolist() == [[False, False, True, True]] * 2


# ---------------------------------------------------------------------------------- options


@pytest.mark.parametrize(
    "kwargs",
    [
        {"lam": -1e-3},
        {"eta": 0.0},
        {"eta": -0.1},
        {"steps": -1},
        {"relax": "box"},
        {"relax": "polytope", "scope": "matrix"},  # the budget is per row
        {"relax": "topk", "optimizer": "gd"},
        {"relax": "polytope", "optimizer": "lbfgs"},
        {"anneal_weight": -1.0},
        {"step": "fixed"},  # needs eta
        {"step": "newton"},
        {"init": "normal"},
        {"tol": -1.0},
        {"lam_schedule": "cosine"},
        {"checks": "some"},
        {"binarize": "weight"},
        {"scope": "column"},
        {"max_seq": 0},
        {"others": "slicegpt"},
        {"dtype": "float16"},
    ],
)
def test_bad_options_raise_config_error(kwargs):
    with pytest.raises(ConfigError):
        AttentionGDOptions(**kwargs)


# ------------------------------------------------------------------------------- the method


def fake_context(weight_dtype=torch.float32, with_v: bool = False) -> LayerContext:
    """A layer with 4 query heads / 2 KV heads of dim 4 on d = 16, 3 sequences of 8 tokens."""
    torch.manual_seed(9)
    linears = {
        "q": nn.Linear(D, 4 * HEAD_DIM, bias=False).to(weight_dtype),
        "k": nn.Linear(D, 2 * HEAD_DIM, bias=False).to(weight_dtype),
    }
    if with_v:
        linears["v"] = nn.Linear(D, 2 * HEAD_DIM, bias=False)
    X = torch.randn(3, L, D)
    flat = X.reshape(-1, D)
    gram = LinearStats(flat.T @ flat, flat.shape[0])
    cos, sin = rope_for(L, dtype=torch.float32)
    adapter = SimpleNamespace(  # the adapter verbs the method uses: a Llama-like layer
        n_heads=4,
        n_kv_heads=2,
        head_dim=HEAD_DIM,
        hidden_size=D,
        qk_gains=lambda _layer: (None, None, 1e-6),
    )
    return LayerContext(
        index=0,
        n_layers=1,
        layer=nn.Module(),
        adapter=adapter,
        linears=linears,
        stats=dict.fromkeys(linears, gram),
        inputs={"q": X},
        sparsity=dict.fromkeys(linears, 0.5),
        pattern="unstructured",
        device=torch.device("cpu"),
        position_embeddings=(cos[None], sin[None]),
    )


@pytest.mark.parametrize("weight_dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("init", ["ones", "wanda"])
def test_method_prunes_q_and_k_exactly_and_fills_tables(weight_dtype, init):
    assert get_method("attention-gd") is AttentionGD
    ctx = fake_context(weight_dtype)
    dense = {role: lin.weight.detach().clone() for role, lin in ctx.linears.items()}
    method = AttentionGD(AttentionGDOptions(lam=1e-3, steps=3, power_iters=2, init=init))
    reports = method.prune_layer(ctx)
    assert [rep.role for rep in reports] == ["q", "k"]
    for rep in reports:
        W = ctx.linears[rep.role].weight
        assert W.dtype == weight_dtype
        assert ((W == 0).sum(-1) == D // 2).all()  # exactly 50% per row
        assert rep.achieved_sparsity == 0.5 and math.isfinite(rep.rel_error)
        assert rep.extra["attn_error"] >= 0 and rep.extra["mask_delta"] > 0
        assert 0 <= rep.extra["agree_magnitude"] <= 1 and 0 <= rep.extra["agree_wanda"] <= 1
        keep = ctx.arrays[f"mask.layer0.{rep.role}"]
        assert keep.dtype == torch.bool and keep.shape == W.shape
        assert torch.equal(W, dense[rep.role] * keep)  # kept weights are untouched
    traj, groups = ctx.tables["gd_trajectory"], ctx.tables["gd_groups"]
    assert {
        "layer",
        "group",
        "matrix",
        "head",
        "step",
        "loss",
        "grad_norm",
        "step_size",
        "lipschitz_est",
        "pl_ratio",
        "lam",
    } <= traj[0].keys()
    assert sorted(row["head"] for row in ctx.tables["gd_heads"]) == [0, 1, 2, 3]
    assert len(groups) == 2
    assert {
        "verdict",
        "mu_hat",
        "L_star_lo",
        "L_star_hi",
        "lipschitz_hessian",
        "lipschitz_secant",
        "lipschitz_bound",
        "mask_delta",
        "reason",
    } <= groups[0].keys()
    assert groups[0]["verdict"] in ("supported", "contradicted", "inconclusive")
    summary = method.run_summary(ctx.tables)
    assert {"mask_agreement_magnitude", "mask_agreement_wanda", "gd_verdict"} <= summary.keys()


@pytest.mark.parametrize(
    ("checks", "index", "judged"),
    [("full", 0, [0, 1]), ("sample", 0, [0]), ("sample", 1, [1]), ("none", 0, [])],
)
def test_checks_judge_every_group_one_per_layer_or_none(checks, index, judged):
    """checks="sample" judges group = layer mod KV heads: layers rotate through the groups."""
    ctx = fake_context()
    ctx.index, ctx.n_layers = index, 2
    AttentionGD(AttentionGDOptions(steps=3, power_iters=2, checks=checks)).prune_layer(ctx)
    verdicts = {row["group"]: row["verdict"] for row in ctx.tables["gd_groups"]}
    assert sorted(verdicts) == [0, 1]
    assert [g for g, v in verdicts.items() if v != "not_checked"] == judged


def test_scaled_init_binarised_at_step_zero_is_the_baseline_mask():
    """GD with tol large enough to stop after one step from a Wanda-scaled M₀ stays near
    Wanda's mask; at M₀ itself binarising by M is exactly Wanda's keep mask."""
    ctx = fake_context()
    W = ctx.linears["q"].weight.detach()
    col_sq = ctx.stats["q"].col_sq_norms
    M0 = initial_mask(W, "wanda", col_sq)
    assert torch.equal(binarize(M0, 0.5, "row"), ~score_mask(wanda_scores(W, col_sq), 0.5, "row"))
    M0 = initial_mask(W, "magnitude")
    assert torch.equal(binarize(M0, 0.5, "row"), ~score_mask(W.abs(), 0.5, "row"))


def test_method_others_delegates_v_to_wanda():
    ctx = fake_context(with_v=True)
    method = AttentionGD(AttentionGDOptions(steps=1, power_iters=1, others="wanda"))
    reports = method.prune_layer(ctx)
    assert [rep.role for rep in reports] == ["q", "k", "v"]
    assert ((ctx.linears["v"].weight == 0).sum(-1) == D // 2).all()


def test_method_layout_round_trip():
    W = torch.arange(2 * HEAD_DIM * D, dtype=F64).reshape(2 * HEAD_DIM, D)
    heads = to_heads(W, HEAD_DIM)
    assert heads.shape == (2, D, HEAD_DIM)
    torch.testing.assert_close(heads[1], W[HEAD_DIM:].T)
    torch.testing.assert_close(to_linear(heads), W)
