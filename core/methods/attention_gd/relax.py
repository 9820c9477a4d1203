"""Relaxations that keep the budget: the mask held on the k-sparse polytope while it descends.

The free relaxation lets every entry of M move anywhere: its continuous optimum is the dense
M = 1, so the descent's gain is spent on entries binarisation then prunes (docs/design-notes.md,
"Where it fails"). Each reading here keeps every output row at its budget of k kept entries
(row scope, as the method binarises) at every step, so the continuous point is comparable
with a k-sparse mask:

* "polytope": projected descent on P_k = {0 ≤ M ≤ 1, Σ_row M = k}; after every optimiser step
  each row is projected onto P_k (``project_rows``, the exact Euclidean projection).
* "anneal": the same projection plus a binarisation penalty ρ_t·Σ M(1 − M), ρ_t rising
  linearly from 0 at the first step to ρ = ``anneal_weight``·n_rows/n_params at the step cap
  (the scaling of λ: options.lam), which drives the iterate to a vertex of P_k, a binary
  k-sparse mask, by the end.
* "topk": straight-through top-k: the loss and gradient are taken at the binary mask
  top_k(M) of each row, so the budget is exact at every step, and the gradient updates the
  latent continuous M, which only ranks.

Layout: the group's masks M_Q (r, d, d_h) and M_K (d, d_h) as one (r·d_h + d_h, d) block of
nn.Linear rows (``swaps.to_rows``), with the kept count of each row.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from core.methods.attention_gd.objective import GroupProblem, LossGrad
from core.methods.attention_gd.swaps import from_rows, to_rows

BISECTIONS = 100  # halvings of the shift's bracket: past float64's resolution of any row


def project_rows(V: Tensor, k: Tensor | float) -> Tensor:
    """Euclidean projection of each row of V (..., n) onto {0 ≤ m ≤ 1, Σ m = k}.

    The KKT conditions give m = clamp(v − τ, 0, 1) with one shift τ per row; Σ clamp(v − τ)
    falls monotonically from n at τ = min v − 1 to 0 at τ = max v, so τ is found by
    bisection on that bracket, then refined by one exact step on the free entries
    (0 < m < 1), which makes the row sum k to rounding. k: per row (...,) or one number,
    0 ≤ k ≤ n."""
    k = torch.as_tensor(k, dtype=V.dtype, device=V.device).expand(V.shape[:-1])
    if bool(((k < 0) | (k > V.shape[-1])).any()):
        raise ValueError(f"every row's budget must lie in [0, {V.shape[-1]}]")
    lo = V.amin(-1) - 1.0  # Σ clamp = n ≥ k
    hi = V.amax(-1)  # Σ clamp = 0 ≤ k
    for _ in range(BISECTIONS):
        tau = (lo + hi) / 2
        above = (V - tau[..., None]).clamp(0.0, 1.0).sum(-1) > k
        lo, hi = torch.where(above, tau, lo), torch.where(above, hi, tau)
    tau = (lo + hi) / 2
    M = (V - tau[..., None]).clamp(0.0, 1.0)
    free = (M > 0) & (M < 1)
    n_free = free.sum(-1)
    shift = (M.sum(-1) - k) / n_free.clamp_min(1)
    tau = torch.where(n_free > 0, tau + shift, tau)
    return (V - tau[..., None]).clamp(0.0, 1.0)


def topk_rows(V: Tensor, k: Tensor) -> Tensor:
    """0/1 mask (same dtype) keeping the k[i] largest entries of each row i of V (n_rows, n)."""
    order = V.argsort(dim=-1, descending=True, stable=True)
    rank = torch.empty_like(order)
    rank.scatter_(-1, order, torch.arange(V.shape[-1], device=V.device).expand_as(order))
    return (rank < k[:, None]).to(V.dtype)


@dataclass(frozen=True)
class Budget:
    """Kept entries per nn.Linear row of one GQA group: ``keep_q`` (r·d_h,) for W_Q's rows
    (``objective.to_linear`` order), ``keep_k`` (d_h,) for W_K's."""

    keep_q: Tensor
    keep_k: Tensor

    def counts(self) -> Tensor:
        return torch.cat([self.keep_q, self.keep_k])

    def project(self, Mq: Tensor, Mk: Tensor) -> tuple[Tensor, Tensor]:
        """(M_Q, M_K) projected row by row onto the polytope P_k."""
        rows = to_rows(Mq, Mk)
        return from_rows(project_rows(rows, self.counts().to(rows)), Mq)

    def binary(self, Mq: Tensor, Mk: Tensor) -> tuple[Tensor, Tensor]:
        """(M_Q, M_K) as 0/1 masks keeping each row's top k (the straight-through forward)."""
        return from_rows(topk_rows(to_rows(Mq, Mk), self.counts().to(Mq.device)), Mq)


def anneal_weight(weight_rel: float, problem: GroupProblem, step: int, cap: int) -> float:
    """ρ_t = weight_rel · n_rows/n_params · t/cap: the binarisation penalty's weight at step t
    (``effective_lam``'s scaling, so weight_rel = 1 is one unit of squared row error per
    attention row at M = ½)."""
    return 4.0 * weight_rel * problem.n_rows / problem.n_params * min(step, cap) / max(cap, 1)


def with_binarisation_penalty(ev: LossGrad, Mq: Tensor, Mk: Tensor, rho: float) -> LossGrad:
    """``ev`` plus ρ·Σ M(1 − M) and its gradient ρ(1 − 2M): zero at every binary mask, largest
    (ρ/4 per entry) at M = ½."""
    if rho == 0.0:
        return ev
    pen = rho * ((Mq * (1 - Mq)).sum() + (Mk * (1 - Mk)).sum())
    return LossGrad(
        ev.loss + pen, ev.data, ev.grad_q + rho * (1 - 2 * Mq), ev.grad_k + rho * (1 - 2 * Mk)
    )


class RelaxedLoss:
    """What the optimiser descends at (M_Q, M_K), λ and step t: L itself ("free",
    "polytope"), L plus the annealed binarisation penalty ("anneal"), or L and its gradient
    at each row's binary top k ("topk"); ``project`` keeps an iterate on the polytope."""

    def __init__(self, problem: GroupProblem, options, budget: Budget | None) -> None:
        if options.relax != "free" and budget is None:
            raise ValueError(f"relax={options.relax!r} needs each row's kept count")
        self.problem, self.relax, self.budget = problem, options.relax, budget
        self.weight, self.cap = options.anneal_weight, options.steps
        self.projects = options.relax in ("polytope", "anneal")

    def __call__(self, Mq: Tensor, Mk: Tensor, lam: float, step: int) -> LossGrad:
        if self.relax == "topk":
            Mq, Mk = self.budget.binary(Mq, Mk)
        ev = self.problem.loss_and_grad(Mq, Mk, lam)
        if self.relax == "anneal":
            rho = anneal_weight(self.weight, self.problem, step, self.cap)
            ev = with_binarisation_penalty(ev, Mq, Mk, rho)
        return ev

    def project(self, Mq: Tensor, Mk: Tensor) -> tuple[Tensor, Tensor]:
        return self.budget.project(Mq, Mk) if self.projects else (Mq, Mk)
