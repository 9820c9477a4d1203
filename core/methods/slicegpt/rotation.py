"""SliceGPT's rotation and slicing primitives (papers.md §6): the sliced width d′, the PCA basis
of a residual boundary, and the products W·Q·D / Dᵀ·Qᵀ·W that rotate and slice a linear.

All rotations are computed in float64 and cast back to the weight's dtype.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch
from torch import nn

from core.errors import ConfigError
from core.machine.device import single_thread
from core.methods.slicegpt.modules import map_rows_narrowing, set_embedding, set_linear


def sliced_width(d: int, s: float, round_to: int = 8) -> int:
    """d′ = int((1−s)·d) rounded down to a multiple of ``round_to`` (``round_interval``)."""
    if not 0.0 <= s < 1.0:
        raise ConfigError(f"slicing sparsity must be in [0, 1), got {s}")
    if round_to < 1:
        raise ConfigError(f"round_to must be a positive integer, got {round_to}")
    width = int((1.0 - s) * d)
    width -= width % round_to
    if width <= 0:
        raise ConfigError(
            f"sparsity {s} leaves int((1-s)*{d}) = {int((1.0 - s) * d)} dimensions, which rounds "
            f"down to 0 with round_to={round_to}; use a smaller sparsity or round_to"
        )
    return width


def pca_basis(cov: torch.Tensor, damp: float = 0.01) -> tuple[torch.Tensor, torch.Tensor]:
    """Principal axes of an uncentred covariance C (d, d), float64 (SliceGPT ``pca_calc``).

    Diagonalises C + damp·mean(diag C)·I and returns (eigvals (d,), Q (d, d)) with the
    eigenvalues of C itself in descending order (the damping shifts every eigenvalue by the
    same amount, so it only stabilises the eigenvectors) and Q's columns the matching axes.
    """
    if cov.dtype != torch.float64:
        raise ConfigError(f"pca_basis expects a float64 covariance, got {cov.dtype}")
    shift = damp * cov.diagonal().mean()
    damped = cov + shift * torch.eye(cov.shape[0], dtype=cov.dtype, device=cov.device)
    with single_thread(cov.device):
        eigvals, Q = torch.linalg.eigh(damped)
    order = torch.argsort(eigvals, descending=True)
    return eigvals[order] - shift, Q[:, order]


def randomize_kept(Q: torch.Tensor, keep: int, generator: torch.Generator) -> torch.Tensor:
    """Q·blockdiag(R, I): a Haar-random rotation R (keep, keep) inside the kept subspace.

    The kept span, and so the sliced model's function, is unchanged; only the basis the
    sliced coordinates use differs (reference ``final_orientation="random"``).
    """
    G = torch.randn(keep, keep, generator=generator, dtype=torch.float64)
    R, upper = torch.linalg.qr(G)
    R = R * torch.sign(torch.diagonal(upper)).unsqueeze(0)  # sign fix makes R Haar-distributed
    out = Q.clone()
    out[:, :keep] = Q[:, :keep] @ R.to(Q.device)
    return out


def accumulate_gram(gram: torch.Tensor, x: torch.Tensor) -> None:
    """gram += XᵀX for x (..., d), accumulated in float64; every token counts (no padding).

    The per-batch product is taken in x's precision but at least float32 (float64 for a
    float64 model): half the cost of a float64 product, and the 1% damping dwarfs its error.
    """
    flat = x.reshape(-1, x.shape[-1]).to(torch.promote_types(x.dtype, torch.float32))
    gram += (flat.T @ flat).to(torch.float64)


def rotate_inputs(lin: nn.Linear, Q: torch.Tensor, width: int) -> None:
    """W ← (W·Q)[:, :width]: the linear reads the rotated, sliced signal. Q (d, d) float64."""
    W = lin.weight.detach()
    Qk = Q[:, :width].to(W.device)
    set_linear(lin, map_rows_narrowing(W, lambda rows: rows.double() @ Qk), lin.bias)


def rotate_outputs(lin: nn.Linear, Q: torch.Tensor, width: int) -> None:
    """W ← (Qᵀ·W)[:width], b ← (Qᵀ·b)[:width]: the linear writes the rotated, sliced signal."""
    W = lin.weight.detach()
    Qk = Q[:, :width].to(W.device)
    bias = None if lin.bias is None else (Qk.T @ lin.bias.detach().double()).to(W.dtype)
    set_linear(lin, (Qk.T @ W.double()).to(W.dtype), bias)


def rotate_embeddings(embed: nn.Embedding, Q: torch.Tensor, width: int) -> None:
    """E ← (E·Q)[:, :width] for E (vocab, d)."""
    E = embed.weight.detach()
    Qk = Q[:, :width].to(E.device)
    set_embedding(embed, map_rows_narrowing(E, lambda rows: rows.double() @ Qk))


@contextmanager
def rotated_output(lin: nn.Linear, Q: torch.Tensor) -> Iterator[None]:
    """Let ``lin`` write in the full basis Q for a while, then restore its weights."""
    weight, bias = lin.weight, lin.bias
    rotate_outputs(lin, Q, Q.shape[1])
    try:
        yield
    finally:
        lin.weight, lin.bias = weight, bias
        lin.out_features = weight.shape[0]
