"""Paper B: pruning Q/K by gradient descent on the attention-matrix error (papers.md §3, §7).

Liang, Long, Shi, Song, Zhou, "Beyond Linear Approximations: A Novel Pruning Approach for
Attention Matrix" (ICLR 2025). In the GQA form the authors used on real LLMs, each group of r
query heads sharing one key head gets continuous masks M_{Q,h}, M_K (d×d_h, papers.md's
convention; nn.Linear stores the transpose) that minimise, summed over calibration sequences,

    L(M) = Σ_seq Σ_h ½‖f_h(M) − Y_h‖²_F + ½λ(Σ_h ‖M_{Q,h}‖²_F + ‖M_K‖²_F)
    f_h(M) = softmax_c(R(X Q̃_h) R(X K̃)ᵀ / √d_h),  Q̃_h = M_{Q,h}∘W_{Q,h},  K̃ = M_K∘W_K

with Y_h = f_h(1) the dense attention, softmax_c the (causal) row softmax and R RoPE (the
identity when ``rope=False``; Paper B's softmax(XWXᵀ) has none, Llama applies it before the
product). GD runs for T steps, then the masks are binarised at the target sparsity and
W ← M_bin∘W. V/O/MLP are left alone or pruned by Wanda/SparseGPT (``others``, the authors'
hybrid).

Closed-form gradient (papers.md §3). With S_h = f_h(M), C_h = S_h − Y_h, row j of P_h is
p_j = s_j∘c_j − s_j⟨s_j, c_j⟩ (= ∂ℓ/∂A_h). Without RoPE, with G_h = Xᵀ P_h X/√d_h,

    ∇_{M_{Q,h}} L = W_{Q,h}∘(G_h K̃) + λM_{Q,h},   ∇_{M_K} L = W_K∘Σ_h G_hᵀ Q̃_h + λM_K.

With RoPE, A_h = q̂_h k̂ᵀ/√d_h with q̂_h = R(XQ̃_h), k̂ = R(XK̃), and R acts on each position by
an orthogonal matrix R_i, so the chain rule only inserts the adjoint Rᵀ:

    ∇_{M_{Q,h}} L = W_{Q,h}∘(Xᵀ Rᵀ(P_h k̂)/√d_h) + λM_{Q,h}
    ∇_{M_K} L     = W_K∘(Xᵀ Rᵀ(Σ_h P_hᵀ q̂_h)/√d_h) + λM_K,

which is the formula above when R = I. Products are taken right to left, so the d×d G_h is
never formed: a step costs O(n²d_h + n·d·d_h) per head and sequence, vectorised over the
heads of a group and over sequences.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any, NamedTuple

import torch
from torch import Tensor

from core.attention import (
    apply_rope,
    attention_errors,
    attention_probs,
    causal_mask,
    compute_dtype,
    rope_adjoint,
    rope_tables,
)
from core.errors import ConfigError
from core.masks import SCOPES, check_sparsity, scope_dim, topk_prune_mask
from core.methods import get_method, register
from core.methods.base import LayerContext, LinearReport, Method
from core.methods.linear import relative_reconstruction_error
from core.methods.magnitude import magnitude_mask
from core.methods.wanda import wanda_mask

log = logging.getLogger(__name__)

STEP_RULES = ("auto", "backtracking", "fixed")
INITS = ("ones", "magnitude", "wanda")
BINARIZE_RULES = ("mask", "mask_times_weight")
OTHERS = ("none", "wanda", "sparsegpt")
DTYPES = {"float32": torch.float32, "float64": torch.float64}
# Largest (n, r, L, L) score block held at once: 2^24 entries = 128 MiB in float64.
CHUNK_ELEMS = 1 << 24
MAX_HALVINGS = 40  # step-size halvings before a step is given up as numerically converged
RATE_TOL = 0.02  # slack on the rate comparison of ``convergence_verdict``


@dataclass(frozen=True)
class AttentionGDOptions:
    """Options of ``attention-gd``; Paper B's own values are unknown (papers.md §3 [U]).

    lam: λ ≥ 0 of the ½λ‖M‖² penalty. The loss is a sum over sequences and rows, so λ
        trades off against roughly (sequences × heads × tokens); too large a λ (ηλ ≈ 1)
        sends M to 0, a stationary point where attention is uniform.
    steps: T ≥ 1 GD steps. step: "auto" (η = 1/L̂, L̂ = power-iteration curvature at M₀,
        raised by every secant estimate, doubled while the descent-lemma test fails),
        "backtracking" (Armijo/descent-lemma backtracking from ``eta`` or 1, ×2 each step)
        or "fixed" (η = ``eta``, no test). eta: the fixed or first step (> 0).
    power_iters: Hessian-vector products used by "auto" to estimate L̂.
    init: M₀ = "ones" (data term and its gradient vanish there, so step 1 only shrinks
        every entry by ηλ) or the binary keep mask of "magnitude" / "wanda" at the target.
    rope: apply RoPE before the product (Llama does; Paper B's formula has none).
    causal: causal softmax. clip: project M onto [0, 1] after each step.
    binarize: score to keep the top entries by: "mask" (M) or "mask_times_weight" (|M∘W|).
    scope: comparison group of the binarisation, "row" (output row) or "matrix".
    max_seq: calibration sequences used (the first ones; the paper used 8).
    dtype: GD precision. others: how V/O/MLP are pruned in the same run.

    Defaults are ours (papers.md §3 [U]): T = 30 keeps a 30-layer 135M model within minutes
    on 2 cores; "auto" follows the theory (η ≤ 1/L); "ones" is the literal reading of the
    algorithm; |M∘W| scores because M alone ranks near-ties (from M₀ = 1 most entries only
    shrink uniformly); per-row scope as Wanda; RoPE on as in Llama.
    """

    lam: float = 1e-2
    steps: int = 30
    step: str = "auto"
    eta: float | None = None
    power_iters: int = 5
    init: str = "ones"
    rope: bool = True
    causal: bool = True
    clip: bool = False
    binarize: str = "mask_times_weight"
    scope: str = "row"
    max_seq: int = 8
    dtype: str = "float32"
    others: str = "none"

    def __post_init__(self) -> None:
        def check(cond: bool, msg: str) -> None:
            if not cond:
                raise ConfigError(f"attention-gd: {msg}")

        check(math.isfinite(self.lam) and self.lam >= 0, f"lam must be >= 0, got {self.lam}")
        check(
            self.eta is None or (math.isfinite(self.eta) and self.eta > 0),
            f"eta must be > 0, got {self.eta}",
        )
        check(self.steps >= 1, f"steps must be >= 1, got {self.steps}")
        check(self.step in STEP_RULES, f"step must be one of {STEP_RULES}, got {self.step!r}")
        check(self.step != "fixed" or self.eta is not None, "step='fixed' needs eta")
        check(self.power_iters >= 1, f"power_iters must be >= 1, got {self.power_iters}")
        check(self.init in INITS, f"init must be one of {INITS}, got {self.init!r}")
        check(
            self.binarize in BINARIZE_RULES,
            f"binarize must be one of {BINARIZE_RULES}, got {self.binarize!r}",
        )
        check(self.scope in SCOPES, f"scope must be one of {SCOPES}, got {self.scope!r}")
        check(self.max_seq >= 1, f"max_seq must be >= 1, got {self.max_seq}")
        check(self.dtype in DTYPES, f"dtype must be one of {tuple(DTYPES)}, got {self.dtype!r}")
        check(self.others in OTHERS, f"others must be one of {OTHERS}, got {self.others!r}")


# ---------------------------------------------------------------------------------------------
# Layout helpers: nn.Linear (r·d_h, d) <-> papers.md heads (r, d, d_h).


def to_heads(W: Tensor, head_dim: int) -> Tensor:
    """(r·d_h, d) nn.Linear rows of r heads -> (r, d, d_h), W_{Q,h} in papers.md's layout."""
    return W.unflatten(0, (-1, head_dim)).transpose(1, 2)


def to_linear(M: Tensor) -> Tensor:
    """(r, d, d_h) -> (r·d_h, d), the inverse of ``to_heads``."""
    return M.transpose(1, 2).reshape(-1, M.shape[1])


def _sequences(X: Tensor | Sequence[Tensor]) -> list[Tensor]:
    """(L, d), (N, L, d) or a list of (L_i, d) / (1, L_i, d) -> list of (L_i, d)."""
    if isinstance(X, Tensor):
        return [X] if X.dim() == 2 else list(X.reshape(-1, *X.shape[-2:]))
    return [x.reshape(-1, x.shape[-1]) for x in X]


# ---------------------------------------------------------------------------------------------
# Loss and closed-form gradient of one GQA group.


class LossGrad(NamedTuple):
    loss: Tensor  # () total loss L(M)
    data: Tensor  # (r,) per-head data term Σ_seq ½‖f_h(M) − Y_h‖²_F
    grad_q: Tensor  # (r, d, d_h) ∇_{M_Q} L
    grad_k: Tensor  # (d, d_h) ∇_{M_K} L


@dataclass
class _Chunk:
    X: Tensor  # (n, L, d) sequences of one length
    Y: Tensor  # (n, r, L, L) dense attention of the group's heads
    rope: tuple[Tensor, Tensor] | None  # (cos, sin), each (L, d_h)
    keep: Tensor | None  # (L, L) causal support, None when not causal


class GroupProblem:
    """One GQA group's calibration problem, with the dense targets Y_h computed once.

    X: (N, L, d), (L, d) or a list of (L_i, d) normed q_proj inputs. Wq_heads: (r, d, d_h),
    Wk: (d, d_h) (papers.md layout, see ``to_heads``). rope: (cos, sin) or None.
    Sequences are grouped by length and split into chunks of at most ``CHUNK_ELEMS`` scores.
    """

    def __init__(
        self,
        X: Tensor | Sequence[Tensor],
        Wq_heads: Tensor,
        Wk: Tensor,
        causal: bool = True,
        rope: tuple[Tensor, Tensor] | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        dtype = dtype or compute_dtype(Wq_heads)
        self.Wq = Wq_heads.to(dtype)  # (r, d, d_h)
        self.Wk = Wk.to(device=self.Wq.device, dtype=dtype)  # (d, d_h)
        r, _, head_dim = self.Wq.shape
        self.scale = 1.0 / math.sqrt(head_dim)
        self.chunks: list[_Chunk] = []
        by_len: dict[int, list[Tensor]] = {}
        for x in _sequences(X):
            by_len.setdefault(x.shape[0], []).append(x.to(device=self.Wq.device, dtype=dtype))
        for length, xs in by_len.items():
            tables = rope_tables(rope, length, dtype, self.Wq.device) if rope else None
            keep = causal_mask(length, self.Wq.device) if causal else None
            per_chunk = max(1, CHUNK_ELEMS // (r * length * length))
            for Xc in torch.stack(xs).split(per_chunk):
                chunk = _Chunk(Xc, Xc.new_empty(0), tables, keep)
                chunk.Y = self._forward(chunk, self.Wq, self.Wk)[2]
                self.chunks.append(chunk)

    def _forward(self, ch: _Chunk, Qt: Tensor, Kt: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """q̂ (n, r, L, d_h), k̂ (n, L, d_h) and S = f(M) (n, r, L, L) for Q̃ = Qt, K̃ = Kt."""
        n, length, d = ch.X.shape
        r, _, head_dim = Qt.shape
        q = ch.X @ Qt.transpose(0, 1).reshape(d, r * head_dim)  # (n, L, r·d_h): one GEMM
        q = q.view(n, length, r, head_dim).transpose(1, 2)  # (n, r, L, d_h)
        k = ch.X @ Kt  # (n, L, d_h)
        if ch.rope is not None:
            q, k = apply_rope(q, *ch.rope), apply_rope(k, *ch.rope)
        scores = (q @ k.unsqueeze(1).transpose(-1, -2)).mul_(self.scale)  # (n, r, L, L)
        if ch.keep is not None:
            scores.masked_fill_(~ch.keep, float("-inf"))
        return q, k, torch.softmax(scores, dim=-1)

    def _masked(self, Mq: Tensor, Mk: Tensor) -> tuple[Tensor, Tensor]:
        return Mq.to(self.Wq.dtype) * self.Wq, Mk.to(self.Wq.dtype) * self.Wk

    def _penalty(self, Mq: Tensor, Mk: Tensor, lam: float) -> Tensor:
        return 0.5 * lam * (Mq.square().sum() + Mk.square().sum())

    def loss(self, Mq: Tensor, Mk: Tensor, lam: float) -> Tensor:
        """L(M) only (no backward pass): used by backtracking line search."""
        Qt, Kt = self._masked(Mq, Mk)
        data = sum(
            0.5 * torch.linalg.vector_norm(self._forward(ch, Qt, Kt)[2] - ch.Y).square()
            for ch in self.chunks
        )
        return data + self._penalty(Mq, Mk, lam)

    def loss_and_grad(self, Mq: Tensor, Mk: Tensor, lam: float) -> LossGrad:
        """L(M) and the closed-form gradient (module docstring; papers.md §3)."""
        Qt, Kt = self._masked(Mq, Mk)  # (r, d, d_h), (d, d_h)
        r, d, head_dim = Qt.shape
        data = Qt.new_zeros(r)
        gQ = torch.zeros_like(Qt)  # Σ_seq Xᵀ Rᵀ(∂ℓ/∂q̂_h), = G_h K̃ without RoPE
        gK = torch.zeros_like(Kt)  # Σ_seq Xᵀ Rᵀ(∂ℓ/∂k̂),   = Σ_h G_hᵀ Q̃_h without RoPE
        for ch in self.chunks:
            n, length, _ = ch.X.shape
            q, k, S = self._forward(ch, Qt, Kt)
            C = S - ch.Y  # (n, r, L, L); zero off the causal support
            data += 0.5 * torch.linalg.vector_norm(C, dim=(0, 2, 3)).square()
            # P rows p_j = s_j∘c_j − s_j⟨s_j, c_j⟩, written over S and C to save memory.
            P = S.mul_(C.sub_(torch.linalg.vecdot(S, C).unsqueeze(-1)))
            dq = (P @ k.unsqueeze(1)).mul_(self.scale)  # (n, r, L, d_h) = ∂ℓ/∂q̂_h
            dk = (P.transpose(-1, -2) @ q).sum(1).mul_(self.scale)  # (n, L, d_h) = ∂ℓ/∂k̂
            if ch.rope is not None:
                dq, dk = rope_adjoint(dq, *ch.rope), rope_adjoint(dk, *ch.rope)
            Xt = ch.X.reshape(n * length, d).T  # (d, n·L)
            dq = dq.transpose(1, 2).reshape(n * length, r * head_dim)  # (n·L, r·d_h)
            gQ += (Xt @ dq).view(d, r, head_dim).transpose(0, 1)
            gK += Xt @ dk.reshape(n * length, head_dim)
        grad_q = self.Wq * gQ + lam * Mq
        grad_k = self.Wk * gK + lam * Mk
        return LossGrad(data.sum() + self._penalty(Mq, Mk, lam), data, grad_q, grad_k)


def group_loss_and_grad(
    X_list: Tensor | Sequence[Tensor],
    Wq_heads: Tensor,
    Wk: Tensor,
    Mq: Tensor,
    Mk: Tensor,
    lam: float,
    causal: bool = True,
    rope: tuple[Tensor, Tensor] | None = None,
) -> LossGrad:
    """L(M) and its closed-form gradient for one GQA group (papers.md §3 GQA form + RoPE).

    Wq_heads, Mq: (r, d, d_h); Wk, Mk: (d, d_h); computed in the dtype of Wq_heads (float64
    in tests). For repeated evaluations build a ``GroupProblem`` once instead.
    """
    return GroupProblem(X_list, Wq_heads, Wk, causal, rope).loss_and_grad(Mq, Mk, lam)


def group_loss_autograd(
    X_list: Tensor | Sequence[Tensor],
    Wq_heads: Tensor,
    Wk: Tensor,
    Mq: Tensor,
    Mk: Tensor,
    lam: float,
    causal: bool = True,
    rope: tuple[Tensor, Tensor] | None = None,
) -> LossGrad:
    """Reference for ``group_loss_and_grad``: the same loss through ``attention_probs`` (one
    sequence at a time, GQA as 1 KV head) and torch.autograd. Slow; for tests and benchmarks."""
    r, _, head_dim = Wq_heads.shape
    Mq = Mq.detach().clone().requires_grad_(True)
    Mk = Mk.detach().clone().requires_grad_(True)
    with torch.enable_grad():
        data = Wq_heads.new_zeros(r)
        for x in _sequences(X_list):
            x = x.to(Wq_heads.dtype)
            dense = attention_probs(x, to_linear(Wq_heads), Wk.T, r, 1, head_dim, causal, rope)
            pruned = attention_probs(
                x, to_linear(Mq * Wq_heads), (Mk * Wk).T, r, 1, head_dim, causal, rope
            )
            data = data + 0.5 * (pruned - dense).square().sum((1, 2))
        loss = data.sum() + 0.5 * lam * (Mq.square().sum() + Mk.square().sum())
        grad_q, grad_k = torch.autograd.grad(loss, (Mq, Mk))
    return LossGrad(loss.detach(), data.detach(), grad_q, grad_k)


# ---------------------------------------------------------------------------------------------
# Smoothness: a sound bound and a measured estimate.


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
    seqs = _sequences(X)
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
    for x in _sequences(X):
        x = x.double()
        gram = x @ x.T if x.shape[0] <= x.shape[1] else x.T @ x
        out.append(torch.linalg.eigvalsh(gram)[-1].clamp_min(0.0).sqrt().cpu())
    return torch.stack(out)


def estimate_smoothness(
    problem: GroupProblem, Mq: Tensor, Mk: Tensor, lam: float, iters: int, base: LossGrad
) -> float:
    """Top |eigenvalue| of ∇²L at M by power iteration on finite-difference Hessian-vector
    products Hv ≈ (∇L(M + εv) − ∇L(M))/ε, ε = √eps·max(1, ‖M‖), from a seeded random v.

    A measured (lower) estimate of the local smoothness, not a bound; ``base`` is ∇L(M).
    """
    gen = torch.Generator().manual_seed(0)
    vq = torch.randn(Mq.shape, generator=gen, dtype=torch.float64).to(Mq)
    vk = torch.randn(Mk.shape, generator=gen, dtype=torch.float64).to(Mk)
    m_norm = torch.sqrt(Mq.square().sum() + Mk.square().sum()).item()
    eps = math.sqrt(torch.finfo(Mq.dtype).eps) * max(1.0, m_norm)
    estimate = 0.0
    for _ in range(iters):
        v_norm = torch.sqrt(vq.square().sum() + vk.square().sum())
        vq, vk = vq / v_norm, vk / v_norm
        ev = problem.loss_and_grad(Mq + eps * vq, Mk + eps * vk, lam)
        vq, vk = (ev.grad_q - base.grad_q) / eps, (ev.grad_k - base.grad_k) / eps
        estimate = torch.sqrt(vq.square().sum() + vk.square().sum()).item()
        if estimate == 0.0:
            break
    return estimate


# ---------------------------------------------------------------------------------------------
# Diagnostics: PL ratios and the convergence verdict.


def pl_ratios(losses: Tensor, grad_norms: Tensor) -> Tensor:
    """Empirical PL ratios ½‖∇L_t‖² / (L_t − L*), L* = the best loss seen.

    NaN where L_t − L* is not above rounding (at the best step it is 0/0). Since the true
    minimum is ≤ L*, these over-estimate a PL constant μ of the path.
    """
    best = losses.min()
    gap = losses - best
    ok = gap > 64 * torch.finfo(torch.float32).eps * best.abs().clamp_min(1e-30)
    return torch.where(ok, 0.5 * grad_norms.square() / gap, torch.nan)


def convergence_verdict(
    losses: Tensor, pl: Tensor, lipschitz: Tensor, step_sizes: Tensor
) -> dict[str, Any]:
    """Compare the observed linear rate with the PL rate (Theorem 4.1's mechanism).

    Inputs per step t = 0..T (float64; ``lipschitz`` and ``step_sizes`` NaN at t = T).
    Rule: fit log(L_t − L*) = a + t·log ρ_obs by least squares over the steps with a
    positive gap (L* = best loss; the best step itself is excluded). μ̂ = min_t PL ratio,
    L̂ = max_t secant estimate, η̄ = median step. PL plus the descent lemma (η ≤ 1/L) give
    L_{t+1} − L* ≤ (1 − μη)(L_t − L*), so ρ_pred = 1 − μ̂η̄ (clamped to [0, 1]). Verdict:
      "too_few_points"   fewer than 3 positive gaps;
      "not_decreasing"   L_T ≥ L_0;
      "step_too_large"   η̄·L̂ > 2 (outside GD's descent regime);
      "as_predicted"     ρ_obs ≤ ρ_pred + RATE_TOL (linear at least at the PL rate);
      "slower_than_pl"   otherwise.
    """
    out: dict[str, Any] = {
        "mu": _nanreduce(pl, torch.amin),
        "lipschitz_min": _nanreduce(lipschitz, torch.amin),
        "lipschitz_max": _nanreduce(lipschitz, torch.amax),
        "step_size": _nanreduce(step_sizes, torch.nanmedian),
        "rate_obs": math.nan,
        "rate_pred": math.nan,
        "fit_r2": math.nan,
    }
    if math.isfinite(out["mu"]) and math.isfinite(out["step_size"]):
        out["rate_pred"] = min(max(1.0 - out["mu"] * out["step_size"], 0.0), 1.0)
    gap = losses - losses.min()
    t = torch.arange(len(losses), dtype=torch.float64)[gap > 0]
    if len(t) < 3:
        out["verdict"] = "too_few_points"
        return out
    y = gap[gap > 0].log()
    tc, yc = t - t.mean(), y - y.mean()
    slope = (tc * yc).sum() / tc.square().sum()
    resid = yc - slope * tc
    out["rate_obs"] = math.exp(slope.item())
    out["fit_r2"] = 1.0 - (resid.square().sum() / yc.square().sum().clamp_min(1e-300)).item()
    if losses[-1] >= losses[0]:
        out["verdict"] = "not_decreasing"
    elif out["step_size"] * out["lipschitz_max"] > 2.0:
        out["verdict"] = "step_too_large"
    elif out["rate_obs"] <= out["rate_pred"] + RATE_TOL:
        out["verdict"] = "as_predicted"
    else:
        out["verdict"] = "slower_than_pl"
    return out


def _nanreduce(x: Tensor, fn: Any) -> float:
    x = x[torch.isfinite(x)]
    return float(fn(x)) if len(x) else math.nan


# ---------------------------------------------------------------------------------------------
# Gradient descent on one group.


@dataclass
class GroupResult:
    """Outcome of ``gd_prune_group``: continuous masks plus the recorded trajectory.

    trajectory rows: matrix ("group" | "q" | "k"), head (query head within the group, -1
    for "group"/"k"), step, loss, data_loss, grad_norm, step_size, lipschitz_est, pl_ratio.
    For a "q" row the loss is head h's data term plus ½λ‖M_{Q,h}‖²; for "k" it is the group's
    data term plus ½λ‖M_K‖²; the secant and PL ratio use that block of the gradient.
    blocks: ``convergence_verdict`` of "q" heads 0..r-1, then "k", then "group", each with
    matrix/head, its first and last (data) loss and the final mean mask ``mask_mean_end``.
    """

    Mq: Tensor  # (r, d, d_h)
    Mk: Tensor  # (d, d_h)
    trajectory: list[dict[str, Any]]
    blocks: list[dict[str, Any]]
    lipschitz_bound: float  # ``lipschitz_upper_bound`` with B = max(1, max_t |M_t|)
    evaluations: int  # loss(+gradient) evaluations, line search and power iteration included
    seconds: float

    @property
    def summary(self) -> dict[str, Any]:
        """The "group" block: diagnostics of the joint optimisation."""
        return self.blocks[-1]


def _norm(*ts: Tensor) -> float:
    return math.sqrt(sum(t.square().sum().item() for t in ts))


def gd_prune_group(
    X: Tensor | Sequence[Tensor],
    Wq_heads: Tensor,
    Wk: Tensor,
    options: AttentionGDOptions,
    rope: tuple[Tensor, Tensor] | None = None,
    Mq0: Tensor | None = None,
    Mk0: Tensor | None = None,
    x_norms: Tensor | None = None,
) -> GroupResult:
    """Algorithm 1 of Paper B on one GQA group: M_{t+1} = M_t − η_t∇L(M_t), t < T.

    X: calibration sequences (see ``GroupProblem``); Wq_heads (r, d, d_h), Wk (d, d_h);
    rope: (cos, sin) to apply RoPE, None for none (``options.rope`` is the caller's switch).
    Mq0, Mk0: M₀ (default ones). x_norms: ``spectral_norms(X)`` if known. Step sizes follow ``options.step``; "auto" and
    "backtracking" accept a step when L(M⁺) ≤ L(M) + ⟨∇L, M⁺ − M⟩ + ‖M⁺ − M‖²/(2η) (the
    descent lemma, true whenever η ≤ 1/L_grad; with ``clip`` M⁺ is projected onto [0, 1]) and
    halve η otherwise. The returned masks are continuous; ``binarize`` makes the keep mask.
    """
    start = time.perf_counter()
    dtype = DTYPES[options.dtype]
    problem = GroupProblem(X, Wq_heads, Wk, options.causal, rope, dtype)
    lam = options.lam
    Mq = torch.ones_like(problem.Wq) if Mq0 is None else Mq0.to(problem.Wq).clone()
    Mk = torch.ones_like(problem.Wk) if Mk0 is None else Mk0.to(problem.Wk).clone()
    ev = problem.loss_and_grad(Mq, Mk, lam)
    evals = 1
    hist = _History(lam)
    hist.add(ev, Mq, Mk)
    eta = options.eta if options.eta is not None else 1.0
    if options.step == "auto":
        curvature = estimate_smoothness(problem, Mq, Mk, lam, options.power_iters, ev)
        evals += options.power_iters
        eta = 1.0 / max(curvature, lam, torch.finfo(dtype).eps)
    slack = 64 * torch.finfo(dtype).eps  # relative rounding allowance of the descent test
    for t in range(options.steps):
        if _norm(ev.grad_q, ev.grad_k) == 0.0:
            log.debug("stationary point after %d steps", t)
            break
        if options.step == "backtracking" and t > 0:
            eta *= 2.0
        new: LossGrad | None = None
        for _ in range(MAX_HALVINGS):
            Mq_new = _project(Mq - eta * ev.grad_q, options.clip)
            Mk_new = _project(Mk - eta * ev.grad_k, options.clip)
            if options.step == "fixed":
                break
            if options.step == "auto":  # usually accepted: the gradient is needed anyway
                new = problem.loss_and_grad(Mq_new, Mk_new, lam)
                value = new.loss.item()
            else:
                value = problem.loss(Mq_new, Mk_new, lam).item()
            evals += 1
            dq, dk = Mq_new - Mq, Mk_new - Mk
            bound = ev.loss.item() + ((ev.grad_q * dq).sum() + (ev.grad_k * dk).sum()).item()
            bound += _norm(dq, dk) ** 2 / (2 * eta) + slack * abs(ev.loss.item())
            if value <= bound:
                break
            eta /= 2.0
        else:
            log.debug("no acceptable step after %d halvings at step %d: stopping", MAX_HALVINGS, t)
            break
        if new is None:
            new = problem.loss_and_grad(Mq_new, Mk_new, lam)
            evals += 1
        secant = hist.step(eta, new, Mq_new, Mk_new)
        if options.step == "auto" and math.isfinite(secant) and secant > 0:
            eta = min(eta, 1.0 / secant)  # L̂ only grows: η_t = 1/max(power, secants, halvings)
        Mq, Mk, ev = Mq_new, Mk_new, new
    trajectory, blocks = hist.rows()
    # Final mean mask per block: ≈ 0 flags the collapse to M = 0 that a large ηλ causes.
    means = [*Mq.mean((1, 2)).tolist(), Mk.mean().item()]
    means.append((Mq.sum().item() + Mk.sum().item()) / (Mq.numel() + Mk.numel()))
    for block, mean in zip(blocks, means, strict=True):
        block["mask_mean_end"] = mean
    box = max(1.0, hist.max_abs)
    bound = lipschitz_upper_bound(X, problem.Wq, problem.Wk, lam, box, x_norms)
    return GroupResult(
        Mq=Mq,
        Mk=Mk,
        trajectory=trajectory,
        blocks=blocks,
        lipschitz_bound=bound,
        evaluations=evals,
        seconds=time.perf_counter() - start,
    )


def _project(M: Tensor, clip: bool) -> Tensor:
    return M.clamp_(0.0, 1.0) if clip else M


class _History:
    """Per-step records of the whole group and of each mask block (q heads, k)."""

    def __init__(self, lam: float) -> None:
        self.lam = lam
        self.max_abs = 0.0
        # Per evaluation t: (r + 2,) values for blocks q_0..q_{r-1}, k, group.
        self.loss: list[Tensor] = []
        self.data: list[Tensor] = []
        self.grad: list[Tensor] = []
        self.eta: list[float] = []
        self.secant: list[Tensor] = []
        self.prev: tuple[LossGrad, Tensor, Tensor] | None = None

    def add(self, ev: LossGrad, Mq: Tensor, Mk: Tensor) -> None:
        data = ev.data.double().cpu()
        pen_q = 0.5 * self.lam * Mq.double().square().sum((1, 2)).cpu()  # (r,)
        pen_k = 0.5 * self.lam * Mk.double().square().sum().cpu()
        gq = ev.grad_q.double().square().sum((1, 2)).cpu()  # (r,) squared block norms
        gk = ev.grad_k.double().square().sum().cpu()
        total = data.sum()
        loss = ev.loss.double().view(1).cpu()
        self.loss.append(torch.cat([data + pen_q, (total + pen_k).view(1), loss]))
        self.data.append(torch.cat([data, total.view(1), total.view(1)]))
        self.grad.append(torch.cat([gq, gk.view(1), (gq.sum() + gk).view(1)]).sqrt())
        self.max_abs = max(self.max_abs, Mq.abs().max().item(), Mk.abs().max().item())
        self.prev = (ev, Mq, Mk)

    def step(self, eta: float, ev: LossGrad, Mq: Tensor, Mk: Tensor) -> float:
        """Record the step M_t -> M_{t+1} = (Mq, Mk) and return the group secant estimate."""
        old, Mq0, Mk0 = self.prev
        dgq = (ev.grad_q - old.grad_q).double().square().sum((1, 2)).cpu()
        dgk = (ev.grad_k - old.grad_k).double().square().sum().cpu()
        dmq = (Mq - Mq0).double().square().sum((1, 2)).cpu()
        dmk = (Mk - Mk0).double().square().sum().cpu()
        num = torch.cat([dgq, dgk.view(1), (dgq.sum() + dgk).view(1)]).sqrt()
        den = torch.cat([dmq, dmk.view(1), (dmq.sum() + dmk).view(1)]).sqrt()
        secant = torch.where(den > 0, num / den, torch.nan)
        self.eta.append(eta)
        self.secant.append(secant)
        self.add(ev, Mq, Mk)
        return secant[-1].item()

    def rows(self) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        loss, data, grad = (torch.stack(v) for v in (self.loss, self.data, self.grad))  # (T+1, B)
        n_steps, n_blocks = loss.shape
        nan = torch.full((1, n_blocks), torch.nan, dtype=torch.float64)
        secant = torch.cat([torch.stack(self.secant), nan]) if self.secant else nan
        eta = torch.tensor([*self.eta, math.nan], dtype=torch.float64)
        pl = torch.stack([pl_ratios(loss[:, b], grad[:, b]) for b in range(n_blocks)], 1)
        names = [("q", h) for h in range(n_blocks - 2)] + [("k", -1), ("group", -1)]
        trajectory = [
            {
                "matrix": names[b][0],
                "head": names[b][1],
                "step": t,
                "loss": loss[t, b].item(),
                "data_loss": data[t, b].item(),
                "grad_norm": grad[t, b].item(),
                "step_size": eta[t].item(),
                "lipschitz_est": secant[t, b].item(),
                "pl_ratio": pl[t, b].item(),
            }
            for t in range(n_steps)
            for b in (n_blocks - 1, *range(n_blocks - 1))
        ]
        blocks = [
            {
                "matrix": names[b][0],
                "head": names[b][1],
                "loss_start": loss[0, b].item(),
                "loss_end": loss[-1, b].item(),
                "data_loss_start": data[0, b].item(),
                "data_loss_end": data[-1, b].item(),
                "steps": n_steps - 1,
                **convergence_verdict(loss[:, b], pl[:, b], secant[:, b], eta),
            }
            for b in range(n_blocks)
        ]
        return trajectory, blocks


# ---------------------------------------------------------------------------------------------
# Initialisation and binarisation (nn.Linear layout).


def initial_mask(
    W: Tensor, init: str, sparsity: float, scope: str, col_sq_norms: Tensor | None = None
) -> Tensor:
    """M₀ for an (out, in) weight: ones, or the 0/1 keep mask of magnitude / Wanda pruning at
    ``sparsity`` and ``scope``; GD then starts at (and refines) that baseline's mask, so
    L(M₀) is the baseline's attention error. ``col_sq_norms`` (in,) is needed for "wanda"."""
    if init == "ones" or sparsity == 0.0:
        return torch.ones_like(W)
    if init == "magnitude":
        prune = magnitude_mask(W, sparsity, scope)
    elif init == "wanda":
        if col_sq_norms is None:
            raise ConfigError("init='wanda' needs the input column norms")
        prune = wanda_mask(W, col_sq_norms, sparsity, scope)
    else:
        raise ConfigError(f"init must be one of {INITS}, got {init!r}")
    return (~prune).to(W.dtype)


def mask_scores(M: Tensor, W: Tensor, rule: str) -> Tensor:
    """Binarisation scores, higher = keep: M itself ("mask") or |M∘W| ("mask_times_weight")."""
    if rule == "mask":
        return M
    if rule == "mask_times_weight":
        return (M * W).abs()
    raise ConfigError(f"binarize must be one of {BINARIZE_RULES}, got {rule!r}")


def binarize(scores: Tensor, sparsity: float, scope: str) -> Tensor:
    """Bool keep mask (out, in) with exactly ⌊sparsity·n⌋ False per row ("row") or per matrix
    ("matrix"); among equal scores the lower index is pruned first (stable sort, core.masks)."""
    return ~topk_prune_mask(scores, check_sparsity(sparsity), scope_dim(scope))


# ---------------------------------------------------------------------------------------------
# The registered method.


@register
class AttentionGD(Method):
    """Paper B on every layer: joint Q/K mask GD per GQA group, then binarise and write back.

    Needs the q_proj inputs (``ctx.inputs["q"]``, (N, L, d) float32) and, with ``rope``, the
    layer's RoPE tables (``ctx.position_embeddings``). Tables written: "gd_trajectory" (one
    row per layer, group, block and step), "gd_heads" (one row per query head, key head and
    group: measured L range, μ, rates, verdicts, Lipschitz bound, final attention error); arrays
    ``mask.layer{i}.q`` / ``.k``: bool keep masks in nn.Linear layout.
    """

    name = "attention-gd"
    options_cls = AttentionGDOptions
    options: AttentionGDOptions
    needs_gram = True  # rel_error of q/k, and Wanda/SparseGPT for ``others``
    needs_inputs = frozenset({"q"})
    supports_patterns = ("unstructured",)

    @torch.no_grad()
    def prune_layer(self, ctx: LayerContext) -> list[LinearReport]:
        if ctx.pattern != "unstructured":
            raise ConfigError(f"attention-gd prunes unstructured only, got pattern {ctx.pattern!r}")
        reports = self._prune_qk(ctx) if {"q", "k"} & ctx.linears.keys() else []
        if self.options.others != "none":
            reports += self._prune_others(ctx)
        return reports

    def _prune_qk(self, ctx: LayerContext) -> list[LinearReport]:
        opts = self.options
        if not {"q", "k"} <= ctx.linears.keys():
            raise ConfigError("attention-gd prunes q_proj and k_proj jointly: select both")
        start = time.perf_counter()
        n_heads, n_kv, head_dim = ctx.adapter.n_heads, ctx.adapter.n_kv_heads, ctx.adapter.head_dim
        r = n_heads // n_kv
        lin_q, lin_k = ctx.linears["q"], ctx.linears["k"]
        dtype, device = DTYPES[opts.dtype], lin_q.weight.device
        sparsity = {role: check_sparsity(ctx.sparsity.get(role, 0.0)) for role in ("q", "k")}
        X = ctx.inputs["q"][: opts.max_seq].to(device=device, dtype=dtype)  # (N, L, d)
        rope = None
        if opts.rope and ctx.position_embeddings is not None:
            rope = rope_tables(ctx.position_embeddings, X.shape[1], dtype, device)
        elif opts.rope:
            log.warning("layer %d: the model gave no RoPE tables; GD runs without", ctx.index)
        Wq = lin_q.weight.detach().to(dtype, copy=True)  # (H·d_h, d)
        Wk = lin_k.weight.detach().to(dtype, copy=True)  # (KV·d_h, d)
        stats = ctx.stats.get("q")
        col_sq = stats.col_sq_norms if stats is not None else ctx.inputs["q"].square().sum((0, 1))
        Mq = initial_mask(Wq, opts.init, sparsity["q"], opts.scope, col_sq)  # (H·d_h, d)
        Mk = initial_mask(Wk, opts.init, sparsity["k"], opts.scope, col_sq)  # (KV·d_h, d)
        groups: list[GroupResult] = []
        if sparsity["q"] > 0 or sparsity["k"] > 0:
            x_norms = spectral_norms(X)  # for the Lipschitz bound, shared by the groups
            for g in range(n_kv):
                qs = slice(g * r * head_dim, (g + 1) * r * head_dim)  # q_proj rows of group g
                ks = slice(g * head_dim, (g + 1) * head_dim)  # k_proj rows of KV head g
                res = gd_prune_group(
                    X,
                    to_heads(Wq[qs], head_dim),
                    Wk[ks].T,
                    opts,
                    rope,
                    to_heads(Mq[qs], head_dim),
                    Mk[ks].T,
                    x_norms,
                )
                Mq[qs], Mk[ks] = to_linear(res.Mq), res.Mk.T
                groups.append(res)
                s = res.summary
                log.info(
                    "layer %d group %d: loss %.4g -> %.4g in %d steps (%d evals, %.1fs): %s",
                    ctx.index,
                    g,
                    s["loss_start"],
                    s["loss_end"],
                    s["steps"],
                    res.evaluations,
                    res.seconds,
                    s["verdict"],
                )
        keep_q = binarize(mask_scores(Mq, Wq, opts.binarize), sparsity["q"], opts.scope)
        keep_k = binarize(mask_scores(Mk, Wk, opts.binarize), sparsity["k"], opts.scope)
        errors = layer_attention_errors(
            X, Wq, Wk, keep_q, keep_k, n_heads, n_kv, head_dim, opts.causal, rope
        )
        self._record(ctx, groups, errors, r)
        ctx.arrays[f"mask.layer{ctx.index}.q"] = keep_q.cpu()
        ctx.arrays[f"mask.layer{ctx.index}.k"] = keep_k.cpu()
        extra = {
            "attn_error": float(errors["fro_rel"].mean()),
            "attn_tv_max": float(errors["tv_max"].max()),
            "rope": rope is not None,
            "gd_evaluations": sum(res.evaluations for res in groups),
        }
        seconds = (time.perf_counter() - start) / 2  # one joint optimisation, split over q, k
        return [
            _write_masked(ctx, role, lin, keep, sparsity[role], seconds, extra)
            for role, lin, keep in (("q", lin_q, keep_q), ("k", lin_k, keep_k))
        ]

    def _record(
        self, ctx: LayerContext, groups: list[GroupResult], errors: dict[str, Tensor], r: int
    ) -> None:
        """Fill "gd_trajectory" and "gd_heads"; heads are numbered globally (g·r + h)."""
        for g, res in enumerate(groups):
            heads = slice(g * r, (g + 1) * r)

            def where(row: dict[str, Any], g: int = g) -> dict[str, Any]:
                head = g * r + row["head"] if row["matrix"] == "q" else -1
                return {"layer": ctx.index, "group": g, **row, "head": head}

            ctx.add_rows("gd_trajectory", [where(row) for row in res.trajectory])
            fro, dense = errors["fro"][heads], errors["dense"][heads]
            pooled = {
                "attn_fro": float(fro.norm()),
                "attn_fro_rel": float(fro.norm() / dense.norm()),
                "attn_tv_max": float(errors["tv_max"][heads].max()),
            }
            summary = res.summary
            rows = []
            for block in res.blocks:
                row = where(block)
                if block["matrix"] == "q":
                    h = row["head"]
                    row["attn_fro"] = float(errors["fro"][h])
                    row["attn_fro_rel"] = float(errors["fro_rel"][h])
                    row["attn_tv_max"] = float(errors["tv_max"][h])
                else:
                    row.update(pooled)
                row["lipschitz_bound"] = res.lipschitz_bound
                row["group_verdict"] = summary["verdict"]
                row["group_mu"] = summary["mu"]
                row["group_rate_obs"] = summary["rate_obs"]
                row["group_rate_pred"] = summary["rate_pred"]
                rows.append(row)
            ctx.add_rows("gd_heads", rows)

    def _prune_others(self, ctx: LayerContext) -> list[LinearReport]:
        """The authors' hybrid: V/O/MLP by Wanda or SparseGPT on the same layer context."""
        roles = [role for role in ctx.linears if role not in ("q", "k")]
        if not roles:
            return []
        cls = get_method(self.options.others)
        sub = replace(
            ctx,
            linears={role: ctx.linears[role] for role in roles},
            stats={role: st for role, st in ctx.stats.items() if role in roles},
            inputs={role: x for role, x in ctx.inputs.items() if role in roles},
            sparsity={role: s for role, s in ctx.sparsity.items() if role in roles},
        )  # tables/arrays are the same dicts, so the delegate's outputs land in this run
        return cls(cls.options_cls()).prune_layer(sub)


def layer_attention_errors(
    X: Tensor,
    Wq: Tensor,
    Wk: Tensor,
    keep_q: Tensor,
    keep_k: Tensor,
    n_heads: int,
    n_kv_heads: int,
    head_dim: int,
    causal: bool,
    rope: tuple[Tensor, Tensor] | None,
) -> dict[str, Tensor]:
    """``attention_errors`` of binarised q/k (W ← keep∘W) pooled over the sequences X (N, L, d).

    Returns (H,) tensors fro, fro_rel, tv_max and dense = ‖P‖_F; chunked over sequences.
    """
    Wq_p, Wk_p = Wq * keep_q, Wk * keep_k
    fro2 = X.new_zeros(n_heads)
    dense2 = X.new_zeros(n_heads)
    tv = X.new_zeros(n_heads)
    per_chunk = max(1, CHUNK_ELEMS // (n_heads * X.shape[1] ** 2))
    for x in X.split(per_chunk):
        P = attention_probs(x, Wq, Wk, n_heads, n_kv_heads, head_dim, causal, rope)
        P_p = attention_probs(x, Wq_p, Wk_p, n_heads, n_kv_heads, head_dim, causal, rope)
        e = attention_errors(P, P_p)
        fro2 += e["fro"].square()
        dense2 += P.square().sum((0, 2, 3))
        tv = torch.maximum(tv, e["tv_max"])
    return {
        "fro": fro2.sqrt(),
        "fro_rel": (fro2 / dense2).sqrt(),
        "tv_max": tv,
        "dense": dense2.sqrt(),
    }


def _write_masked(
    ctx: LayerContext,
    role: str,
    linear: torch.nn.Linear,
    keep: Tensor,
    sparsity: float,
    seconds: float,
    extra: dict[str, Any],
) -> LinearReport:
    """W ← keep∘W in place, in the weight's own dtype, and report it."""
    weight = linear.weight
    W = weight.detach().to(torch.float32, copy=True)  # reference for the error
    weight.masked_fill_(~keep.to(weight.device), 0.0)
    stats = ctx.stats.get(role)
    rel = math.nan if stats is None else relative_reconstruction_error(W, weight, stats.error_gram)
    return LinearReport(
        layer=ctx.index,
        role=role,
        shape=(weight.shape[0], weight.shape[1]),
        target_sparsity=sparsity,
        achieved_sparsity=int((weight == 0).sum().item()) / weight.numel(),
        rel_error=rel,
        seconds=seconds,
        extra=dict(extra),
    )
