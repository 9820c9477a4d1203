"""Local swap search on binary Q/K masks: the objective's in-sample headroom around a mask.

Starting from a binary keep mask (Wanda's, say), each round takes the data term's gradient g
at the binary mask and proposes one swap per output row: restore the pruned entry with the
most negative g (restoring a small pruned weight is a small move, and the first-order change
+g_i predicted it within ~10 % on smollm2) and prune the kept entry with the smallest |g_j|
(removing a large kept weight is far outside the first-order model: on smollm2's layer 8 a
removal predicted at −4.9 raised L by +15, so the least sensitive kept entry is removed).
The ``batch`` rows of most negative predicted change g_i − g_j are swapped at once and kept if
the exact loss fell (the batch then doubles); otherwise the batch is halved. Every row keeps
its count of kept entries, so the sparsity (row scope) is exact throughout. It minimises the
binarised objective directly, with no relaxation, so what it gains over its start is headroom
the objective offers on the calibration data, whatever a continuous optimiser does.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import Tensor

from core.methods.attention_gd.objective import GroupProblem


@dataclass
class SwapResult:
    keep_q: Tensor  # (r, d, d_h) bool
    keep_k: Tensor  # (d, d_h) bool
    losses: list[float] = field(default_factory=list)  # data term after each accepted round
    swaps: int = 0  # accepted swaps in all
    evaluations: int = 0


def to_rows(Mq: Tensor, Mk: Tensor) -> Tensor:
    """(r, d, d_h), (d, d_h) -> (r·d_h + d_h, d): one row per output unit (nn.Linear row)."""
    return torch.cat([Mq.transpose(1, 2).reshape(-1, Mq.shape[1]), Mk.T])


def from_rows(rows: Tensor, Mq: Tensor) -> tuple[Tensor, Tensor]:
    r, d, head_dim = Mq.shape
    q = rows[: r * head_dim].view(r, head_dim, d).transpose(1, 2)
    return q, rows[r * head_dim :].T


def swap_search(
    problem: GroupProblem,
    keep_q: Tensor,
    keep_k: Tensor,
    max_evaluations: int = 20,
    batch: int = 64,
) -> SwapResult:
    """Greedy batched swap descent on the data term L(M) at binary M (λ = 0), from the keep
    masks ``keep_q`` (r, d, d_h) and ``keep_k`` (d, d_h); at most ``max_evaluations`` loss and
    gradient evaluations; ``batch``: swaps tried in the first round (rows of best predicted
    gain first, at most one swap per row and round). The loss never rises."""
    dtype = problem.Wq.dtype
    keep = to_rows(keep_q, keep_k).clone()
    ev = problem.loss_and_grad(*(m.to(dtype) for m in from_rows(keep, keep_q)), 0.0)
    out = SwapResult(keep_q, keep_k, [ev.loss.item()], evaluations=1)
    while out.evaluations < max_evaluations and batch >= 1:
        g = to_rows(ev.grad_q, ev.grad_k)
        inf = torch.tensor(float("inf"), dtype=g.dtype)
        i_rm = torch.where(keep, g.abs(), inf).argmin(1)  # least sensitive kept entry
        g_add, i_add = torch.where(keep, inf, g).min(1)  # restoring i changes L by ≈ +g_i
        gain = g_add - g.gather(1, i_rm[:, None]).squeeze(1)
        rows = torch.nonzero(gain < 0).squeeze(1)
        if rows.numel() == 0:
            break
        rows = rows[gain[rows].argsort()[:batch]]
        trial = keep.clone()
        trial[rows, i_rm[rows]] = False
        trial[rows, i_add[rows]] = True
        new = problem.loss_and_grad(*(m.to(dtype) for m in from_rows(trial, keep_q)), 0.0)
        out.evaluations += 1
        if new.loss.item() < ev.loss.item():
            keep, ev = trial, new
            out.swaps += rows.numel()
            out.losses.append(ev.loss.item())
            batch = min(2 * batch, keep.shape[0])
        else:
            batch = rows.numel() // 2
    out.keep_q, out.keep_k = from_rows(keep, keep_q)
    return out
