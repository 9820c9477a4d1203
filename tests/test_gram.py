"""The calibration Gram sum: upper blocks mirrored, fixed chunks whatever the batch."""

import itertools

import pytest
import torch

from core.pruning.gram import GRAM_CHUNK, GramSum, column_blocks


@pytest.mark.parametrize(("n", "blocks"), [(32, 1), (384, 1), (576, 2), (1536, 4), (11008, 4)])
def test_column_blocks_cover_the_width_in_order(n, blocks):
    got = column_blocks(n)
    assert len(got) == blocks
    assert got[0].start == 0 and got[-1].stop == n
    assert all(a.stop == b.start for a, b in itertools.pairwise(got))


def _sum(x: torch.Tensor, batch: int) -> torch.Tensor:
    gram = GramSum(x.shape[-1], "cpu")
    for start in range(0, x.shape[0], batch):
        gram.add(x[start : start + batch])
    return gram.result()


def test_gram_is_xtx_exactly_symmetric_and_independent_of_the_batch():
    """Ten sequences of 8 tokens, 700 wide (two column blocks): the sum equals XᵀX to float32
    rounding, is exactly symmetric, and is the same bits whether the runner hands the
    sequences over one, three, GRAM_CHUNK or ten at a time."""
    x = torch.randn(10, 8, 700, generator=torch.Generator().manual_seed(0))
    flat = x.reshape(-1, 700).double()
    ref = flat.T @ flat
    grams = {b: _sum(x, b) for b in (1, 3, GRAM_CHUNK, 10)}
    for b, g in grams.items():
        assert g.dtype == torch.float32
        assert torch.equal(g, g.T), b
        assert torch.allclose(g.double(), ref, rtol=1e-5, atol=1e-3), b
        assert torch.equal(g, grams[1]), b
