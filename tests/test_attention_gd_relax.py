"""Relaxations that keep the budget (core/methods/attention_gd/relax.py): the projection onto
{0 ≤ m ≤ 1, Σ m = k} on hand-sized rows and its optimality conditions, the straight-through
top-k, and the three readings inside the descent: every row keeps its budget at every step,
"topk" descends on binary masks, "anneal" ends binary; steps = 0 leaves M₀ as it is; the OBD
start is the objective's own saliency mask."""

from __future__ import annotations

import itertools

import pytest
import torch
from test_attention_gd import HEAD_DIM, fake_context, group_problem, rope_for

from core.methods.attention_gd import AttentionGD, AttentionGDOptions, gd_prune_group
from core.methods.attention_gd.objective import GroupProblem, to_heads
from core.methods.attention_gd.relax import (
    Budget,
    project_rows,
    topk_rows,
    with_binarisation_penalty,
)
from core.methods.attention_gd.saliency import obd_keep
from core.methods.attention_gd.swaps import to_rows

F64 = torch.float64


@pytest.mark.parametrize(
    ("row", "k", "expected"),
    [
        ([0.9, 0.8, 0.1, 0.0], 2, [0.95, 0.85, 0.15, 0.05]),  # shift τ = −0.05, all free
        ([2.0, 0.0, 0.0, 0.0], 1, [1.0, 0.0, 0.0, 0.0]),  # a vertex: already k-sparse
        ([0.5, 0.5, 0.5, 0.5], 2, [0.5, 0.5, 0.5, 0.5]),  # on the polytope: unchanged
        ([3.0, 1.0, 0.2, -1.0], 2, [1.0, 0.9, 0.1, 0.0]),  # τ = 0.1: one at 1, one at 0
        ([0.3, 0.1, 0.7], 0, [0.0, 0.0, 0.0]),
        ([0.3, 0.1, 0.7], 3, [1.0, 1.0, 1.0]),
    ],
)
def test_projection_on_hand_sized_rows(row, k, expected):
    got = project_rows(torch.tensor([row], dtype=F64), k)
    torch.testing.assert_close(got, torch.tensor([expected], dtype=F64), rtol=0, atol=1e-12)


def test_projection_meets_the_kkt_conditions_and_is_nearest():
    """Σ m = k, 0 ≤ m ≤ 1, one shift τ per row (free entries v − m = τ, entries at 0 have
    v ≤ τ, at 1 have v ≥ 1 + τ), and no feasible point of the row is closer to v."""
    gen = torch.Generator().manual_seed(0)
    V = 2 * torch.randn(50, 12, generator=gen, dtype=F64)
    k = torch.randint(1, 12, (50,), generator=gen).to(F64)
    M = project_rows(V, k)
    torch.testing.assert_close(M.sum(-1), k, rtol=0, atol=1e-10)
    assert bool(((M >= 0) & (M <= 1)).all())
    for v, m in zip(V, M, strict=True):
        free, zero, one = (m > 1e-12) & (m < 1 - 1e-12), m <= 1e-12, m >= 1 - 1e-12
        if free.any():
            tau = (v - m)[free].mean()
            shifts = (v - m)[free]
            torch.testing.assert_close(shifts, tau.expand_as(shifts), atol=1e-10, rtol=0)
            assert bool((v[zero] <= tau + 1e-10).all())
            assert bool((v[one] >= 1 + tau - 1e-10).all())
        else:  # a vertex: some τ separates the pruned entries from the kept ones by 1
            assert v[zero].max() <= v[one].min() - 1 + 1e-10
    # random feasible points (projections of other rows onto the same budgets) are farther
    others = project_rows(V + torch.randn(V.shape, generator=gen, dtype=F64), k)
    assert bool(((others - V).norm(dim=-1) >= (M - V).norm(dim=-1) - 1e-12).all())


