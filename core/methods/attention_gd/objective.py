"""Paper B's objective on one GQA group: the loss and its closed-form gradient (papers.md §3).

Liang, Long, Shi, Song, Zhou, "Beyond Linear Approximations: A Novel Pruning Approach for
Attention Matrix" (ICLR 2025). Each group of r query heads sharing one key head gets
continuous masks M_{Q,h}, M_K (d×d_h, papers.md's layout; nn.Linear stores the transpose):

    L(M) = Σ_seq Σ_h ½‖f_h(M) − Y_h‖²_F + ½λ(Σ_h ‖M_{Q,h}‖²_F + ‖M_K‖²_F)
    f_h(M) = softmax_c(R(N_q(X Q̃_h + b_{Q,h})) R(N_k(X K̃ + b_K))ᵀ / √d_h)

with Q̃_h = M_{Q,h}∘W_{Q,h}, K̃ = M_K∘W_K, Y_h = f_h(1), softmax_c the (causal) row softmax,
R RoPE, b the q/k biases (Qwen2-style; zero when absent) and N the per-head RMSNorm with gain
γ (Qwen3-style q_norm/k_norm; the identity when absent). Paper B's softmax(XWXᵀ) is the case
R = N = I, b = 0.

Closed-form gradient. With S_h = f_h(M), C_h = S_h − Y_h, row j of P_h is
p_j = s_j∘c_j − s_j⟨s_j, c_j⟩ (= ∂ℓ/∂A_h). Then ∂ℓ/∂q̂_h = P_h k̂/√d_h, ∂ℓ/∂k̂ = Σ_h P_hᵀq̂_h/√d_h;
RoPE is orthogonal per position so the chain rule applies Rᵀ (``rope_adjoint``); the RMSNorm
y = γ∘x·ρ, ρ = (mean(x²) + ε)^{-1/2}, has adjoint g ↦ ρ(γ∘g) − x·ρ³⟨γ∘g, x⟩/d_h; the bias drops
out; finally ∇_{M_{Q,h}} L = W_{Q,h}∘(Xᵀ g_{Q,h}) + λM_{Q,h}, ∇_{M_K} L = W_K∘(Xᵀ g_K) + λM_K.
Without RoPE, norm or bias this is papers.md's W_{Q,h}∘(G_h K̃) with G_h = XᵀP_hX/√d_h. The d×d
G_h is never formed: a step costs O(n²d_h + n·d·d_h) per head and sequence, batched over the
heads of a group and over sequences.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

import torch
from torch import Tensor

from core.evaluation.attention_ops import (
    apply_rope,
    causal_mask,
    compute_dtype,
    head_attention,
    rope_adjoint,
    rope_tables,
)

# Largest (n, r, L, L) score block held at once: 2^24 entries = 64 MiB in float32.
CHUNK_ELEMS = 1 << 24


def to_heads(W: Tensor, head_dim: int) -> Tensor:
    """(r·d_h, d) nn.Linear rows of r heads -> (r, d, d_h), W_{Q,h} in papers.md's layout."""
    return W.unflatten(0, (-1, head_dim)).transpose(1, 2)


def to_linear(M: Tensor) -> Tensor:
    """(r, d, d_h) -> (r·d_h, d), the inverse of ``to_heads``."""
    return M.transpose(1, 2).reshape(-1, M.shape[1])


def sequences(X: Tensor | Sequence[Tensor]) -> list[Tensor]:
    """(L, d), (N, L, d) or a list of (L_i, d) / (1, L_i, d) -> list of (L_i, d)."""
    if isinstance(X, Tensor):
        return [X] if X.dim() == 2 else list(X.reshape(-1, *X.shape[-2:]))
    return [x.reshape(-1, x.shape[-1]) for x in X]


@dataclass(frozen=True)
class HeadExtras:
    """What the attention of a group adds to XQ̃, XK̃ besides RoPE (all optional).

    bq: (r, d_h) q_proj bias of the group's heads; bk: (d_h,) k_proj bias.
    q_gain, k_gain: (d_h,) γ of the per-head RMSNorm applied to q / k (Qwen3 q_norm/k_norm),
    with eps ``norm_eps``.
    """

    bq: Tensor | None = None
    bk: Tensor | None = None
    q_gain: Tensor | None = None
    k_gain: Tensor | None = None
    norm_eps: float = 1e-6


