"""Second-order saliency of the attention objective itself (Optimal Brain Damage on Paper B's
data term), for the headroom table's "obd (attention H)" row.

At M = 1 the data term L(M) = Σ_seq Σ_h ½‖f_h(M) − Y_h‖²_F is 0 and so is its gradient, and its
Hessian is exactly the Gauss–Newton matrix H = JᵀJ with J = ∂f/∂M (the term that multiplies the
residual f − Y vanishes there). Pruning entry m alone (M_m: 1 → 0) therefore changes L by
½·H_mm + O(3rd order): the saliency ½·H_mm = ½·Σ_outputs (∂f/∂M_m)². Keeping the entries of
largest saliency per row is "keep by second-order saliency, no reconstruction", on the attention
objective rather than on a layer's output (SparseGPT/OBS use H = XᵀX of the layer's inputs).

The diagonal is computed exactly, not sampled. Row t of head h, s = f_h(M)_t, depends on the
scores a_t through the softmax Jacobian J_t = diag(s) − ssᵀ, so ∂s/∂M_m = J_t ∂a_t/∂M_m and
‖J_t v‖² = Σ_u s_u²(v_u − ⟨s, v⟩)². With q̂_t = R_t q_t/√d_h and k̂_u = R_u k_u (RoPE R):
  Q entry (h, i, c): ∂a_tu/∂M = X_ti W_ic (R_tᵀ k̂_u)_c/√d_h: a factor X_ti W_ic per row, so
    H = W_ic² Σ_t X_ti² ‖J_t K'_t[:, c]‖² (one GEMM over tokens);
  K entry (i, c): ∂a_tu/∂M = X_ui W_ic (R_uᵀ q̂_t)_c varies along the row, so
    ‖J_t v‖² = Σ_u s_u²v_u² − 2μν + μ²Σ_u s_u² with μ = Σ_u s_u v_u, ν = Σ_u s_u² v_u,
    which needs the (t, i, c) tensors μ, ν: r·L²·d·d_h per sequence, the costly part
    (smollm2-135m layer 8, one group: 0.26 s on 8 × 64 tokens and 1.1 s on 36 × 64, against
    0.11 s and 0.31 s for the 20-evaluation swap search; 2 CPU cores).
Biases enter through s only; per-head q/k RMSNorms (Qwen3) are not covered (ValueError).
"""

from __future__ import annotations

import torch
from torch import Tensor

from core.errors import ConfigError
from core.evaluation.attention_ops import rope_adjoint
from core.methods.attention_gd.objective import GroupProblem, HeadExtras, to_heads, to_linear
from core.methods.masks import score_mask


def attention_saliency(problem: GroupProblem) -> tuple[Tensor, Tensor]:
    """½·diag(∇²L) at M = 1 of the group's data term (module docstring): the second-order change
    of L when one mask entry goes from 1 to 0 alone. Returns (r, d, d_h) for M_Q and (d, d_h)
    for M_K, in ``problem``'s layout (``objective.to_heads``)."""
    if problem.q_gain is not None or problem.k_gain is not None:
        raise ValueError("attention_saliency: per-head q/k norms are not covered")
    Wq, Wk = problem.Wq, problem.Wk
    hq, hk = torch.zeros_like(Wq), torch.zeros_like(Wk)  # Σ_t X² · (row terms)
    for ch in problem.chunks:
        _, _, _, _, q, k, S = problem.intermediates(ch, Wq, Wk)  # q: (n, r, L, d_h) with 1/√d_h
        for x, qj, kj, sj in zip(ch.X, q, k, S, strict=True):
            hq += _q_terms(x, qj, kj, sj, ch.rope, problem.scale)
            hk += _k_terms(x, qj, sj, ch.rope)
    return 0.5 * Wq.square() * hq, 0.5 * Wk.square() * hk


def _q_terms(x: Tensor, q: Tensor, k: Tensor, s: Tensor, rope, scale: float) -> Tensor:
    """Σ_t X_ti² ‖J_t K'_t[:, c]‖² for one sequence: (r, d, d_h). x (L, d), q (r, L, d_h),
    k (L, d_h) rotated, s (r, L, L); K'_t[u] = R_tᵀ k̂_u/√d_h."""
    L = x.shape[0]
    kp = k[None].expand(L, L, -1)  # [t, u] = k̂_u
    if rope is not None:
        cos, sin = rope
        kp = rope_adjoint(kp, cos[:, None], sin[:, None])  # R_tᵀ k̂_u
    kp = kp * scale
    sv = s[..., None] * kp  # (r, L, L, d_h): s_u v_u
    B = sv - s[..., None] * sv.sum(-2, keepdim=True)  # J_t v = s∘(v − ⟨s, v⟩)
    beta = B.square().sum(-2)  # (r, L, d_h)
    return torch.einsum("ti,rtc->ric", x.square(), beta)


def _k_terms(x: Tensor, q: Tensor, s: Tensor, rope) -> Tensor:
    """Σ_h Σ_t ‖J_t v‖² with v_u = X_ui (R_uᵀ q̂_t)_c, for one sequence: (d, d_h)."""
    r, L, dh = q.shape
    qp = q[:, :, None].expand(r, L, L, dh)  # [h, t, u] = q̂_t
    if rope is not None:
        qp = rope_adjoint(qp, *rope)  # tables along u (dim −2): R_uᵀ q̂_t
    s2 = s.square()
    x2 = x.square()
    # Σ_u s_u² v_u² summed over h, t: Σ_u X_ui² Σ_{h,t} s_tu² q'_tuc²
    out = x2.T @ (s2[..., None] * qp.square()).sum((0, 1))
    sig = s2.sum(-1)  # (r, L): Σ_u s_u²
    for h in range(r):  # μ, ν: (L, d, d_h) per head
        a = torch.stack([s[h][..., None] * qp[h], s2[h][..., None] * qp[h]])  # (2, L, L, d_h)
        mu, nu = torch.einsum("ptuc,ui->ptic", a, x).unbind(0)
        out += (mu * (mu * sig[h][:, None, None] - 2 * nu)).sum(0)
    return out


def obd_keep(problem: GroupProblem, sparsity: dict[str, float]) -> tuple[Tensor, Tensor]:
    """Bool keep masks in nn.Linear layout, (r·d_h, d) for W_Q and (d_h, d) for W_K: per row
    the entries of largest saliency ½·[∇²L]_mm (``attention_saliency``), ``sparsity`` per role
    pruned (Optimal Brain Damage on the attention objective, no reconstruction)."""
    sal_q, sal_k = attention_saliency(problem)
    return (
        ~score_mask(to_linear(sal_q), sparsity["q"], "row"),
        ~score_mask(sal_k.T, sparsity["k"], "row"),
    )


def obd_masks(X, Wq, Wk, options, rope, extras: HeadExtras, sparsity) -> tuple[Tensor, Tensor]:
    """attention-gd's M₀ for ``init="obd_mask"`` on one GQA group: ``obd_keep`` of the group's
    objective (its rows Wq (r·d_h, d), Wk (d_h, d) of nn.Linear, windows X (N, L, d)) as 0/1
    masks in that layout; ConfigError for q/k norms, which the saliency does not cover."""
    head_dim = Wk.shape[0]
    problem = GroupProblem(X, to_heads(Wq, head_dim), Wk.T, options.causal, rope, Wq.dtype, extras)
    try:
        keep_q, keep_k = obd_keep(problem, sparsity)
    except ValueError as exc:
        raise ConfigError(f"attention-gd: init='obd_mask': {exc}") from exc
    return keep_q.to(Wq.dtype), keep_k.to(Wk.dtype)