def test_projection_refuses_an_impossible_budget():
    with pytest.raises(ValueError, match="budget"):
        project_rows(torch.zeros(1, 3, dtype=F64), 4)


def test_topk_rows_keeps_each_rows_largest():
    V = torch.tensor([[0.1, 0.9, 0.5, 0.7], [4.0, 3.0, 2.0, 1.0]], dtype=F64)
    got = topk_rows(V, torch.tensor([2, 1]))
    assert got.tolist() == [[0.0, 1.0, 0.0, 1.0], [1.0, 0.0, 0.0, 0.0]]


def test_binarisation_penalty_and_its_gradient():
    """ρ·Σ M(1 − M): 0 at binary masks, ρ/4 per entry at ½; gradient ρ(1 − 2M) (autograd)."""
    X, Wq, Wk, Mq, Mk = group_problem(seed=1)
    problem = GroupProblem(X, Wq, Wk, True, rope_for(X.shape[1]))
    ev = problem.loss_and_grad(Mq, Mk, 0.0)
    pen = with_binarisation_penalty(ev, Mq, Mk, 0.3)
    x = torch.cat([Mq.flatten(), Mk.flatten()]).requires_grad_(True)
    (g,) = torch.autograd.grad(0.3 * (x * (1 - x)).sum(), x)
    extra = torch.cat([(pen.grad_q - ev.grad_q).flatten(), (pen.grad_k - ev.grad_k).flatten()])
    torch.testing.assert_close(extra, g)
    half = [torch.full_like(Mq, 0.5), torch.full_like(Mk, 0.5)]
    at_half = with_binarisation_penalty(problem.loss_and_grad(*half, 0.0), *half, 0.3)
    n = Mq.numel() + Mk.numel()
    assert (at_half.loss - at_half.data.sum()).item() == pytest.approx(0.3 / 4 * n)