class LossGrad(NamedTuple):
    loss: Tensor  # () total loss L(M)
    data: Tensor  # (r,) per-head data term Σ_seq ½‖f_h(M) − Y_h‖²_F
    grad_q: Tensor  # (r, d, d_h) ∇_{M_Q} L
    grad_k: Tensor  # (d, d_h) ∇_{M_K} L


@dataclass
class _Chunk:
    X: Tensor  # (n, L, d) sequences of one length
    Xt: Tensor  # (d, n·L) contiguous transpose, reused by every gradient
    Y: Tensor  # (n, r, L, L) dense attention of the group's heads
    rope: tuple[Tensor, Tensor] | None  # (cos, sin), each (L, d_h)
    bias: Tensor | None  # (L, L) additive causal mask (0 / −inf), None when not causal


def _rms(x: Tensor, gain: Tensor | None, eps: float) -> tuple[Tensor, Tensor | None]:
    """(γ∘x·ρ, ρ) with ρ = (mean(x²) + ε)^{-1/2} over the last dim; (x, None) without γ."""
    if gain is None:
        return x, None
    rho = torch.rsqrt(x.square().mean(-1, keepdim=True) + eps)
    return x * rho * gain, rho


def _rms_adjoint(g: Tensor, x: Tensor, rho: Tensor | None, gain: Tensor | None) -> Tensor:
    """Adjoint of ``_rms`` at x: g ↦ ρ(γ∘g) − x·ρ³⟨γ∘g, x⟩/d_h."""
    if rho is None:
        return g
    gg = g * gain
    return gg * rho - x * (rho**3 * (gg * x).mean(-1, keepdim=True))


