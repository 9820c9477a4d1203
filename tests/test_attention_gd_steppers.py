"""Adam and L-BFGS beside plain GD for attention-gd's mask descent (core/methods/attention_gd/
steppers.py): on hand-sized problems each lowers the loss, L-BFGS reaches a convex
quadratic's minimiser within its tolerance, the options validate, a run reports how far
the binarised mask moved and whether the optimiser converged; the swap search on binary masks
(swaps.py) only lowers the loss and keeps every row's count."""

from __future__ import annotations

import itertools

import pytest
import torch
from test_attention_gd import D, fake_context, group_problem, rope_for

from core.errors import ConfigError
from core.methods.attention_gd import AttentionGD, AttentionGDOptions, gd_prune_group
from core.methods.attention_gd.objective import GroupProblem
from core.methods.attention_gd.steppers import adam_steps, lbfgs_steps, two_loop
from core.methods.attention_gd.swaps import swap_search

F64 = torch.float64


def quadratic(n: int = 30, decades: float = 4.0, seed: int = 0):
    """f(x) = ½xᵀAx − bᵀx with A's eigenvalues log-spaced over ``decades``; (evaluate, x*)."""
    gen = torch.Generator().manual_seed(seed)
    Q, _ = torch.linalg.qr(torch.randn(n, n, generator=gen, dtype=F64))
    A = Q @ torch.diag(torch.logspace(0, decades, n, dtype=F64)) @ Q.T
    b = torch.randn(n, generator=gen, dtype=F64)

    def evaluate(x):
        g = A @ x - b
        return (0.5 * x @ A @ x - b @ x).item(), g, None

    return evaluate, torch.linalg.solve(A, b)


def run(steps, evaluate, x, cap: int, tol: float):
    """Drive a step generator with the production stopping rule; (last step, steps taken)."""
    loss = evaluate(x)[0]
    last, taken = None, 0
    for st in steps:
        taken += 1
        done = abs(loss - st.loss) <= tol * abs(loss)
        last, loss = st, st.loss
        if done or taken >= cap:
            break
    return last, taken


def test_lbfgs_reaches_the_minimiser_of_a_convex_quadratic():
    evaluate, x_star = quadratic()
    x0 = torch.zeros_like(x_star)
    f0, g0, _ = evaluate(x0)
    f_star = evaluate(x_star)[0]
    last, taken = run(lbfgs_steps(evaluate, x0, f0, g0), evaluate, x0, cap=500, tol=1e-12)
    assert taken < 500  # stopped on the tolerance, not the cap
    assert abs(last.loss - f_star) <= 1e-8 * abs(f_star)
    assert (last.x - x_star).norm() <= 1e-3 * x_star.norm()


def test_two_loop_without_pairs_is_steepest_descent():
    g = torch.tensor([1.0, -2.0], dtype=F64)
    assert torch.equal(two_loop(g, []), -g)


@pytest.mark.parametrize("name", ["adam", "lbfgs"])
def test_each_optimiser_lowers_a_quadratic(name):
    evaluate, _ = quadratic(decades=2.0)
    x0 = torch.ones(30, dtype=F64)
    f0, g0, _ = evaluate(x0)
    gen = (
        adam_steps(evaluate, x0, g0, lr=1e-2)
        if name == "adam"
        else lbfgs_steps(evaluate, x0, f0, g0)
    )
    last, _ = run(gen, evaluate, x0, cap=50, tol=0.0)
    assert last.loss < f0


@pytest.mark.parametrize("optimizer", ["gd", "adam", "lbfgs"])
def test_each_optimiser_lowers_the_group_loss(optimizer):
    X, Wq, Wk, Mq, Mk = group_problem(seed=3)
    opts = AttentionGDOptions(
        lam=1e-3, steps=15, tol=0.0, optimizer=optimizer, dtype="float64", checks="none"
    )
    res = gd_prune_group(X, Wq, Wk, opts, rope_for(X.shape[1]), Mq, Mk)
    losses = [row["loss"] for row in res.trajectory if row["matrix"] == "group"]
    assert losses[-1] < losses[0]
    assert res.trajectory[-1]["step"] == 15 and not res.converged  # the cap, not the tolerance
    assert res.mask_delta > 0


