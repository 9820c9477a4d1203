"""A GQA group's objective at fixed λ as the assumption checks see it (diagnostics.Objective)."""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import Tensor

from core.methods.attention_gd.diagnostics import check_assumptions
from core.methods.attention_gd.objective import GroupProblem
from core.methods.attention_gd.options import CHECK_HESSIAN_AT, AttentionGDOptions


class GroupObjective:
    """``diagnostics.Objective`` view of a group at fixed λ: x = (vec M_Q, vec M_K);
    Hessian-vector products by a forward difference of the closed-form gradient."""

    def __init__(self, problem: GroupProblem, lam: float) -> None:
        self.problem, self.lam = problem, lam
        self.q_shape, self.k_shape = problem.Wq.shape, problem.Wk.shape
        self.n_q = problem.Wq.numel()

    def _split(self, x: Tensor) -> tuple[Tensor, Tensor]:
        x = x.to(self.problem.Wq)
        return x[: self.n_q].view(self.q_shape), x[self.n_q :].view(self.k_shape)

    def value_grad(self, x: Tensor) -> tuple[float, Tensor]:
        ev = self.problem.loss_and_grad(*self._split(x), self.lam)
        return ev.loss.item(), torch.cat([ev.grad_q.flatten(), ev.grad_k.flatten()])

    def hvp(self, x: Tensor, v: Tensor, grad: Tensor) -> Tensor:
        eps = math.sqrt(torch.finfo(self.problem.Wq.dtype).eps) * max(1.0, x.norm().item())
        return (self.value_grad(x + eps * v.to(x))[1] - grad) / eps


def judge_group(
    res: Any, options: AttentionGDOptions, analytic_bound: float = math.nan
) -> dict[str, Any]:
    """The assumption checks (diagnostics rule) of one group's run ``res`` (an
    ``optimiser.GroupResult``) at its last λ, with the check settings of ``options``: what a
    run records, and what the benches judge."""
    return check_assumptions(
        GroupObjective(res.problem, res.lam),
        res.run,
        analytic_bound=analytic_bound,
        points=options.check_points,
        power_iters=options.power_iters,
        hessian_at=CHECK_HESSIAN_AT,
        rel_floor=64 * torch.finfo(res.problem.Wq.dtype).eps,
        seed=options.seed,
        eta0=res.trajectory[-1]["step_size"],
    )
