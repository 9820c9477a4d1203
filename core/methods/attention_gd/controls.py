"""The assumption checks' small controls, runnable anywhere (tests, the Assumption checks page).

A check earns trust by saying "no" where the answer is no: x⁴ has no PL constant at its
minimum, |x − c|^{3/2} has a gradient that is not Lipschitz at c, and a strongly convex
quadratic with spectrum 1..10 satisfies both with μ = 1, L = 10: the page draws the rule's
reading of each. ``ridge_quadratic`` adds attention-gd's penalty ½λ‖x‖² to a quadratic with a
log-spaced spectrum, so μ(λ) is known (docs/design-notes.md). The controls
whose power the verdicts state match a real layer instead (dimension 10⁴, the layer's
spectral density): ``synthetic_layer``, judged by ``power``.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from core.methods.attention_gd.diagnostics import AutogradObjective, check_assumptions, descend

N = 8  # dimension of every control
F64 = torch.float64


def _start(seed: int) -> torch.Tensor:
    return torch.rand(N, generator=torch.Generator().manual_seed(seed), dtype=F64)


def quadratic() -> tuple[torch.Tensor, torch.Tensor]:
    """(A, c): A = QΛQᵀ with Λ = linspace(1, 10, N), c a random point of the box."""
    gen = torch.Generator().manual_seed(3)
    Q, _ = torch.linalg.qr(torch.randn(N, N, generator=gen, dtype=F64))
    A = Q @ torch.diag(torch.linspace(1.0, 10.0, N, dtype=F64)) @ Q.T
    return A, torch.rand(N, generator=gen, dtype=F64)


def cases() -> list[tuple]:
    """(name, f, seed, steps, expected verdict, (μ, L) or None); every minimum value is 0."""
    A, c = quadratic()
    half = torch.full((N,), 0.5, dtype=F64)
    return [
        ("x⁴ (no PL constant at 0)", lambda x: x.pow(4).sum(), 1, 200, "contradicted", None),
        ("|x − ½|^{3/2} (gradient not Lipschitz)", lambda x: (x - half).abs().pow(1.5).sum(),
         2, 300, "contradicted", None),
        ("quadratic, spectrum 1..10", lambda x: 0.5 * (x - c) @ A @ (x - c), 4, 150,
         "supported", (1.0, 10.0)),
    ]  # fmt: skip


MATCHED_L = 1.0


def start(seed: int) -> torch.Tensor:
    """A seeded random start in the [0, 1] box (the mask's box)."""
    return _start(1000 + seed)


def matched_quadratic(mu: float, seed: int, lip: float = MATCHED_L):
    """½(x − c)ᵀA(x − c) with A = QΛQᵀ, Λ log-spaced over [μ, L] (so μ and L are exact and
    the spectrum spans log10(L/μ) decades), Q and c drawn from ``seed``: PL holds with μ."""
    gen = torch.Generator().manual_seed(seed)
    Q, _ = torch.linalg.qr(torch.randn(N, N, generator=gen, dtype=F64))
    lam = torch.logspace(math.log10(mu), math.log10(lip), N, dtype=F64)
    A, c = Q @ torch.diag(lam) @ Q.T, torch.rand(N, generator=gen, dtype=F64)
    return lambda x: 0.5 * (x - c) @ A @ (x - c)


def ridge_quadratic(mu0: float, lam: float, seed: int, lip: float = MATCHED_L):
    """``matched_quadratic(mu0, seed, lip)`` plus the penalty ½λ‖x‖² (attention-gd's form):
    its Hessian is A + λI, so PL holds with μ(λ) = μ₀ + λ exactly (μ̂'s λ-dependence)."""
    base = matched_quadratic(mu0, seed, lip)
    return lambda x: base(x) + 0.5 * lam * x.square().sum()


def control_trajectories() -> list[dict[str, Any]]:
    """The controls' GD paths in the Assumption checks page's panels: rows with control,
    step, loss, grad_norm, lipschitz_est (secant ‖g_{t+1} − g_t‖/‖x_{t+1} − x_t‖) and
    pl_ratio ½‖g_t‖²/(L_t − L*) with L* = 0 (each control's known minimum)."""
    rows = []
    for name, f, seed, steps, _, _ in cases():
        run = descend(AutogradObjective(f), _start(seed), steps)
        for t, (value, gnorm) in enumerate(zip(run.values, run.grad_norms, strict=True)):
            row = {"control": name, "step": t, "loss": value, "grad_norm": gnorm}
            if t + 1 in run.xs:
                dx = (run.xs[t + 1] - run.xs[t]).norm().item()
                dg = (run.grads[t + 1] - run.grads[t]).norm().item()
                row["lipschitz_est"] = dg / dx if dx > 0 else float("nan")
            row["pl_ratio"] = 0.5 * gnorm**2 / value if value > 0 else float("nan")
            rows.append(row)
    return rows


def controls() -> list[dict[str, Any]]:
    """Each control judged by ``check_assumptions`` after GD from a random point: rows with
    name, expected and observed verdict, μ̂, L̂ (Hessian), the true values where known."""
    rows = []
    for name, f, seed, steps, expected, truth in cases():
        obj = AutogradObjective(f)
        out = check_assumptions(obj, descend(obj, _start(seed), steps), power_iters=40)
        rows.append(
            {
                "control": name,
                "expected": expected,
                "verdict": out["verdict"],
                "mu_hat": out["mu_hat"],
                "lipschitz_hessian": out["lipschitz_hessian"],
                "mu_true": truth[0] if truth else float("nan"),
                "L_true": truth[1] if truth else float("nan"),
                "reason": out["reason"],
            }
        )
    return rows