def test_lbfgs_converges_on_a_group_within_tol_and_below_gd():
    X, Wq, Wk, Mq, Mk = group_problem(seed=4)
    out = {}
    for optimizer in ("gd", "lbfgs"):
        opts = AttentionGDOptions(
            lam=1.0, steps=300, tol=1e-9, optimizer=optimizer, dtype="float64", checks="none"
        )
        out[optimizer] = gd_prune_group(X, Wq, Wk, opts, rope_for(X.shape[1]), Mq, Mk)
    lb = out["lbfgs"]
    assert lb.converged and lb.trajectory[-1]["step"] < 300
    final = {k: [r for r in v.trajectory if r["matrix"] == "group"][-1] for k, v in out.items()}
    assert final["lbfgs"]["loss"] <= final["gd"]["loss"] * (1 + 1e-9)
    first = next(r for r in lb.trajectory if r["matrix"] == "group")
    assert final["lbfgs"]["grad_norm"] < first["grad_norm"] * 1e-2


@pytest.mark.parametrize(
    "kwargs",
    [
        {"optimizer": "newton"},
        {"optimizer": "lbfgs", "clip": True},
        {"steps": -1},
        {"refine": "anneal"},
        {"swap_evals": 0},
    ],
)
def test_optimizer_options_validate(kwargs):
    with pytest.raises(ConfigError):
        AttentionGDOptions(**kwargs)


def test_run_reports_binarised_move_and_convergence():
    still = AttentionGD(
        AttentionGDOptions(
            init="wanda_mask",
            optimizer="gd",
            refine="none",
            step="fixed",
            eta=1e-12,
            steps=2,
            checks="none",
        )
    )
    ctx = fake_context()
    reports = still.prune_layer(ctx)
    assert all(rep.extra["mask_flip"] == 0.0 for rep in reports)  # nothing moved
    assert all(rep.extra["agree_wanda"] == 1.0 for rep in reports)
    moving = AttentionGD(
        AttentionGDOptions(init="wanda_mask", optimizer="lbfgs", lam=0.0, steps=40, tol=0.0)
    )
    ctx = fake_context()
    reports = moving.prune_layer(ctx)
    for rep in reports:
        assert 0.0 < rep.extra["mask_flip"] <= 1.0
        assert rep.extra["agree_wanda"] < 1.0
        assert 0.0 <= rep.extra["gd_converged"] <= 1.0
    groups = ctx.tables["gd_groups"]
    assert {type(row["converged"]) for row in groups} == {bool}
    summary = moving.run_summary(ctx.tables)
    assert summary["mask_flip"] > 0.0 and "gd_converged" in summary


def test_swap_search_never_raises_the_loss_and_keeps_row_counts():
    X, Wq, Wk, _, _ = group_problem(seed=5, r=2, n_seq=3)
    problem = GroupProblem(X, Wq, Wk, rope=rope_for(X.shape[1]), dtype=F64)
    gen = torch.Generator().manual_seed(1)
    keep_q = torch.rand(Wq.shape, generator=gen, dtype=F64).argsort(1).argsort(1) < D // 2
    keep_k = torch.rand(Wk.shape, generator=gen, dtype=F64).argsort(0).argsort(0) < D // 2
    out = swap_search(problem, keep_q, keep_k, max_evaluations=15, batch=4)
    assert all(b < a for a, b in itertools.pairwise(out.losses))  # accepted rounds only lower L
    assert out.losses[-1] < out.losses[0] and out.swaps > 0  # a random mask leaves room
    assert torch.equal(out.keep_q.sum(1), keep_q.sum(1))  # per output row (nn.Linear row)
    assert torch.equal(out.keep_k.sum(0), keep_k.sum(0))
    data = problem.data_terms(out.keep_q.to(F64), out.keep_k.to(F64))[0].sum().item()
    assert data == pytest.approx(out.losses[-1], rel=1e-12)
    assert out.evaluations <= 15


def test_refine_swap_lowers_the_layer_error_and_moves_the_mask():
    out = {}
    for refine in ("none", "swap"):
        opts = AttentionGDOptions(init="wanda_mask", steps=2, checks="none", refine=refine)
        ctx = fake_context()
        out[refine] = AttentionGD(opts).prune_layer(ctx)[0].extra
    assert out["none"]["swaps"] == 0 and out["swap"]["swaps"] > 0
    assert out["swap"]["attn_error"] < out["none"]["attn_error"]
    assert out["swap"]["mask_flip"] > 0.0 and out["swap"]["agree_wanda"] < 1.0


def test_the_default_reading_moves_wandas_mask():
    """issue 32: the default is a reading in which the optimiser moves the mask."""
    opts = AttentionGDOptions(checks="none")
    assert (opts.init, opts.optimizer, opts.refine) == ("wanda_mask", "adam", "swap")
    rep = AttentionGD(opts).prune_layer(fake_context())[0]
    assert rep.extra["mask_delta"] > 0 and rep.extra["mask_flip"] > 0
    assert rep.extra["agree_wanda"] < 1.0