def wanda_start(seed: int = 2, r: int = 2):
    """A group problem and Wanda-like binary start masks keeping half of each row."""
    X, Wq, Wk, _, _ = group_problem(seed=seed, r=r)
    problem = GroupProblem(X, Wq, Wk, True, rope_for(X.shape[1]))
    col = X.reshape(-1, X.shape[-1]).square().sum(0).sqrt()
    rows = to_rows(Wq.abs() * col[None, :, None], Wk.abs() * col[:, None])
    keep = topk_rows(rows, torch.full((rows.shape[0],), rows.shape[1] // 2))
    n_q = r * HEAD_DIM
    Mq0 = to_heads(keep[:n_q], HEAD_DIM)
    Mk0 = keep[n_q:].T
    budget = Budget(keep[:n_q].sum(-1), keep[n_q:].sum(-1))
    return X, Wq, Wk, problem, Mq0, Mk0, budget


@pytest.mark.parametrize("relax", ["polytope", "anneal", "topk"])
def test_each_budget_reading_keeps_every_rows_budget_at_every_step(relax):
    X, Wq, Wk, problem, Mq0, Mk0, budget = wanda_start()
    if relax == "anneal":  # from the polytope's centre, M = ½: the penalty must binarise it
        Mq0, Mk0 = torch.full_like(Mq0, 0.5), torch.full_like(Mk0, 0.5)
    opts = AttentionGDOptions(
        relax=relax, steps=80, tol=0.0, lam=0.0, checks="full", dtype="float64",
        anneal_weight=1.0, eta=0.05,
    )  # fmt: skip
    res = gd_prune_group(X, Wq, Wk, opts, rope_for(X.shape[1]), Mq0, Mk0, budget=budget)
    assert res.mask_delta > 0.01  # it moved
    k = budget.counts().to(F64)
    for t, x in res.run.xs.items():
        rows = to_rows(x[: Mq0.numel()].view(Mq0.shape), x[Mq0.numel() :].view(Mk0.shape))
        if relax == "topk":  # the latent M ranks; the loss is its binary top k's
            binary = topk_rows(rows, budget.counts())
            n_q = Wq.shape[0] * HEAD_DIM
            bq, bk = to_heads(binary[:n_q], HEAD_DIM), binary[n_q:].T
            assert res.run.values[t] == pytest.approx(problem.loss(bq, bk, 0.0).item(), rel=1e-9)
            continue
        torch.testing.assert_close(rows.sum(-1), k, rtol=0, atol=1e-8), t
        assert bool(((rows >= -1e-12) & (rows <= 1 + 1e-12)).all())
    if relax == "anneal":  # the penalty drove the last iterate to (nearly) a vertex
        last = torch.cat([res.Mq.flatten(), res.Mk.flatten()])
        assert ((last > 0.05) & (last < 0.95)).double().mean().item() < 0.05


def test_zero_steps_leave_the_start_and_swap_from_it_is_wanda_plus_swap():
    X, Wq, Wk, _, Mq0, Mk0, _ = wanda_start()
    res = gd_prune_group(X, Wq, Wk, AttentionGDOptions(steps=0), None, Mq0, Mk0)
    assert torch.equal(res.Mq, Mq0.to(res.Mq)) and torch.equal(res.Mk, Mk0.to(res.Mk))
    assert res.mask_delta == 0.0 and res.trajectory[-1]["step"] == 0


def test_the_method_runs_each_relaxation_and_skips_the_checks():
    for relax in ("polytope", "anneal", "topk"):
        ctx = fake_context()
        opts = AttentionGDOptions(relax=relax, steps=10, checks="full", refine="none")
        reports = AttentionGD(opts).prune_layer(ctx)
        for rep in reports:
            assert rep.achieved_sparsity == pytest.approx(0.5)
        assert {row["verdict"] for row in ctx.tables["gd_groups"]} == {"not_checked"}


def test_obd_start_is_the_objectives_saliency_mask():
    """init="obd_mask", no steps, no swap: the written keep masks are ``obd_keep`` of each
    group's objective (the headroom table's "obd (attention H)" row)."""
    ctx = fake_context()
    W = {role: lin.weight.detach().clone() for role, lin in ctx.linears.items()}
    opts = AttentionGDOptions(init="obd_mask", steps=0, refine="none", checks="none")
    AttentionGD(opts).prune_layer(ctx)
    X = ctx.inputs["q"][:, : opts.max_len].float()
    cos, sin = ctx.position_embeddings
    for g in range(2):
        qs, ks = slice(8 * g, 8 * g + 8), slice(4 * g, 4 * g + 4)
        problem = GroupProblem(
            X, to_heads(W["q"][qs], HEAD_DIM), W["k"][ks].T, True, (cos[0], sin[0])
        )
        keep_q, keep_k = obd_keep(problem, {"q": 0.5, "k": 0.5})
        assert torch.equal(ctx.arrays["mask.layer0.q"][qs], keep_q)
        assert torch.equal(ctx.arrays["mask.layer0.k"][ks], keep_k)


def test_projected_plain_gd_descends_on_the_polytope():
    """relax="polytope" with Paper B's plain GD: the descent-lemma steps are projected, the
    loss falls and every row keeps its budget."""
    X, Wq, Wk, _, Mq0, Mk0, budget = wanda_start()
    opts = AttentionGDOptions(
        relax="polytope", optimizer="gd", steps=30, tol=0.0, checks="none", dtype="float64"
    )
    res = gd_prune_group(X, Wq, Wk, opts, rope_for(X.shape[1]), Mq0, Mk0, budget=budget)
    rows = to_rows(res.Mq, res.Mk)
    torch.testing.assert_close(rows.sum(-1), budget.counts().to(F64), rtol=0, atol=1e-9)
    losses = [r["loss"] for r in res.trajectory if r["matrix"] == "group"]
    assert losses[-1] < 0.5 * losses[0] and all(
        b <= a + 1e-12 for a, b in itertools.pairwise(losses)
    )
