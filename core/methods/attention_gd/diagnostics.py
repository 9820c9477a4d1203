"""Assumption checks that can fail: smoothness and PL, measured off the judged trajectory.

Paper B's Theorem 4.1 rests on (i) ∇L being L-Lipschitz and (ii) a PL inequality
½‖∇L(x)‖² ≥ μ(L(x) − L*) with μ > 0, which give GD's linear rate 1 − μ/L. Checking them on the
GD trajectory alone, with L* = the trajectory's best loss, cannot fail (papers.md §3 caution).
Here, for any objective with values, gradients and Hessian-vector products on flat vectors:

* L* comes from an independent run (``descend`` from the judged run's best point, another step
  rule, as long again) and the known lower bound of the loss: L*_hi = the lowest value seen
  anywhere, U = what the second half of that run still gained, L*_lo = max(lower bound,
  L*_hi − U). Both ends are reported.
* PL ratios ½‖∇L(z)‖²/(L(z) − L*) are measured at the iterates, at random points of the box
  and at perturbations of the iterates.
* Smoothness: top |eigenvalue| of the Hessian by power iteration on Hessian-vector products
  at iterates spread along the run, beside the secants ‖∇L_{t+1} − ∇L_t‖/‖x_{t+1} − x_t‖, and
  the analytical bound when one is given.

Verdict rule (``RULE``; the page prints it):
  eligible points: gap L(z) − L*_hi > max(4U, floor);
  contradicted  if (PL) over the half of the eligible points closest to L*, log ratio grows
                with log gap at slope ≥ 0.25 (ratio → 0 as L → L*: no μ > 0), r² ≥ 0.6, over
                ≥ 1.5 decades of gap; or a point has gap > 0 and zero gradient;
                or (smoothness) the curvature estimates (Hessian and secants) grow as
                L → L* at slope ≤ −0.15 in log-log, r² ≥ 0.6, ≥ 3× over ≥ 1.5 decades (no finite L);
                or an estimate exceeds the analytical bound by > 5 % (only where the bound
                is informative: within 10³ of the measured curvature; a bound further above
                cannot fire, is flagged "uninformative" and is not counted as a check);
  supported     if not contradicted, μ̂ > 0 with ≥ 6 eligible points spanning ≥ 1 decade of
                gap, the PL slope < 0.25, and U ≤ ½ the median eligible gap;
  inconclusive  otherwise (too few points, gaps too narrow, or L* too uncertain).
The thresholds are ours, fixed before looking at attention data: x⁴ has PL slope ½ exactly,
a non-Lipschitz |x|^{3/2} has Hessian slope −⅓, a quadratic has slope 0 for both.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import torch
from torch import Tensor

RULE = __doc__.split("Verdict rule (``RULE``; the page prints it):\n")[1].split("\nThe thr")[0]
VERDICTS = ("supported", "contradicted", "inconclusive")
PL_SLOPE, HESS_SLOPE, MIN_R2, MIN_DECADES, HESS_GROWTH = 0.25, -0.15, 0.6, 1.5, 3.0
UNINFORMATIVE = 1e3  # analytical bound / measured curvature above which the bound cannot fire


class Objective(Protocol):
    """A loss on flat vectors: value and gradient, and a Hessian-vector product."""

    def value_grad(self, x: Tensor) -> tuple[float, Tensor]: ...

    def hvp(self, x: Tensor, v: Tensor, grad: Tensor) -> Tensor: ...


class AutogradObjective:
    """``Objective`` of a scalar torch function f(x) through autograd (controls, tests)."""

    def __init__(self, f: Callable[[Tensor], Tensor]) -> None:
        self.f = f

    def value_grad(self, x: Tensor) -> tuple[float, Tensor]:
        with torch.enable_grad():
            x = x.detach().requires_grad_(True)
            y = self.f(x)
            (g,) = torch.autograd.grad(y, x)
        return y.item(), g

    def hvp(self, x: Tensor, v: Tensor, grad: Tensor) -> Tensor:
        with torch.enable_grad():
            x = x.detach().requires_grad_(True)
            (g,) = torch.autograd.grad(self.f(x), x, create_graph=True)
            (hv,) = torch.autograd.grad(g, x, v)
        return hv


@dataclass
class Descent:
    """Iterates of a descent run: xs (kept only where asked), values and gradients' norms."""

    values: list[float] = field(default_factory=list)
    grad_norms: list[float] = field(default_factory=list)
    xs: dict[int, Tensor] = field(default_factory=dict)  # step -> x_t
    grads: dict[int, Tensor] = field(default_factory=dict)  # step -> ∇L(x_t)


