"""Controls of the assumption checks (core.methods.attention_gd.diagnostics): a check that
cannot say "no" is no check. x⁴ (no PL constant at its minimum) and |x|^{3/2} (gradient not
Lipschitz at its minimum) must come out contradicted; a strongly convex quadratic with a known
spectrum must come out supported with μ̂ and L̂ within 10 % of its extreme eigenvalues."""

from __future__ import annotations

import pytest
import torch

from core.methods.attention_gd.diagnostics import (
    RULE,
    AutogradObjective,
    check_assumptions,
    descend,
)

F64 = torch.float64
N = 8


def start(seed: int = 0) -> torch.Tensor:
    return torch.rand(N, generator=torch.Generator().manual_seed(seed), dtype=F64)


def judge(f, x0: torch.Tensor, steps: int, **kw):
    obj = AutogradObjective(f)
    return check_assumptions(obj, descend(obj, x0, steps), **kw)


def test_quartic_has_no_pl_constant_at_its_minimum():
    out = judge(lambda x: x.pow(4).sum(), start(1), 200, power_iters=20)
    assert out["verdict"] == "contradicted", out
    assert "PL" in out["reason"]
    assert out["pl_slope"] == pytest.approx(0.5, abs=0.1)


def test_gradient_not_lipschitz_is_contradicted():
    c = torch.full((N,), 0.5, dtype=F64)
    out = judge(lambda x: (x - c).abs().pow(1.5).sum(), start(2), 300, power_iters=20)
    assert out["verdict"] == "contradicted", out
    assert "Hessian" in out["reason"]


def test_strongly_convex_quadratic_is_supported_with_its_spectrum():
    gen = torch.Generator().manual_seed(3)
    Q, _ = torch.linalg.qr(torch.randn(N, N, generator=gen, dtype=F64))
    eig = torch.linspace(1.0, 10.0, N, dtype=F64)
    A = Q @ torch.diag(eig) @ Q.T
    c = torch.rand(N, generator=gen, dtype=F64)
    out = judge(lambda x: 0.5 * (x - c) @ A @ (x - c), start(4), 150, power_iters=40)
    assert out["verdict"] == "supported", out
    assert out["mu_hat"] == pytest.approx(1.0, rel=0.1)
    assert out["lipschitz_hessian"] == pytest.approx(10.0, rel=0.1)
    assert out["lipschitz_secant"] <= 10.0 * 1.001


def test_analytic_bound_below_the_measured_curvature_is_contradicted():
    eig = torch.linspace(1.0, 10.0, N, dtype=F64)
    out = judge(lambda x: 0.5 * (eig * x * x).sum(), start(5), 100, analytic_bound=5.0)
    assert out["verdict"] == "contradicted" and "bound" in out["reason"]


def test_the_rule_is_written():
    assert "contradicted" in RULE and "supported" in RULE and "inconclusive" in RULE


def test_controls_table_matches_expectations():
    from core.methods.attention_gd.controls import controls

    rows = controls()
    assert [r["verdict"] for r in rows] == [r["expected"] for r in rows]
