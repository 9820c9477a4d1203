"""Algorithm 1 of Paper B on one GQA group: M₀, the λ schedule, the step rule and stopping.

M_{t+1} = M_t − η_t∇L(M_t) (``optimizer="gd"``; Adam or L-BFGS steps from ``steppers``
otherwise) until the relative loss change falls below ``tol`` or the cap T is reached. λ is
made commensurate with the data term (``effective_lam``), M₀ can carry a baseline's ranking
(``initial_mask``) and λ can be annealed (continuation: 10λ, λ, λ/10).
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor

from core.errors import ConfigError
from core.methods.attention_gd.diagnostics import Descent
from core.methods.attention_gd.objective import GroupProblem, HeadExtras, LossGrad
from core.methods.attention_gd.options import DTYPES, INITS, AttentionGDOptions
from core.methods.attention_gd.relax import Budget, RelaxedLoss
from core.methods.attention_gd.steppers import ADAM_LR, adam_steps, lbfgs_steps
from core.methods.masks import score_mask
from core.methods.wanda import wanda_scores

log = logging.getLogger(__name__)
MAX_HALVINGS = 40  # step-size halvings before a step is given up as numerically converged


def initial_mask(
    W: Tensor,
    init: str,
    col_sq_norms: Tensor | None = None,
    generator: torch.Generator | None = None,
    sparsity: float = 0.0,
    scope: str = "row",
) -> Tensor:
    """M₀ for an (out, in) weight, continuous in [0, 1]:
    "ones"; "magnitude" |W_ij| / max_j |W_ij|; "wanda" S_ij / max_j S_ij with Wanda's
    S = |W|·‖X_j‖ (``col_sq_norms`` (in,) = ‖X_j‖²); "random" U(0, 1) from ``generator``.
    Binarising the scaled inits by M per row reproduces that baseline's mask exactly.
    "wanda_mask": the 0/1 Wanda keep mask at ``sparsity`` and ``scope``."""
    if init == "ones":
        return torch.ones_like(W)
    if init == "wanda_mask":
        if col_sq_norms is None:
            raise ConfigError("init='wanda_mask' needs the input column norms")
        return (~score_mask(wanda_scores(W, col_sq_norms.to(W)), sparsity, scope)).to(W.dtype)
    if init == "magnitude":
        S = W.abs()
    elif init == "wanda":
        if col_sq_norms is None:
            raise ConfigError("init='wanda' needs the input column norms")
        S = W.abs() * col_sq_norms.to(W).sqrt()
    elif init == "random":
        return torch.rand(W.shape, generator=generator, dtype=torch.float64).to(W)
    elif init == "obd_mask":
        raise ConfigError("init='obd_mask' needs each group's objective (saliency.obd_masks)")
    else:
        raise ConfigError(f"init must be one of {INITS}, got {init!r}")
    return S / S.amax(-1, keepdim=True).clamp_min(torch.finfo(W.dtype).tiny)


def effective_lam(lam_rel: float, problem: GroupProblem) -> float:
    """λ = λ_rel · n_rows / n_params (options docstring): the penalty at M = 1 equals λ_rel
    units of squared row error per attention row of the data term."""
    return lam_rel * problem.n_rows / problem.n_params


def lam_stages(options: AttentionGDOptions, lam: float) -> list[tuple[float, int]]:
    """(λ, step cap) per stage: one stage, or the continuation 10λ, λ, λ/10."""
    if options.lam_schedule == "constant" or options.steps == 0:
        return [(lam, options.steps)]
    cap = max(1, options.steps // 3)
    return [(10 * lam, cap), (lam, cap), (lam / 10, options.steps - 2 * cap)]


@dataclass
class GroupResult:
    """Outcome of ``gd_prune_group``.

    trajectory rows (matrix "group", "q" (head h) or "k"): step, loss, data_loss, grad_norm,
    step_size, lam, lipschitz_est (group secant). run: the group's iterates for the checks.
    """

    Mq: Tensor  # (r, d, d_h) M_T
    Mk: Tensor  # (d, d_h)
    Mq0: Tensor
    Mk0: Tensor
    problem: GroupProblem
    lam: float  # the λ of the last stage
    trajectory: list[dict[str, Any]]
    run: Descent = field(repr=False)
    evaluations: int = 0
    seconds: float = 0.0
    converged: bool = False  # the last stage stopped on ``tol`` (or could not descend), not the cap

    @property
    def mask_delta(self) -> float:
        """‖M_T − M₀‖_F / ‖M₀‖_F: how far GD moved the masks."""
        num = (self.Mq - self.Mq0).square().sum() + (self.Mk - self.Mk0).square().sum()
        den = self.Mq0.square().sum() + self.Mk0.square().sum()
        return math.sqrt(num.item() / max(den.item(), 1e-300))


def _norm(*ts: Tensor) -> float:
    return math.sqrt(sum(t.square().sum().item() for t in ts))


def _flat(Mq: Tensor, Mk: Tensor) -> Tensor:
    return torch.cat([Mq.flatten(), Mk.flatten()])


def _curvature(problem: GroupProblem, Mq, Mk, lam, iters: int, base: LossGrad) -> float:
    """Top |eigenvalue| of ∇²L at M by power iteration on forward-difference HVPs."""
    gen = torch.Generator().manual_seed(0)
    vq = torch.randn(Mq.shape, generator=gen, dtype=torch.float64).to(Mq)
    vk = torch.randn(Mk.shape, generator=gen, dtype=torch.float64).to(Mk)
    eps = math.sqrt(torch.finfo(Mq.dtype).eps) * max(1.0, _norm(Mq, Mk))
    estimate = 0.0
    for _ in range(iters):
        n = _norm(vq, vk)
        vq, vk = vq / n, vk / n
        ev = problem.loss_and_grad(Mq + eps * vq, Mk + eps * vk, lam)
        vq, vk = (ev.grad_q - base.grad_q) / eps, (ev.grad_k - base.grad_k) / eps
        estimate = _norm(vq, vk)
        if estimate == 0.0:
            break
    return estimate


def gd_prune_group(
    X: Tensor | Sequence[Tensor],
    Wq_heads: Tensor,
    Wk: Tensor,
    options: AttentionGDOptions,
    rope: tuple[Tensor, Tensor] | None = None,
    Mq0: Tensor | None = None,
    Mk0: Tensor | None = None,
    extras: HeadExtras | None = None,
    budget: Budget | None = None,
) -> GroupResult:
    """GD on one GQA group (papers.md §3 Algorithm 1), per λ stage until
    |L_t − L_{t+1}| ≤ tol·L_t or the stage's cap; ``options.optimizer`` "adam" / "lbfgs" take
    their steps (``_steps``) under the same stopping rule.

    X: calibration sequences (``GroupProblem``); Wq_heads (r, d, d_h), Wk (d, d_h); Mq0, Mk0:
    M₀ (default ones). "auto"/"backtracking" accept a step when the descent lemma
    L(M⁺) ≤ L(M) + ⟨∇L, M⁺ − M⟩ + ‖M⁺ − M‖²/(2η) holds (true for η ≤ 1/L_grad) and halve η
    otherwise; "auto" starts at η = 1/L̂ (power iteration) and lowers it with every secant.
    ``budget``: each row's kept count, needed by the budget relaxations (``options.relax``,
    relax.py), which descend on ``RelaxedLoss`` and project every step onto its polytope.
    """
    start = time.perf_counter()
    dtype = DTYPES[options.dtype]
    problem = GroupProblem(X, Wq_heads, Wk, options.causal, rope, dtype, extras)
    Mq = torch.ones_like(problem.Wq) if Mq0 is None else Mq0.to(problem.Wq).clone()
    Mk = torch.ones_like(problem.Wk) if Mk0 is None else Mk0.to(problem.Wk).clone()
    first_q, first_k = Mq.clone(), Mk.clone()
    relaxed = RelaxedLoss(problem, options, budget)
    Mq, Mk = relaxed.project(Mq, Mk)  # M₀ onto the polytope (Wanda's mask already lies on it)
    stages = lam_stages(options, effective_lam(options.lam, problem))
    lam = stages[0][0]
    ev = relaxed(Mq, Mk, lam, 0)
    evals, step_no, rows = 1, 0, []
    run = Descent()
    eta = options.eta if options.eta is not None else 1.0
    if options.step == "auto" and options.optimizer != "adam":
        curvature = _curvature(problem, Mq, Mk, lam, options.power_iters, ev)
        evals += options.power_iters
        eta = 1.0 / max(curvature, lam, torch.finfo(dtype).eps)
    slack = 64 * torch.finfo(dtype).eps  # relative rounding allowance of the descent test
    secant = math.nan

    def record() -> None:
        g_q = ev.grad_q.square().sum((1, 2))
        g_k = ev.grad_k.square().sum()
        pen_q = 0.5 * lam * Mq.square().sum((1, 2))
        base = {"step": step_no, "step_size": eta, "lam": lam}
        rows.append(
            {
                **base,
                "matrix": "group",
                "head": -1,
                "loss": ev.loss.item(),
                "data_loss": ev.data.sum().item(),
                "grad_norm": math.sqrt((g_q.sum() + g_k).item()),
                "lipschitz_est": secant,
            }
        )
        for h in range(len(g_q)):
            rows.append(
                {
                    **base,
                    "matrix": "q",
                    "head": h,
                    "data_loss": ev.data[h].item(),
                    "loss": (ev.data[h] + pen_q[h]).item(),
                    "grad_norm": g_q[h].sqrt().item(),
                }
            )
        rows.append(
            {
                **base,
                "matrix": "k",
                "head": -1,
                "data_loss": ev.data.sum().item(),
                "loss": ev.loss.item() - pen_q.sum().item(),
                "grad_norm": g_k.sqrt().item(),
            }
        )
        if options.checks != "none":
            run.values.append(ev.loss.item())
            run.grad_norms.append(math.sqrt((g_q.sum() + g_k).item()))
            run.xs[step_no], run.grads[step_no] = _flat(Mq, Mk), _flat(ev.grad_q, ev.grad_k)

    for stage, (lam, cap) in enumerate(stages):
        if stage > 0:  # same M, new λ: only the penalty changes
            ev = relaxed(Mq, Mk, lam, step_no)
            evals += 1
            run = Descent()  # the checks judge the last stage: a single objective
        record()
        converged = False
        if cap == 0:  # steps = 0: M_T = M₀
            continue
        if options.optimizer != "gd":
            taken = 0
            for st in _steps(options, relaxed, Mq, Mk, lam, ev, eta, step_no):
                prev = ev.loss.item()
                secant = _norm(st.aux.grad_q - ev.grad_q, st.aux.grad_k - ev.grad_k) / max(
                    (st.x - _flat(Mq, Mk)).norm().item(), 1e-300
                )
                Mq, Mk = _split(st.x, Mq, Mk)
                ev, eta = st.aux, st.step_size
                evals, step_no, taken = evals + st.evaluations, step_no + 1, taken + 1
                record()
                # top-k's loss is piecewise constant in the latent M: no tolerance stop
                stalled = abs(prev - st.loss) <= options.tol * abs(prev)
                converged = stalled and options.relax != "topk"
                if converged or taken >= cap:
                    break
            else:  # the optimiser found no descending step: numerically stationary
                converged = True
            continue
        for _ in range(cap):
            if _norm(ev.grad_q, ev.grad_k) == 0.0:
                converged = True
                break
            if options.step == "backtracking":
                eta *= 2.0
            new: LossGrad | None = None
            for _ in range(MAX_HALVINGS):
                Mq_new = Mq - eta * ev.grad_q
                Mk_new = Mk - eta * ev.grad_k
                if options.clip:
                    Mq_new.clamp_(0.0, 1.0), Mk_new.clamp_(0.0, 1.0)
                Mq_new, Mk_new = relaxed.project(Mq_new, Mk_new)
                if options.step == "fixed":
                    break
                new = relaxed(Mq_new, Mk_new, lam, step_no + 1)
                evals += 1
                dq, dk = Mq_new - Mq, Mk_new - Mk
                bound = ev.loss.item() + ((ev.grad_q * dq).sum() + (ev.grad_k * dk).sum()).item()
                bound += _norm(dq, dk) ** 2 / (2 * eta) + slack * abs(ev.loss.item())
                if new.loss.item() <= bound:
                    break
                eta /= 2.0
            else:
                log.debug("no acceptable step after %d halvings: stopping", MAX_HALVINGS)
                converged = True
                break
            if new is None:
                new = relaxed(Mq_new, Mk_new, lam, step_no + 1)
                evals += 1
            secant = _norm(new.grad_q - ev.grad_q, new.grad_k - ev.grad_k) / max(
                _norm(Mq_new - Mq, Mk_new - Mk), 1e-300
            )
            if options.step == "auto" and math.isfinite(secant) and secant > 0:
                eta = min(eta, 1.0 / secant)
            prev = ev.loss.item()
            Mq, Mk, ev = Mq_new, Mk_new, new
            step_no += 1
            record()
            if abs(prev - ev.loss.item()) <= options.tol * abs(prev):
                converged = True
                break
    return GroupResult(
        Mq,
        Mk,
        first_q,
        first_k,
        problem,
        lam,
        rows,
        run,
        evals,
        time.perf_counter() - start,
        converged,
    )


def _split(x: Tensor, Mq: Tensor, Mk: Tensor) -> tuple[Tensor, Tensor]:
    """Flat (vec M_Q, vec M_K) -> M_Q, M_K shaped like ``Mq``, ``Mk``."""
    return x[: Mq.numel()].view(Mq.shape), x[Mq.numel() :].view(Mk.shape)


def _steps(options, relaxed: RelaxedLoss, Mq, Mk, lam: float, ev: LossGrad, eta: float, t0: int):
    """The Adam / L-BFGS step generator (``steppers``) of one λ stage from (M_Q, M_K), on
    ``relaxed`` (the objective, or its budget reading) from step ``t0`` on."""
    step = t0

    def evaluate(x: Tensor) -> tuple[float, Tensor, LossGrad]:
        nonlocal step
        step += 1
        e = relaxed(*_split(x, Mq, Mk), lam, step)
        return e.loss.item(), _flat(e.grad_q, e.grad_k), e

    def project(x: Tensor) -> Tensor:
        if options.clip:
            x = x.clamp(0.0, 1.0)
        return _flat(*relaxed.project(*_split(x, Mq, Mk)))

    x, g = _flat(Mq, Mk), _flat(ev.grad_q, ev.grad_k)
    if options.optimizer == "adam":
        lr = options.eta if options.eta is not None else ADAM_LR
        keep_in = options.clip or relaxed.projects
        return adam_steps(evaluate, x, g, lr, project if keep_in else None)
    first = eta if options.step == "auto" or options.eta is not None else None
    return lbfgs_steps(evaluate, x, ev.loss.item(), g, first_step=first)
