"""Controls of the assumption checks that match a real layer: dimension ≥ 10⁴, an indefinite
Hessian with a real group's spectral density, exact μ and L, and cheap exact derivatives.

A real GQA group's objective has ~147k mask entries, a Hessian whose positive part spans
~7.6 decades and a negative part down to −1.96 (docs/design-notes.md, "The layers' spectrum"). An
8-dimensional convex quadratic matches none of that, so the power the rule showed on one says
little about a layer. Each control here is separable in a rotated basis,

    f(x) = Σ_i g_i(y_i),  y = Q(x − c),

with Q orthogonal (one seeded random orthogonal 16 × 16 block applied to x viewed as
(16, n/16), with the eigenvalues in a seeded random order: every coordinate of x mixes 16
eigen-directions, so Adam's per-coordinate scaling cannot precondition the spectrum away)
and c a seeded point of the box. Gradient Qᵀg′(y) and Hessian-vector product Qᵀ(g″(y)∘Qv)
are exact and cost O(n).
Per coordinate, with an eigenvalue λ drawn as a quantile of the density:

* λ > 0: g = ½λy² (curvature λ);
* λ < 0: g = a(½y² + 1.5 sin²(ωy)/ω²) with a = |λ|/2, ω = 4: g″ = a(1 + 3 cos 2ωy) spans
  [−2a, 4a] = [λ, 2|λ|], negative where the starts lie (|y| ≈ 0.24–0.55), yet g has its
  only stationary point at 0 and satisfies PL with constant κ·a, κ = inf_z (z + 1.5 sin
  2z)²/(z² + 3 sin² z) = 0.08777 (computed on a grid, ``KAPPA``; Karimi et al. 2016's
  x² + 3 sin² x is the case a = 2, ω = 1).

So PL holds exactly with μ = min(min λ⁺, κ·min a) and the gradient is L-Lipschitz with
L = max(max λ⁺, 4·max a), f* = 0. The violations use the same Q and c:
kind "quartic": g = y⁴ (no μ > 0 at the minimum); kind "threehalves": g = |y|^{3/2}
(g″ unbounded at 0).

The density (``density``): the Lanczos histogram of a real group stored by ``--spectrum``
(``spectrum_<model>.json`` beside this module: Ritz values and their Gauss-quadrature
weights) when present; until one is stored, ``PROVISIONAL``: built from the figures measured
so far (docs/design-notes.md) — 90 % of the mass log-uniform over [8.65e-6, 382.47] (the
smallest positive Ritz value at M_T and λ_max), 10 % negative, |λ| log-uniform over
[2.5e-2, 1.96] (the smallest converged Ritz value and the most negative one). The 10 % is
an assumption, not a measurement; the power figures say which density they used.
"""

from __future__ import annotations

import functools
import json
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch import Tensor

HERE = Path(__file__).resolve().parent
DIM = 10_000  # ≥ 10⁴, a multiple of the mixing block
BLOCK = 16
OMEGA = 4.0
KINDS = ("pl", "quartic", "threehalves")
F64 = torch.float64


def _kappa() -> float:
    """inf_z (z + 1.5 sin 2z)²/(z² + 3 sin² z) over z > 0 (→ 4 at 0, → 1 as z → ∞)."""

    def ratio(z: np.ndarray) -> np.ndarray:
        return (z + 1.5 * np.sin(2 * z)) ** 2 / (z**2 + 3 * np.sin(z) ** 2)

    z = np.linspace(1e-3, 60.0, 600_001)
    z0 = z[ratio(z).argmin()]
    fine = np.linspace(z0 - 2e-4, z0 + 2e-4, 40_001)
    return float(ratio(fine).min())


KAPPA = _kappa()


@dataclass(frozen=True)
class Density:
    """A signed eigenvalue density as weighted atoms (values ascending, weights summing to 1)."""

    values: tuple[float, ...]
    weights: tuple[float, ...]
    source: str

    def quantiles(self, n: int) -> np.ndarray:
        """n eigenvalues at the mid-quantiles (i + ½)/n of the density, ascending, with the
        extreme atoms of each sign kept exactly (so μ and L are the density's)."""
        v, w = np.asarray(self.values), np.asarray(self.weights)
        cdf = np.cumsum(w) / w.sum()
        out = v[np.minimum(np.searchsorted(cdf, (np.arange(n) + 0.5) / n), len(v) - 1)]
        pos, neg = v[v > 0], v[v < 0]
        if pos.size:
            out[out > 0] = np.clip(out[out > 0], pos.min(), pos.max())
            i = np.flatnonzero(out > 0)
            out[i[0]], out[i[-1]] = pos.min(), pos.max()
        if neg.size and (out < 0).any():
            out[0] = neg.min()
        return out


def _log_atoms(lo: float, hi: float, n: int, mass: float, sign: float = 1.0):
    vals = sign * np.logspace(math.log10(lo), math.log10(hi), n)
    return list(vals), [mass / n] * n


