"""The inverse-Hessian factor SparseGPT's OBS sweep reads (papers.md §5): U, the upper Cholesky
factor of (H + λI)⁻¹ with λ = percdamp · mean(diag H), in float64.

LLM inputs have outlier features, which make H badly conditioned, so the factor is computed in
float64 (the reference uses float32), on one thread (MKL's two-thread ``cholesky_inverse`` ran
20x slower under load in the parity work). If the damped H is still not positive definite,
the damping is raised tenfold (up to ``MAX_PERCDAMP``) with a warning. The linears that read
one input (q/k/v, gate/up) share one factor.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass

import torch

from core.errors import NumericalError
from core.machine.device import single_thread

log = logging.getLogger(__name__)

# percdamp grows tenfold per failed factorisation up to λ = mean(diag H) (percdamp 1): beyond
# that the damping, not the data, would decide the update.
MAX_PERCDAMP = 1.0
_SCALE_ROWS = 256  # rows of H scaled at once into the float64 factor buffer


def _damped_factor(
    H: torch.Tensor, damp: float, dead: torch.Tensor | None, scale: float = 1.0
) -> torch.Tensor | None:
    """The three LAPACK steps on one column-major float64 buffer, overwritten in place:
    A = scale·H + λI (scaled in H's float32, row block by row block, so scale·H never
    exists whole; dead inputs' diagonal set to 1) -> L = chol(A) -> A⁻¹ -> U = chol(A⁻¹)ᵀ.
    Column-major is LAPACK's layout, so no step allocates a second (in, in) float64 matrix
    (the 2816-wide down projection's is 60 MiB); the values are
    those of the out-of-place calls, bit for bit. Returns U, or None if a step failed."""
    n = H.shape[0]
    A = torch.empty_strided((n, n), (1, n), dtype=torch.float64, device=H.device)
    if scale == 1.0:
        A.copy_(H)
    else:
        for i in range(0, n, _SCALE_ROWS):
            A[i : i + _SCALE_ROWS].copy_(H[i : i + _SCALE_ROWS] * scale)
    if dead is not None:
        A.diagonal()[dead] = 1.0
    A.diagonal().add_(damp)
    info = torch.empty((), dtype=torch.int32, device=H.device)
    torch.linalg.cholesky_ex(A, out=(A, info))
    if info.item() != 0:
        return None
    torch.cholesky_inverse(A, out=A)
    torch.linalg.cholesky_ex(A, upper=True, out=(A, info))
    if info.item() != 0 or not torch.isfinite(A).all():
        return None
    return A


def inverse_hessian_factor(
    H: torch.Tensor, percdamp: float, dead: torch.Tensor | None = None, scale: float = 1.0
) -> tuple[torch.Tensor, float, int]:
    """Upper Cholesky factor U of (H + λI)⁻¹ with λ = percdamp · mean(diag H), in float64.

    H: (in, in) symmetric, not modified, times ``scale`` (taken in H's dtype: the Hessian
    2·gram/n from the gram without a copy); dead: (in,) bool, inputs never active, whose
    diagonal counts as 1 (in the mean too). Raises the damping tenfold while a
    factorisation fails. Returns (U (in, in) float64, column-major, the percdamp used, how
    many times it was raised).
    """
    diag = (H.diagonal() * scale if scale != 1.0 else H.diagonal()).to(torch.float64)  # (in,)
    if dead is not None:
        diag[dead] = 1.0
    mean_diag = diag.mean().item()
    del diag
    if not (math.isfinite(mean_diag) and mean_diag > 0):
        raise NumericalError(
            f"SparseGPT: the Hessian diagonal has mean {mean_diag}; the calibration statistics "
            "are not usable (NaN/inf or negative)"
        )
    damp, attempt = percdamp, 0
    while True:
        with single_thread(H.device):
            U = _damped_factor(H, damp * mean_diag, dead, scale)
        if U is not None:
            return U, damp, attempt
        if damp * 10 > MAX_PERCDAMP * (1 + 1e-9):
            raise NumericalError(
                f"SparseGPT: the Hessian ({H.shape[0]}x{H.shape[1]}) is not positive definite "
                f"even with percdamp={damp:g} (raised tenfold {attempt} times from "
                f"{percdamp:g}); the calibration inputs are degenerate or contain NaN/inf"
            )
        log.warning(
            "SparseGPT: Hessian (%dx%d) not positive definite with percdamp=%g; raising the "
            "damping to percdamp=%g",
            *H.shape,
            damp,
            damp * 10,
        )
        damp, attempt = damp * 10, attempt + 1


@dataclass(frozen=True)
class HessianFactor:
    """What the sweep needs from H, shared by the linears that read the same input (q/k/v,
    gate/up): U (in, in) float64, the upper Cholesky factor of (H + λI)⁻¹, column-major;
    dead (in,) bool, the inputs never active; the percdamp used and how often it was raised."""

    U: torch.Tensor
    dead: torch.Tensor
    percdamp: float
    increases: int


def hessian_factor(
    H: torch.Tensor, percdamp: float, h_scale: float = 1.0, device: torch.device | None = None
) -> HessianFactor:
    """Factor h_scale·H (float64 H as it is, any other dtype as float32; not modified, no
    float32 copy: the dead inputs' diagonal is set in the float64 factor) on ``device``."""
    hdtype = torch.float64 if H.dtype == torch.float64 else torch.float32
    H = H.detach().to(device=device if device is not None else H.device, dtype=hdtype)
    diag = H.diagonal() * h_scale if h_scale != 1.0 else H.diagonal()
    dead = diag == 0  # (in,) inputs that are always 0: any weight there is free
    del diag
    U, used_percdamp, increases = inverse_hessian_factor(H, percdamp, dead, h_scale)
    return HessianFactor(U, dead, used_percdamp, increases)
