"""Pure tensor functions about softmax attention matrices (papers.md §3, Paper B).

Used by the ``attention-gd`` method, the benchmarks and the app's heatmaps. Weights are taken
in ``nn.Linear`` layout (``Wq``: (n_heads·head_dim, d), ``Wk``: (n_kv_heads·head_dim, d)) and
``X`` is the input of ``q_proj`` (already RMS-normed). Everything runs in the dtype of ``X``
(float32 or float64; anything else is computed in float32).

    P = attention_probs(X, Wq, Wk, n_heads=9, n_kv_heads=3, head_dim=64, rope=(cos, sin))
    errs = attention_errors(P, P_pruned)  # {"fro": (H,), "fro_rel": (H,), "tv_max": (H,)}
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor


def rotate_half(x: Tensor) -> Tensor:
    """Llama's rotate-half: (x1, x2) -> (-x2, x1) on the last dim."""
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


def apply_rope(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """RoPE in the Llama convention: ``x·cos + rotate_half(x)·sin``.

    x: (..., L, head_dim); cos, sin: (L, head_dim) or anything broadcastable to x.
    Per position i this is a rotation R_i = diag(cos_i) + diag(sin_i)·J.
    """
    return x * cos + rotate_half(x) * sin


def rope_adjoint(g: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """Adjoint Rᵀ of ``apply_rope`` (the chain rule through RoPE): ``g·cos − J(g·sin)``.

    Since R_i = diag(cos_i) + diag(sin_i)·J with Jᵀ = −J, R_iᵀ = diag(cos_i) − J·diag(sin_i).
    This holds for any cos/sin tables (it does not assume the two halves are equal).
    """
    return g * cos - rotate_half(g * sin)


def rope_tables(
    rope: tuple[Tensor, Tensor], length: int, dtype: torch.dtype, device: torch.device
) -> tuple[Tensor, Tensor]:
    """Normalise RoPE (cos, sin) given as (L', head_dim) or (B, L', head_dim) to (length, head_dim).

    A batch of tables is assumed to hold the same positions (0..L'-1) in every row; the first
    ``length`` positions are used, as for a sequence that starts at position 0.
    """
    cos, sin = (t.reshape(-1, t.shape[-1])[:length].to(device=device, dtype=dtype) for t in rope)
    if cos.shape[0] < length:
        raise ValueError(f"RoPE tables cover {cos.shape[0]} positions, need {length}")
    return cos, sin


def compute_dtype(x: Tensor) -> torch.dtype:
    """float64 stays float64; every other dtype is computed in float32."""
    return torch.float64 if x.dtype == torch.float64 else torch.float32


def causal_mask(length: int, device: torch.device) -> Tensor:
    """(L, L) bool, True on and below the diagonal (the entries a query may attend to)."""
    return torch.ones(length, length, dtype=torch.bool, device=device).tril_()


def masked_softmax(scores: Tensor, causal: bool, window: int | None = None) -> Tensor:
    """Row softmax of (..., L, L) scores, restricted to j ≤ i when ``causal`` (papers.md §3 f)
    and, with a sliding ``window``, to i − j < window (Mistral / Gemma-3 sliding layers)."""
    if causal:
        keep = causal_mask(scores.shape[-1], scores.device)
        if window is not None:
            keep = keep.triu_(-(window - 1))
        scores = scores.masked_fill(~keep, float("-inf"))
    return torch.softmax(scores, dim=-1)


@dataclass(frozen=True)
class QKForm:
    """What a family adds to q·kᵀ/√d_h (``ModelAdapter.attention_form`` of one layer).

    bq: (n_heads·head_dim,), bk: (n_kv_heads·head_dim,) biases; q_gain, k_gain: (head_dim,)
    effective gains of per-head RMSNorms on q and k (ε ``eps``); scale: the factor of q·kᵀ;
    window: the sliding window of the layer (None: all earlier tokens).
    """

    bq: Tensor | None = None
    bk: Tensor | None = None
    q_gain: Tensor | None = None
    k_gain: Tensor | None = None
    eps: float = 1e-6
    scale: float | None = None
    window: int | None = None


def _head_norm(x: Tensor, gain: Tensor | None, eps: float) -> Tensor:
    if gain is None:
        return x
    return x * torch.rsqrt(x.square().mean(-1, keepdim=True) + eps) * gain.to(x)


def attention_probs(
    X: Tensor,
    Wq: Tensor,
    Wk: Tensor,
    n_heads: int,
    n_kv_heads: int,
    head_dim: int,
    causal: bool = True,
    rope: tuple[Tensor, Tensor] | None = None,
    form: QKForm | None = None,
) -> Tensor:
    """Attention matrices softmax(R(X W_{Q,h}ᵀ) R(X W_{K,g}ᵀ)ᵀ / √d_h) of every query head;
    with ``form``, q and k get the family's biases and per-head norms before RoPE, and its
    scale and sliding window apply.

    X: (..., L, d). Wq: (n_heads·head_dim, d), Wk: (n_kv_heads·head_dim, d) (nn.Linear layout).
    Query head h uses key head g = h // (n_heads // n_kv_heads) (GQA, as HF ``repeat_kv``).
    rope: (cos, sin), each (L, head_dim) or (B, L, head_dim); None skips RoPE.
    Returns (..., n_heads, L, L) in the compute dtype of X.
    """
    if n_heads % n_kv_heads:
        raise ValueError(f"n_heads={n_heads} is not a multiple of n_kv_heads={n_kv_heads}")
    if Wq.shape[0] != n_heads * head_dim or Wk.shape[0] != n_kv_heads * head_dim:
        raise ValueError(
            f"Wq {tuple(Wq.shape)} / Wk {tuple(Wk.shape)} do not match "
            f"{n_heads}/{n_kv_heads} heads of dim {head_dim}"
        )
    dtype = compute_dtype(X)
    X = X.to(dtype)
    length = X.shape[-2]
    form = form or QKForm()
    q = X @ Wq.to(dtype).T  # (..., L, H·dh)
    k = X @ Wk.to(dtype).T  # (..., L, KV·dh)
    q = q if form.bq is None else q + form.bq.to(q)
    k = k if form.bk is None else k + form.bk.to(k)
    q = q.unflatten(-1, (n_heads, head_dim)).transpose(-3, -2)  # (..., H, L, dh)
    k = k.unflatten(-1, (n_kv_heads, head_dim)).transpose(-3, -2)  # (..., KV, L, dh)
    q, k = _head_norm(q, form.q_gain, form.eps), _head_norm(k, form.k_gain, form.eps)
    k = k.repeat_interleave(n_heads // n_kv_heads, dim=-3)  # (..., H, L, dh)
    tables = rope_tables(rope, length, dtype, X.device) if rope is not None else None
    return head_attention(q, k, causal, tables, form.scale, form.window)


def head_attention(
    q: Tensor,
    k: Tensor,
    causal: bool = True,
    rope: tuple[Tensor, Tensor] | None = None,
    scale: float | None = None,
    window: int | None = None,
) -> Tensor:
    """softmax_c(R q (R k)ᵀ · scale) per head: the attention forward every caller shares.

    q: (..., L, d_h) and k: (..., L, d_h), broadcastable over the leading dims (a shared key
    head against r query heads). rope: (cos, sin) tables, each (L, d_h), or None. scale:
    the family's factor (default 1/√d_h); window: a sliding window (masked_softmax).
    Returns (..., L, L).
    """
    if rope is not None:
        q, k = apply_rope(q, *rope), apply_rope(k, *rope)
    scale = scale if scale is not None else 1.0 / math.sqrt(q.shape[-1])
    scores = (q @ k.transpose(-1, -2)) * scale  # (..., L, L)
    return masked_softmax(scores, causal, window)


def attention_errors(P_dense: Tensor, P_pruned: Tensor) -> dict[str, Tensor]:
    """Per-head distance between dense and pruned attention matrices.

    P_dense, P_pruned: (..., H, L, L); every leading dim (e.g. sequences) is pooled.
    Returns tensors of shape (H,):
      fro:     ‖P̃ − P‖_F (papers.md §3's data term is ½ fro²),
      fro_rel: ‖P̃ − P‖_F / ‖P‖_F,
      tv_max:  max over rows of the total variation ½ Σ_j |p̃_ij − p_ij| (in [0, 1]).
    """
    diff = (P_pruned - P_dense).movedim(-3, 0).flatten(1, -2)  # (H, R, L), R = all rows
    dense = P_dense.movedim(-3, 0).flatten(1, -1)  # (H, R·L)
    fro = torch.linalg.vector_norm(diff, dim=(1, 2))
    return {
        "fro": fro,
        "fro_rel": fro / torch.linalg.vector_norm(dense, dim=1),
        "tv_max": 0.5 * diff.abs().sum(-1).amax(-1),
    }