def descend(obj: Objective, x0: Tensor, steps: int, eta: float = 1.0) -> Descent:
    """GD with descent-lemma backtracking (η doubles before each step, halves on failure):
    the independent run for L* and the controls' judged trajectory. Keeps every iterate."""
    run = Descent()
    x, (value, g) = x0.clone(), obj.value_grad(x0)
    for t in range(steps + 1):
        run.values.append(value)
        run.grad_norms.append(g.norm().item())
        run.xs[t], run.grads[t] = x, g
        if t == steps or g.norm().item() == 0.0:
            break
        eta *= 2.0
        for _ in range(60):
            x_new = x - eta * g
            v_new, g_new = obj.value_grad(x_new)
            if v_new <= value - 0.5 * eta * g.square().sum().item() + 1e-15 * abs(value):
                break
            eta /= 2.0
        else:
            break
        x, value, g = x_new, v_new, g_new
    return run


def top_hessian_eig(obj: Objective, x: Tensor, grad: Tensor, iters: int, seed: int = 0) -> float:
    """‖H v‖ after ``iters`` power iterations from a seeded random unit v: a lower estimate of
    the top |eigenvalue| of ∇²L(x) that converges to it."""
    gen = torch.Generator().manual_seed(seed)
    v = torch.randn(x.shape, generator=gen, dtype=torch.float64).to(x)
    estimate = 0.0
    for _ in range(iters):
        v = v / v.norm()
        hv = obj.hvp(x, v, grad)
        estimate = hv.norm().item()
        if estimate == 0.0 or not math.isfinite(estimate):
            break
        v = hv
    return estimate


def _fit(x: list[float], y: list[float]) -> tuple[float, float, float]:
    """Least-squares slope and r² of log y on log x, and the decades x spans."""
    lx, ly = (
        torch.tensor(x, dtype=torch.float64).log10(),
        torch.tensor(y, dtype=torch.float64).log10(),
    )
    if len(lx) < 3 or float(lx.max() - lx.min()) == 0.0:
        return math.nan, math.nan, 0.0
    xc, yc = lx - lx.mean(), ly - ly.mean()
    slope = float((xc * yc).sum() / xc.square().sum())
    ss = float(yc.square().sum())
    r2 = 1.0 - float((yc - slope * xc).square().sum()) / ss if ss > 0 else 1.0
    return slope, r2, float(lx.max() - lx.min())