_pos = _log_atoms(8.6475e-6, 382.47, 400, 0.9)
_neg = _log_atoms(2.5e-2, 1.96, 100, 0.1, -1.0)
PROVISIONAL = Density(
    tuple(sorted(_neg[0]) + _pos[0]),
    tuple(_neg[1] + _pos[1]),
    "provisional: log-uniform over the measured extremes, 10 % negative (assumed)",
)
EASY = Density(tuple(np.linspace(1.0, 10.0, 64)), (1 / 64,) * 64, "spectrum 1..10")


@functools.lru_cache(maxsize=4)
def density(model: str = "smollm2-135m") -> Density:
    """The stored Lanczos density of ``model``'s measured group, else ``PROVISIONAL``."""
    path = HERE / f"spectrum_{model}.json"
    if not path.is_file():
        return PROVISIONAL
    data = json.loads(path.read_text())
    order = np.argsort(data["ritz"])
    vals = np.asarray(data["ritz"])[order]
    weights = np.asarray(data["weights"])[order]
    return Density(tuple(vals), tuple(weights / weights.sum()), f"Lanczos, {path.name}")


def _ends(t: Tensor, which: str) -> list[float]:
    """[t.min()] or [t.max()], [] for an empty t."""
    return [getattr(t, which)().item()] if t.numel() else []


class SeparableControl:
    """f(x) = Σ g_i(y_i), y = Q(x − c) (module docstring), a ``diagnostics.Objective``.

    kind: "pl" (the density's quadratics and PL-holding wiggles), "quartic" or "threehalves".
    Q: x viewed as (16, n/16), each column mixed by one seeded orthogonal 16 × 16 block; the
    y coordinates hold the wiggles first, then the quadratics, each in a seeded random order
    (a column of the view mixes coordinates n/16 apart, so the order within a sign is what
    is random). ``mu``, ``lip``:
    the exact PL constant and gradient Lipschitz constant (0 / inf where the control
    violates one).
    """

    def __init__(self, kind: str, seed: int, dens: Density = EASY, n: int = DIM) -> None:
        if n % BLOCK or kind not in KINDS:
            raise ValueError(f"kind in {KINDS}, dimension a multiple of {BLOCK}: {kind}, {n}")
        gen = torch.Generator().manual_seed(seed)
        self.kind, self.n = kind, n
        self.B, _ = torch.linalg.qr(torch.randn(BLOCK, BLOCK, generator=gen, dtype=F64))
        self.c = torch.rand(n, generator=gen, dtype=F64)
        lam = torch.from_numpy(dens.quantiles(n))
        neg, pos = lam[lam < 0], lam[lam >= 0]
        # the wiggles first (a contiguous slice), each sign in a seeded random order
        lam = torch.cat([s[torch.randperm(len(s), generator=gen)] for s in (neg, pos)])
        self.nw = len(neg)
        self.h = torch.where(lam < 0, -lam / 2, lam)  # ½h·y²: λ⁺, or a = |λ|/2
        a = self.h[: self.nw]
        self.beta = 1.5 * a  # the wiggles' β·sin²(ωy)/ω² term
        self.mu = min(_ends(pos, "min") + _ends(KAPPA * a, "min"))
        self.lip = max(_ends(pos, "max") + _ends(4 * a, "max"))
        if kind != "pl":
            self.mu, self.lip = (0.0, math.nan) if kind == "quartic" else (math.nan, math.inf)

    def _rot(self, x: Tensor) -> Tensor:
        return (self.B.T @ x.view(BLOCK, -1)).reshape(-1)

    def _unrot(self, y: Tensor) -> Tensor:
        return (self.B @ y.view(BLOCK, -1)).reshape(-1)

    def value_grad(self, x: Tensor) -> tuple[float, Tensor]:
        y = self._rot(x - self.c)
        if self.kind == "quartic":
            y2 = y * y
            return (y2 * y2).sum().item(), self._unrot(4 * y2 * y)
        if self.kind == "threehalves":
            r = y.abs().sqrt()
            return (r * r * r).sum().item(), self._unrot(1.5 * r * y.sign())
        dg = self.h * y
        value = 0.5 * (y * dg).sum().item()
        if self.nw:
            z = 2 * OMEGA * y[: self.nw]
            value += (self.beta * (1 - torch.cos(z))).sum().item() / (2 * OMEGA**2)
            dg[: self.nw] += self.beta * torch.sin(z) / OMEGA
        return value, self._unrot(dg)

    def hvp(self, x: Tensor, v: Tensor, grad: Tensor) -> Tensor:
        y = self._rot(x - self.c)
        if self.kind == "quartic":
            curv = 12 * y * y
        elif self.kind == "threehalves":
            curv = 0.75 / y.abs().sqrt().clamp_min(1e-300)
        else:
            curv = self.h.clone()
            curv[: self.nw] += 2 * self.beta * torch.cos(2 * OMEGA * y[: self.nw])
        return self._unrot(curv * self._rot(v))


def start(seed: int, n: int = DIM) -> Tensor:
    """A seeded random start in the [0, 1] box (the mask's box)."""
    return torch.rand(n, generator=torch.Generator().manual_seed(10_000 + seed), dtype=F64)
