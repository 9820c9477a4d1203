"""Paper B's smoothness constant, bounded analytically (papers.md §3 (i)).

The sound upper bound below is printed beside the measured estimates (diagnostics); it
covers the objective without q/k biases and norms (Paper B's form, with or without RoPE).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import Tensor

from core.methods.attention_gd.objective import sequences


def lipschitz_upper_bound(
    X: Tensor | Sequence[Tensor],
    Wq_heads: Tensor,
    Wk: Tensor,
    lam: float,
    mask_bound: float = 1.0,
    x_norms: Tensor | None = None,
) -> float:
    """A sound upper bound on the Lipschitz constant of ∇L over the box {|M_ij| ≤ B}.

    B = ``mask_bound`` (1 covers the [0, 1] box that ``clip`` keeps M in); ``x_norms``:
    ``spectral_norms(X)`` when already computed (it is shared by a layer's groups). Per sequence
    (n tokens) and head h, with ‖·‖ the Frobenius and ‖·‖₂ the spectral norm:

    1. Softmax row s(a), c = s − y: ‖J_s‖₂ ≤ ½ (Gershgorin: row i of diag(s) − ssᵀ sums to
       2s_i(1 − s_i)); ∇²s_i = s_i[(e_i − s)(e_i − s)ᵀ − J_s] has ‖·‖₂ ≤ s_i(2 + ½); |c_i| ≤ 1.
       So ½‖s − y‖² has Hessian ‖·‖₂ ≤ ¼ + 5/2 = 11/4 =: β in a, and ∇_a = p with
       ‖p‖ ≤ ½‖c‖ ≤ √2/2, hence ‖P_h‖ ≤ √(n/2).
    2. q̂ = R(XQ̃_h), k̂ = R(XK̃) with R orthogonal per position. With ξ = ‖X‖₂:
       α_Q = ξ·max|W_{Q,h}|, α_K = ξ·max|W_K| bound the linear maps δM ↦ R(X(δM∘W)), and
       ρ_Q = ξB‖W_{Q,h}‖, ρ_K = ξB‖W_K‖ bound ‖q̂‖, ‖k̂‖ on the box.
    3. A = q̂k̂ᵀ/√d_h is bilinear in (M_Q, M_K): ‖DA[u]‖ ≤ (α_Qρ_K‖u_Q‖ + ρ_Qα_K‖u_K‖)/√d_h
       and ‖D²A[u, u]‖ ≤ 2α_Qα_K‖u_Q‖‖u_K‖/√d_h, so with Cauchy-Schwarz
       |uᵀ∇²ℓ_h u| ≤ β‖DA[u]‖² + ‖P_h‖‖D²A[u, u]‖ ≤ c_h‖u‖²,
       c_h = β(α_Q²ρ_K² + ρ_Q²α_K²)/d_h + √(n/2)·α_Qα_K/√d_h.
    4. Heads share u_K: Σ_h c_h(‖u_{Q,h}‖² + ‖u_K‖²) ≤ (Σ_h c_h)‖u‖². Summing over
       sequences and adding the penalty: L_grad ≤ λ + Σ_seq Σ_h c_h.

    Valid with or without RoPE and the causal mask. It grows like ξ⁴‖W‖⁴, so on real layers
    it is orders of magnitude above the measured secant constants: a safe step 1/bound, not
    an estimate of the curvature.
    """
    head_dim = Wq_heads.shape[-1]
    dtype = torch.float64
    Wq, Wk = Wq_heads.to(dtype), Wk.to(dtype)
    beta = 11.0 / 4.0
    a_q = Wq.abs().amax((1, 2))  # (r,) max|W_{Q,h}|
    a_k = Wk.abs().amax()
    f_q = mask_bound * torch.linalg.vector_norm(Wq, dim=(1, 2))  # (r,) B‖W_{Q,h}‖
    f_k = mask_bound * torch.linalg.vector_norm(Wk)
    seqs = sequences(X)
    x_norms = spectral_norms(seqs) if x_norms is None else x_norms
    total = 0.0
    for x, xi in zip(seqs, x_norms.to(dtype).cpu(), strict=True):
        alpha_q, alpha_k, rho_q, rho_k = xi * a_q, xi * a_k, xi * f_q, xi * f_k
        c = beta * (alpha_q**2 * rho_k**2 + rho_q**2 * alpha_k**2) / head_dim
        c = c + math.sqrt(x.shape[0] / 2) * alpha_q * alpha_k / math.sqrt(head_dim)
        total += float(c.sum())
    return lam + total


def spectral_norms(X: Tensor | Sequence[Tensor]) -> Tensor:
    """(N,) float64 ‖X_n‖₂ per sequence: √λ_max of the smaller Gram matrix (eigvalsh is a few
    times cheaper than an SVD of the (L, d) sequence)."""
    out = []
    for x in sequences(X):
        x = x.double()
        gram = x @ x.T if x.shape[0] <= x.shape[1] else x.T @ x
        out.append(torch.linalg.eigvalsh(gram)[-1].clamp_min(0.0).sqrt().cpu())
    return torch.stack(out)
