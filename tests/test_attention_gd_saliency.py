"""The attention objective's second-order saliency (core/methods/attention_gd/saliency.py):
½·diag(∇²L) at M = 1 equals a hand-derived value on a one-dimensional two-token problem, the
brute-force Jacobian's column norms and the loss's own finite-difference curvature (RoPE,
causal, GQA heads), and it predicts the loss of pruning one entry alone when that is small."""

from __future__ import annotations

import itertools
import math

import pytest
import torch
from test_attention_gd import group_problem, rope_for

from core.methods.attention_gd.objective import GroupProblem, HeadExtras
from core.methods.attention_gd.saliency import attention_saliency

F64 = torch.float64


def test_two_tokens_one_dimension_by_hand():
    """d = d_h = 1, x = (1, 2), W_Q = 1, W_K = ½: row 0 attends only to itself (no curvature);
    row 1 has scores (1, 2), p = softmax(1, 2)₀ = 1/(1 + e), and ∂s/∂a = p(1−p)[[1, −1],
    [−1, 1]], so with v = ∂a/∂M: H = 2p²(1−p)²(v₀ − v₁)². For M_Q, v = x₁W_Q·(k₀, k₁) =
    (1, 2); for M_K, v = q₁W_K·(x₀, x₁) = (1, 2); both give H = 2p²(1−p)²."""
    X = torch.tensor([[[1.0], [2.0]]], dtype=F64)
    problem = GroupProblem(X, torch.ones(1, 1, 1, dtype=F64), torch.full((1, 1), 0.5, dtype=F64))
    sq, sk = attention_saliency(problem)
    p = 1 / (1 + math.e)
    expected = 0.5 * 2 * p**2 * (1 - p) ** 2
    assert sq.item() == pytest.approx(expected, rel=1e-12)
    assert sk.item() == pytest.approx(expected, rel=1e-12)


def brute_force_diag(problem: GroupProblem) -> tuple[torch.Tensor, torch.Tensor]:
    """Σ_outputs (∂f/∂M_m)² from the full Jacobian of the reference forward (autograd)."""
    Wq, Wk = problem.Wq, problem.Wk

    def f(Mq, Mk):
        return torch.cat(
            [
                problem._reference_probs(x, ch.rope, Mq * Wq, Mk * Wk).reshape(-1)
                for ch in problem.chunks
                for x in ch.X
            ]
        )

    Jq, Jk = torch.autograd.functional.jacobian(f, (torch.ones_like(Wq), torch.ones_like(Wk)))
    return Jq.square().sum(0), Jk.square().sum(0)


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("use_rope", [False, True])
def test_equals_the_brute_force_jacobian_and_the_finite_difference_curvature(causal, use_rope):
    X, Wq, Wk, _, _ = group_problem(seed=3, r=2, n_seq=2)
    X = X[:, :5]
    problem = GroupProblem(X, Wq, Wk, causal, rope_for(5) if use_rope else None)
    sq, sk = attention_saliency(problem)
    hq, hk = brute_force_diag(problem)
    torch.testing.assert_close(2 * sq, hq, rtol=1e-9, atol=1e-14)
    torch.testing.assert_close(2 * sk, hk, rtol=1e-9, atol=1e-14)
    # the loss's own curvature along a few coordinates: (L(1 − εe_m) + L(1 + εe_m))/ε² = H_mm
    for which, idx in [(0, (0, 0, 0)), (0, (1, 7, 3)), (0, (0, 15, 2)), (1, (0, 0)), (1, (9, 1))]:
        assert curvature(problem, which, idx) == pytest.approx(
            2 * (sq, sk)[which][idx].item(), rel=1e-5
        )


def curvature(problem: GroupProblem, which: int, idx: tuple, eps: float = 1e-4) -> float:
    """Central second difference of L (λ = 0) at M = 1 along M_Q (which = 0) or M_K entry idx."""
    ones = [torch.ones_like(problem.Wq), torch.ones_like(problem.Wk)]
    total = 0.0
    for sign in (-1, 1):
        M = [m.clone() for m in ones]
        M[which][idx] += sign * eps
        total += problem.loss(*M, 0.0).item()
    return total / eps**2


def loss_without(problem: GroupProblem, which: int, idx: tuple) -> float:
    """L (λ = 0) with the single mask entry idx of M_Q (which = 0) or M_K set to 0."""
    M = [torch.ones_like(problem.Wq), torch.ones_like(problem.Wk)]
    M[which][idx] = 0
    return problem.loss(*M, 0.0).item()


def test_predicts_single_entry_pruning_and_ranks_as_brute_force():
    """With small weights the third-order rest is negligible: the saliency equals the exact
    loss of zeroing one entry alone within 2 %, and orders the entries as those losses do."""
    X, Wq, Wk, _, _ = group_problem(seed=5, r=1, n_seq=1)
    problem = GroupProblem(X, Wq / 8, Wk / 8, True, rope_for(X.shape[1]))
    for which, sal in enumerate(attention_saliency(problem)):
        cells = itertools.product(*map(range, sal.shape))
        exact = torch.tensor([loss_without(problem, which, i) for i in cells], dtype=F64)
        exact = exact.view_as(sal)
        torch.testing.assert_close(sal, exact, rtol=2e-2, atol=1e-12)
        assert torch.equal(sal.flatten().argsort(), exact.flatten().argsort())


def test_refuses_qk_norms():
    X, Wq, Wk, _, _ = group_problem()
    gain = torch.ones(Wk.shape[1], dtype=F64)
    problem = GroupProblem(X, Wq, Wk, extras=HeadExtras(q_gain=gain, k_gain=gain))
    with pytest.raises(ValueError, match="norms"):
        attention_saliency(problem)