def check_assumptions(
    obj: Objective,
    judged: Descent,
    *,
    box: tuple[float, float] = (0.0, 1.0),
    lower_bound: float = 0.0,
    analytic_bound: float = math.nan,
    points: int = 4,
    power_iters: int = 10,
    long_steps: int | None = None,
    hessian_at: int = 5,
    rel_floor: float = 1e-12,
    seed: int = 0,
    eta0: float = 1.0,
) -> dict[str, Any]:
    """Judge smoothness + PL for ``obj`` around the run ``judged`` (module docstring rule).

    judged: values and gradient norms at every step, and x_t/∇L_t at least at step 0 and at
    its best step. Returns the estimates (L*_lo/hi, μ̂ and its spread, L̂ by Hessian and by
    secants, slopes) and "verdict". Costs ``long_steps`` (default: the judged length) +
    2·``points`` + ``hessian_at``·``power_iters`` evaluations.
    """
    gen = torch.Generator().manual_seed(seed)
    steps = len(judged.values) - 1
    best = min(judged.xs, key=lambda t: judged.values[t])
    x_ref = judged.xs[best]
    long = descend(obj, x_ref, long_steps or max(steps, 10), eta0)
    half = len(long.values) // 2
    gain = max(long.values[half] - long.values[-1], 0.0)
    # Points: (value, grad norm) at the iterates, the long run, box and perturbed points.
    vals, gns = list(judged.values), list(judged.grad_norms)
    vals += long.values[1:]
    gns += long.grad_norms[1:]
    lo, hi = box
    kept = sorted(judged.xs)
    for i in range(points):
        z = lo + (hi - lo) * torch.rand(x_ref.shape, generator=gen, dtype=torch.float64)
        v, g = obj.value_grad(z.to(x_ref))
        vals.append(v), gns.append(g.norm().item())
        x = judged.xs[kept[i % len(kept)]]
        noise = torch.randn(x.shape, generator=gen, dtype=torch.float64).to(x)
        z = x + 0.1 * noise * x.norm() / math.sqrt(x.numel())  # 10 % relative perturbation
        v, g = obj.value_grad(z)
        vals.append(v), gns.append(g.norm().item())
    finite = [v for v in vals if math.isfinite(v)]
    star_hi = min(finite)
    star_lo = max(lower_bound, star_hi - gain)
    unc = star_hi - star_lo
    floor = max(4 * unc, rel_floor * max(abs(star_hi), max(finite) - star_hi, 1e-300))
    elig = [
        (v - star_hi, v - star_lo, gn)
        for v, gn in zip(vals, gns, strict=True)
        if math.isfinite(v) and v - star_hi > floor
    ]
    stuck = any(gn == 0.0 for _, _, gn in elig)
    ratios_lo = [0.5 * gn**2 / g_lo for _, g_lo, gn in elig]
    elig.sort()
    near = elig[: max(4, len(elig) // 2)]
    pl_slope, pl_r2, pl_dec = _fit(
        [g for g, _, _ in near], [0.5 * gn**2 / g for g, _, gn in near if gn > 0] or [1.0]
    )
    if len(near) != sum(gn > 0 for _, _, gn in near):
        pl_slope, pl_r2, pl_dec = math.nan, math.nan, 0.0
    # Smoothness: Hessian at iterates spread geometrically along the judged run.
    idx = sorted(
        {kept[round((len(kept) - 1) * k / max(hessian_at - 1, 1))] for k in range(hessian_at)}
    )
    hess = {t: top_hessian_eig(obj, judged.xs[t], judged.grads[t], power_iters, seed) for t in idx}
    secants = {
        b: (judged.grads[b] - judged.grads[a]).norm().item()
        / (judged.xs[b] - judged.xs[a]).norm().item()
        for a, b in itertools.pairwise(kept)
        if b == a + 1 and (judged.xs[b] - judged.xs[a]).norm().item() > 0
    }
    # Curvature estimates (Hessian and secants) against the gap of the point they belong to.
    curv = [(t, h) for t, h in hess.items()] + list(secants.items())
    h_pts = [
        (judged.values[t] - star_hi, h)
        for t, h in curv
        if judged.values[t] - star_hi > floor and h > 0
    ]
    h_slope, h_r2, h_dec = _fit([g for g, _ in h_pts], [h for _, h in h_pts])
    h_growth = (max(h for _, h in h_pts) / min(h for _, h in h_pts)) if h_pts else math.nan
    lip_hess = max(hess.values(), default=math.nan)
    lip_sec = max(secants.values(), default=math.nan)
    lip_hat = max(v for v in (lip_hess, lip_sec, 0.0) if math.isfinite(v))
    mu_hat = min(ratios_lo, default=math.nan)
    gaps = [g for g, _, _ in elig]
    gap_dec = math.log10(gaps[-1] / gaps[0]) if len(gaps) > 1 else 0.0
    median_gap = gaps[len(gaps) // 2] if gaps else math.nan
    reasons = []
    if pl_slope >= PL_SLOPE and pl_r2 >= MIN_R2 and pl_dec >= MIN_DECADES:
        reasons.append(f"PL ratio vanishes as L → L* (slope {pl_slope:.2f})")
    if stuck:
        reasons.append("a point above L* with zero gradient")
    if (
        h_slope <= HESS_SLOPE
        and h_r2 >= MIN_R2
        and h_dec >= MIN_DECADES
        and h_growth >= HESS_GROWTH
    ):
        reasons.append(f"Hessian grows as L → L* (slope {h_slope:.2f}, ×{h_growth:.1f})")
    uninformative = bound_uninformative(analytic_bound, lip_hat)
    if math.isfinite(analytic_bound) and not uninformative and lip_hat > 1.05 * analytic_bound:
        reasons.append(f"L̂ {lip_hat:.3g} exceeds the analytical bound {analytic_bound:.3g}")
    if reasons:
        verdict = "contradicted"
    elif (
        len(elig) >= 6
        and gap_dec >= 1.0
        and mu_hat > 0
        and math.isfinite(lip_hat)
        and not (pl_slope >= PL_SLOPE)
        and unc <= 0.5 * median_gap
    ):
        verdict = "supported"
        reasons.append("μ̂ > 0 and L̂ finite over the sampled points")
    else:
        verdict = "inconclusive"
        reasons.append(f"{len(elig)} eligible points over {gap_dec:.1f} decades, L* ± {unc:.2g}")
    q = torch.tensor(ratios_lo, dtype=torch.float64) if ratios_lo else torch.tensor([math.nan])
    return {
        "verdict": verdict,
        "reason": "; ".join(reasons),
        "L_star_lo": star_lo,
        "L_star_hi": star_hi,
        "mu_hat": mu_hat,
        "mu_q50": float(q.nanquantile(0.5)),
        "mu_q90": float(q.nanquantile(0.9)),
        "lipschitz_hessian": lip_hess,
        "lipschitz_secant": lip_sec,
        "lipschitz_bound": analytic_bound,
        "bound_uninformative": uninformative,
        "pl_slope": pl_slope,
        "hessian_slope": h_slope,
        "n_points": len(elig),
        "gap_decades": gap_dec,
        "rate_pred": 1.0 - mu_hat / lip_hat if lip_hat > 0 and math.isfinite(mu_hat) else math.nan,
        "check_evaluations": len(long.values) + 2 * points + len(idx) * power_iters,
        "steps_taken": steps,
        "steps_pred": predicted_steps(
            mu_hat, lip_hat, judged.values[0] - star_lo, judged.values[best] - star_lo
        ),
    }


def bound_uninformative(bound: float, measured: float) -> bool:
    """Whether an analytical Lipschitz bound sits more than ``UNINFORMATIVE`` above the
    measured curvature (Hessian, secants): the "bound below curvature" trigger can then never
    fire, so the bound is shown as uninformative and not counted as a check."""
    if not (math.isfinite(bound) and math.isfinite(measured)) or measured <= 0:
        return False
    return bound > UNINFORMATIVE * measured


def predicted_steps(mu: float, lip: float, gap0: float, gap_eps: float) -> float:
    """Theorem 4.1's steps to bring the gap L − L* from ``gap0`` down to ε = ``gap_eps`` at
    the linear rate 1 − μ/L (step 1/L): k = ln(gap0/ε) / −ln(1 − μ/L). NaN where undefined."""
    if not all(math.isfinite(v) for v in (mu, lip, gap0, gap_eps)):
        return math.nan
    if mu <= 0 or lip <= 0 or gap0 <= 0 or gap_eps <= 0:
        return math.nan
    if gap_eps >= gap0:
        return 0.0
    rate = mu / lip
    if rate >= 1.0:  # one exact step (μ̂ ≤ L̂ for a true PL function; estimates can cross)
        return 1.0
    return math.log(gap0 / gap_eps) / -math.log1p(-rate)