class GroupProblem:
    """One GQA group's calibration problem, with the dense targets Y_h computed once.

    X: (N, L, d), (L, d) or a list of (L_i, d) normed q_proj inputs. Wq_heads: (r, d, d_h),
    Wk: (d, d_h) (papers.md layout, see ``to_heads``). rope: (cos, sin) or None. extras:
    biases and q/k norms. Sequences are grouped by length and split into chunks of at most
    ``CHUNK_ELEMS`` scores; X, its transpose, RoPE tables and the causal mask are built once.
    """

    def __init__(
        self,
        X: Tensor | Sequence[Tensor],
        Wq_heads: Tensor,
        Wk: Tensor,
        causal: bool = True,
        rope: tuple[Tensor, Tensor] | None = None,
        dtype: torch.dtype | None = None,
        extras: HeadExtras | None = None,
    ) -> None:
        dtype = dtype or compute_dtype(Wq_heads)
        self.Wq = Wq_heads.to(dtype)  # (r, d, d_h)
        device = self.Wq.device
        self.Wk = Wk.to(device=device, dtype=dtype)  # (d, d_h)
        r, _, head_dim = self.Wq.shape
        self.scale = 1.0 / math.sqrt(head_dim)
        ex = extras or HeadExtras()

        def cast(t: Tensor | None) -> Tensor | None:
            return None if t is None else t.to(device=device, dtype=dtype)

        self.bq = None if ex.bq is None else cast(ex.bq)[None, :, None, :]  # (1, r, 1, d_h)
        self.bk, self.q_gain, self.k_gain = cast(ex.bk), cast(ex.q_gain), cast(ex.k_gain)
        self.eps = ex.norm_eps
        self.causal = causal
        self.chunks: list[_Chunk] = []
        by_len: dict[int, list[Tensor]] = {}
        for x in sequences(X):
            by_len.setdefault(x.shape[0], []).append(x.to(device=device, dtype=dtype))
        for length, xs in by_len.items():
            tables = rope_tables(rope, length, dtype, device) if rope else None
            bias = None
            if causal:
                bias = torch.zeros(length, length, dtype=dtype, device=device)
                bias.masked_fill_(~causal_mask(length, device), float("-inf"))
            per_chunk = max(1, CHUNK_ELEMS // (r * length * length))
            for Xc in torch.stack(xs).split(per_chunk):
                Xt = Xc.reshape(-1, Xc.shape[-1]).T.contiguous()
                chunk = _Chunk(Xc, Xt, Xc.new_empty(0), tables, bias)
                chunk.Y = self.intermediates(chunk, self.Wq, self.Wk)[-1]
                self.chunks.append(chunk)

    @property
    def n_params(self) -> int:
        """Number of mask entries of the group: r·d·d_h + d·d_h."""
        return self.Wq.numel() + self.Wk.numel()

    @property
    def n_rows(self) -> int:
        """Attention rows in the data term: Σ_seq L·r (each row's squared error is ≤ 2)."""
        return sum(ch.X.shape[0] * ch.X.shape[1] for ch in self.chunks) * self.Wq.shape[0]

    def intermediates(self, ch: _Chunk, Qt: Tensor, Kt: Tensor) -> tuple:
        """Intermediates for the gradient and S = f(M) (n, r, L, L) for Q̃ = Qt, K̃ = Kt."""
        n, length, d = ch.X.shape
        r, _, head_dim = Qt.shape
        q_raw = ch.X @ Qt.transpose(0, 1).reshape(d, r * head_dim)  # (n, L, r·d_h): one GEMM
        q_raw = q_raw.view(n, length, r, head_dim).transpose(1, 2)  # (n, r, L, d_h)
        k_raw = ch.X @ Kt  # (n, L, d_h)
        if self.bq is not None:
            q_raw = q_raw + self.bq
        if self.bk is not None:
            k_raw = k_raw + self.bk
        q, rho_q = _rms(q_raw, self.q_gain, self.eps)
        k, rho_k = _rms(k_raw, self.k_gain, self.eps)
        if ch.rope is not None:
            q, k = apply_rope(q, *ch.rope), apply_rope(k, *ch.rope)
        q = q * self.scale  # the 1/√d_h folded into q̂: one pass over (n, r, L, d_h), not (L, L)
        scores = q @ k.unsqueeze(1).transpose(-1, -2)  # (n, r, L, L)
        if ch.bias is not None:
            scores += ch.bias
        return q_raw, k_raw, rho_q, rho_k, q, k, torch.softmax(scores, dim=-1)

    def _masked(self, Mq: Tensor, Mk: Tensor) -> tuple[Tensor, Tensor]:
        return Mq.to(self.Wq.dtype) * self.Wq, Mk.to(self.Wq.dtype) * self.Wk

    @staticmethod
    def penalty(Mq: Tensor, Mk: Tensor, lam: float) -> Tensor:
        return 0.5 * lam * (Mq.square().sum() + Mk.square().sum())

    def data_terms(self, Mq: Tensor, Mk: Tensor) -> tuple[Tensor, Tensor]:
        """Per head (r,): Σ ½‖f_h(M) − Y_h‖²_F and the largest row total variation."""
        Qt, Kt = self._masked(Mq, Mk)
        data = Qt.new_zeros(Qt.shape[0])
        tv = Qt.new_zeros(Qt.shape[0])
        for ch in self.chunks:
            C = self.intermediates(ch, Qt, Kt)[-1].sub_(ch.Y)
            data += 0.5 * torch.linalg.vector_norm(C, dim=(0, 2, 3)).square()
            tv = torch.maximum(tv, 0.5 * C.abs().sum(-1).amax((0, 2)))
        return data, tv

    def dense_norms(self) -> Tensor:
        """(r,) ‖Y_h‖_F over all sequences, for relative errors."""
        return sum(
            torch.linalg.vector_norm(ch.Y, dim=(0, 2, 3)).square() for ch in self.chunks
        ).sqrt()

    def loss(self, Mq: Tensor, Mk: Tensor, lam: float) -> Tensor:
        """L(M) only (no backward pass): used by backtracking line search."""
        return self.data_terms(Mq, Mk)[0].sum() + self.penalty(Mq, Mk, lam)

    def loss_and_grad(self, Mq: Tensor, Mk: Tensor, lam: float) -> LossGrad:
        """L(M) and the closed-form gradient (module docstring; papers.md §3)."""
        Qt, Kt = self._masked(Mq, Mk)  # (r, d, d_h), (d, d_h)
        r, d, head_dim = Qt.shape
        data = Qt.new_zeros(r)
        gQ = torch.zeros_like(Qt)  # Σ_seq Xᵀ ∂ℓ/∂(XQ̃_h)
        gK = torch.zeros_like(Kt)  # Σ_seq Xᵀ ∂ℓ/∂(XK̃)
        for ch in self.chunks:
            n, length, _ = ch.X.shape
            q_raw, k_raw, rho_q, rho_k, q, k, S = self.intermediates(ch, Qt, Kt)
            C = S - ch.Y  # (n, r, L, L); zero off the causal support
            data += 0.5 * torch.linalg.vector_norm(C, dim=(0, 2, 3)).square()
            # P rows p_j = s_j∘c_j − s_j⟨s_j, c_j⟩, written over S and C to save memory.
            P = S.mul_(C.sub_(torch.linalg.vecdot(S, C).unsqueeze(-1)))
            dq = (P @ k.unsqueeze(1)).mul_(self.scale)  # (n, r, L, d_h) = ∂ℓ/∂(R N q)
            dk = (P.transpose(-1, -2) @ q).sum(1)  # (n, L, d_h); q̂ already carries 1/√d_h
            if ch.rope is not None:
                dq, dk = rope_adjoint(dq, *ch.rope), rope_adjoint(dk, *ch.rope)
            dq = _rms_adjoint(dq, q_raw, rho_q, self.q_gain)
            dk = _rms_adjoint(dk, k_raw, rho_k, self.k_gain)
            dq = dq.transpose(1, 2).reshape(n * length, r * head_dim)  # (n·L, r·d_h)
            gQ += (ch.Xt @ dq).view(d, r, head_dim).transpose(0, 1)
            gK += ch.Xt @ dk.reshape(n * length, head_dim)
        grad_q = self.Wq * gQ + lam * Mq
        grad_k = self.Wk * gK + lam * Mk
        return LossGrad(data.sum() + self.penalty(Mq, Mk, lam), data, grad_q, grad_k)

    def reference_loss_and_grad(self, Mq: Tensor, Mk: Tensor, lam: float) -> LossGrad:
        """Reference for ``loss_and_grad``: the loss written directly from the module
        docstring's formula (one sequence at a time, the dense targets recomputed, no fused
        steps, the shared ``core.evaluation.attention_ops.head_attention`` forward) and
        differentiated by torch.autograd. It shares only the cast inputs. Slow; tests and
        benchmarks."""
        Mq = Mq.detach().to(self.Wq.dtype).requires_grad_(True)
        Mk = Mk.detach().to(self.Wq.dtype).requires_grad_(True)
        with torch.enable_grad():
            data = self.Wq.new_zeros(self.Wq.shape[0])
            for ch in self.chunks:
                for x in ch.X:  # (L, d)
                    pruned = self._reference_probs(x, ch.rope, Mq * self.Wq, Mk * self.Wk)
                    diff = pruned - self._reference_probs(x, ch.rope, self.Wq, self.Wk)
                    data = data + 0.5 * diff.square().sum((1, 2))
            loss = data.sum() + self.penalty(Mq, Mk, lam)
            grad_q, grad_k = torch.autograd.grad(loss, (Mq, Mk))
        return LossGrad(loss.detach(), data.detach(), grad_q, grad_k)

    def _reference_probs(
        self, x: Tensor, rope: tuple[Tensor, Tensor] | None, Qt: Tensor, Kt: Tensor
    ) -> Tensor:
        """f_h(M) of every head of the group for one sequence x (L, d): (r, L, L)."""
        q = torch.einsum("ld,rde->rle", x, Qt)  # (r, L, d_h)
        k = x @ Kt  # (L, d_h)
        if self.bq is not None:
            q = q + self.bq[0]  # (r, 1, d_h)
        if self.bk is not None:
            k = k + self.bk
        if self.q_gain is not None:
            q = q * torch.rsqrt(q.square().mean(-1, keepdim=True) + self.eps) * self.q_gain
        if self.k_gain is not None:
            k = k * torch.rsqrt(k.square().mean(-1, keepdim=True) + self.eps) * self.k_gain
        return head_attention(q, k, self.causal, rope)
