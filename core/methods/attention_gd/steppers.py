"""Optimisers beside plain GD for the mask descent: Adam and L-BFGS as pure step generators.

Plain GD at η = 1/L̂ barely moves M on a real layer: the Hessian's spectrum spans ~13 decades,
so the top eigenvalue sets a step far too short for every other direction (issue 32). Adam
rescales each coordinate by its gradient's running RMS, L-BFGS builds a curvature model from
the last ``history`` secant pairs; both act on the same loss and closed-form gradient.

Each optimiser is a generator over a flat x = (vec M_Q, vec M_K): ``evaluate(x)`` returns
(loss, flat gradient, aux) and every ``next`` takes one step and yields a ``Step``. Stopping
(tolerance, cap) is the caller's (optimiser.gd_prune_group), the same rule for every optimiser.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable, Iterator
from typing import Any, NamedTuple

import torch
from torch import Tensor

ADAM_LR = 1e-2  # Adam's step when ``eta`` is unset: ~1 % of a mask entry's range per step
ADAM_BETAS = (0.9, 0.999)
ADAM_EPS = 1e-8
LBFGS_HISTORY = 10  # secant pairs kept
ARMIJO_C1 = 1e-4  # sufficient decrease of the backtracking line search
MAX_BACKTRACKS = 30


class Step(NamedTuple):
    x: Tensor  # the new iterate
    loss: float
    grad: Tensor
    aux: Any  # whatever ``evaluate`` returned beside loss and gradient (a LossGrad)
    evaluations: int  # loss/gradient evaluations this step took
    step_size: float  # Adam: lr; L-BFGS: the accepted line-search step t


Evaluate = Callable[[Tensor], tuple[float, Tensor, Any]]


def adam_steps(
    evaluate: Evaluate,
    x: Tensor,
    grad: Tensor,
    lr: float = ADAM_LR,
    project: Callable[[Tensor], Tensor] | None = None,
) -> Iterator[Step]:
    """Adam (Kingma & Ba 2015) from x with gradient ``grad`` at x: m, v running moments with
    ``ADAM_BETAS``, bias-corrected, x ← x − lr·m̂/(√v̂ + ε), then x ← ``project``(x) when
    given (the [0, 1] box of ``clip``, a budget polytope: relax.py). One evaluation per
    step; the loss may rise (no line search)."""
    b1, b2 = ADAM_BETAS
    m, v = torch.zeros_like(x), torch.zeros_like(x)
    t = 0
    while True:
        t += 1
        m.mul_(b1).add_(grad, alpha=1 - b1)
        v.mul_(b2).addcmul_(grad, grad, value=1 - b2)
        m_hat, v_hat = m / (1 - b1**t), v / (1 - b2**t)
        x = x - lr * m_hat / (v_hat.sqrt() + ADAM_EPS)
        if project is not None:
            x = project(x)
        loss, grad, aux = evaluate(x)
        yield Step(x, loss, grad, aux, 1, lr)


def two_loop(grad: Tensor, pairs: deque) -> Tensor:
    """−H·grad by the L-BFGS two-loop recursion over (s, y, 1/⟨s, y⟩) pairs, oldest first;
    H₀ = ⟨s, y⟩/⟨y, y⟩ of the newest pair (the identity without pairs)."""
    q = grad.clone()
    alphas = []
    for s, y, rho in reversed(pairs):
        a = rho * torch.dot(s, q)
        q.sub_(y, alpha=a.item())
        alphas.append(a)
    if pairs:
        s, y, _ = pairs[-1]
        q.mul_((torch.dot(s, y) / torch.dot(y, y)).item())
    for (s, y, rho), a in zip(pairs, reversed(alphas), strict=True):
        b = rho * torch.dot(y, q)
        q.add_(s, alpha=(a - b).item())
    return q.neg_()


def lbfgs_steps(
    evaluate: Evaluate,
    x: Tensor,
    loss: float,
    grad: Tensor,
    history: int = LBFGS_HISTORY,
    first_step: float | None = None,
) -> Iterator[Step]:
    """L-BFGS (Nocedal & Wright, Alg. 7.5) from x with loss and gradient at x.

    Direction by ``two_loop``; step by Armijo backtracking, halving from t = 1 (from
    t = ``first_step``, default 1/‖g‖, while no curvature pairs exist: a steepest-descent
    step). A pair with ⟨s, y⟩ ≤ 1e-10·‖s‖‖y‖ (negative curvature: the loss is not convex)
    is skipped; a direction that does not descend resets the memory to steepest descent.
    Ends (returns) when no step within ``MAX_BACKTRACKS`` halvings decreases the loss.
    """
    pairs: deque = deque(maxlen=history)
    while True:
        d = two_loop(grad, pairs)
        slope = torch.dot(grad, d).item()
        if not slope < 0:  # not a descent direction: forget the curvature model
            pairs.clear()
            d, slope = -grad, -torch.dot(grad, grad).item()
            if slope == 0.0:
                return
        t = 1.0
        if not pairs:
            t = first_step if first_step is not None else 1.0 / max(d.norm().item(), 1e-300)
        evals = 0
        for _ in range(MAX_BACKTRACKS):
            x_new = x + t * d
            new_loss, new_grad, aux = evaluate(x_new)
            evals += 1
            if math.isfinite(new_loss) and new_loss <= loss + ARMIJO_C1 * t * slope:
                break
            t /= 2.0
        else:
            return
        s, y = x_new - x, new_grad - grad
        sy = torch.dot(s, y).item()
        if sy > 1e-10 * s.norm().item() * y.norm().item():
            pairs.append((s, y, 1.0 / sy))
        x, loss, grad = x_new, new_loss, new_grad
        yield Step(x, loss, grad, aux, evals, t)
