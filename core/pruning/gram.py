"""The calibration Gram XᵀX of one linear's inputs, summed the same way whatever the batch.

The layer-wise runner's hooks hand each linear's input over batch by batch; SparseGPT reads
H = 2·XᵀX/n from the sum (Frantar & Alistarh, Alg. 1). ``GramSum`` takes one float32
product per GRAM_CHUNK consecutive calibration sequences (sequences 0-3, 4-7, ... whatever
the runner's batch; the last chunk may be shorter), sums them in calibration order in
float64 and hands the total over in float32. The shape of every product and the order of
the sum are then fixed by the calibration set alone, so the runner's batch does not move
SparseGPT's masks; a product over a few sequences rather than one is a larger GEMM, several
times fewer kernel calls and thread barriers. Float64 products would also absorb BLAS
differences but cost about twice the time on CPU (docs/benchmarks.md).

XᵀX is symmetric, so each product computes only the blocks on and above the diagonal (the
columns split into up to MAX_BLOCKS blocks of about BLOCK_COLS), and ``result`` mirrors them
below: 3 of 4 or 10 of 16 block products, about a third less work for wide inputs, and an
exactly symmetric H.
"""

from __future__ import annotations

import itertools
import math

import torch

GRAM_DTYPE = torch.float64  # the running sum's dtype
GRAM_CHUNK = 4  # calibration sequences per float32 product
BLOCK_COLS = 384  # target width of a column block (narrower inputs: one block)
MAX_BLOCKS = 4


def column_blocks(n: int) -> list[slice]:
    """Up to MAX_BLOCKS contiguous column ranges of about BLOCK_COLS covering 0..n."""
    k = max(1, min(MAX_BLOCKS, math.ceil(n / BLOCK_COLS)))
    edges = [round(i * n / k) for i in range(k + 1)]
    return [slice(a, b) for a, b in itertools.pairwise(edges)]


def add_upper(acc: torch.Tensor, X: torch.Tensor, blocks: list[slice]) -> None:
    """acc[I, J] += X[:, I]ᵀ X[:, J] for every block pair I <= J. acc: (n, n); X: (t, n)."""
    for a, bi in enumerate(blocks):
        for bj in blocks[a:]:
            acc[bi, bj] += X[:, bi].T @ X[:, bj]


def mirror_upper(acc: torch.Tensor, blocks: list[slice]) -> None:
    """Fill the blocks below the diagonal from those above it, in place."""
    for a, bi in enumerate(blocks):
        for bj in blocks[a + 1 :]:
            acc[bj, bi] = acc[bi, bj].T


class GramSum:
    """Σ XᵀX over calibration sequences (module docstring): ``add`` each batch (B, L, in),
    then ``result`` once (float32 (in, in)); ``acc`` is the float64 running sum."""

    def __init__(self, n_in: int, device: torch.device | str) -> None:
        self.acc = torch.zeros(n_in, n_in, device=device, dtype=GRAM_DTYPE)
        self.blocks = column_blocks(n_in)
        self.pending: list[torch.Tensor] = []  # sequences (L, in) not yet in a product

    def add(self, x: torch.Tensor) -> None:
        """x: (B, L, in) float32, the next B calibration sequences."""
        seqs, start = x.shape[0], 0
        if not self.pending:  # at a chunk boundary: whole chunks straight from the batch
            while start + GRAM_CHUNK <= seqs:
                self._product(x[start : start + GRAM_CHUNK].reshape(-1, x.shape[-1]))
                start += GRAM_CHUNK
        for seq in x[start:]:  # (L, in)
            self.pending.append(seq.clone())  # copied: the batch is not held alive
            if len(self.pending) == GRAM_CHUNK:
                self._flush()

    def result(self) -> torch.Tensor:
        """The float32 Gram (in, in), the last shorter chunk included."""
        self._flush()
        mirror_upper(self.acc, self.blocks)
        return self.acc.float()

    def _flush(self) -> None:
        if self.pending:
            self._product(torch.cat(self.pending))
            self.pending = []

    def _product(self, X: torch.Tensor) -> None:
        """One float32 product over a chunk's rows X (chunk·L, in), added in float64."""
        add_upper(self.acc, X, self.blocks)
