"""Issue #30: a streamed Wanda run stays within its memory budget. The pieces that keep
transients small must not change any result: Wanda's mask computed a block of rows at a
time is the whole-matrix mask bit for bit (ties, OWL's non-integer per-row counts, N:M,
"matrix" scope), the error on the token sample is the Gram formula's, a tensor read in
pieces is the tensor, and large heap blocks are mapped on glibc."""

import subprocess
import sys
from pathlib import Path

import pytest
import torch

from core.machine import process_memory
from core.methods.linear import relative_reconstruction_error, sample_reconstruction_error
from core.methods.masks import score_mask
from core.methods.wanda import wanda_mask, wanda_scores
from core.models.weights import LazyWeights
from core.stream.synthetic import llama_config, write_random_model


@pytest.mark.parametrize("rows", [1, 7, 64])
@pytest.mark.parametrize("sparsity", [0.0, 0.29, 0.5, 0.77])
@pytest.mark.parametrize("scope", ["row", "matrix"])
@pytest.mark.parametrize("ties", [False, True])
def test_wanda_mask_in_blocks_is_the_whole_matrix_mask(rows, sparsity, scope, ties) -> None:
    g = torch.Generator().manual_seed(rows)
    W = torch.randn(rows, 40, generator=g)
    norms = torch.rand(40, generator=g, dtype=torch.float64) * 3
    if ties:  # few distinct scores: the stable sort's tie-break decides
        W, norms = (W * 2).round() / 2, norms.round()
    whole = score_mask(wanda_scores(W, norms), sparsity, scope)
    for block_bytes in (1, 8 * 40 * 3, 2**20):  # one row, three rows, all rows per block
        assert torch.equal(wanda_mask(W, norms, sparsity, scope, None, block_bytes), whole)


def test_wanda_mask_in_blocks_nm() -> None:
    g = torch.Generator().manual_seed(3)
    W, norms = torch.randn(9, 32, generator=g), torch.rand(32, generator=g)
    whole = score_mask(wanda_scores(W, norms), 0.5, "row", (2, 4))
    assert torch.equal(wanda_mask(W, norms, 0.5, "row", (2, 4), 8 * 32 * 2), whole)
    assert (wanda_mask(W, norms, 0.5, "row", (2, 4), 1).reshape(9, 8, 4).sum(-1) == 2).all()


def test_sample_error_is_the_gram_formula() -> None:
    g = torch.Generator().manual_seed(0)
    W = torch.randn(50, 96, generator=g)
    pruned = W * (torch.rand(50, 96, generator=g) > 0.5)
    S = torch.randn(30, 96, generator=g)  # fewer token rows than inputs, as on the real model
    direct = torch.linalg.norm((W - pruned).double() @ S.double().T)
    direct /= torch.linalg.norm(W.double() @ S.double().T)
    err = sample_reconstruction_error(W, pruned, S)
    assert err == pytest.approx(direct.item(), rel=1e-6)
    assert err == pytest.approx(relative_reconstruction_error(W, pruned, S.T @ S), rel=1e-6)
    assert sample_reconstruction_error(W, W, S) == 0.0
    assert sample_reconstruction_error(torch.zeros(3, 4), torch.ones(3, 4), torch.ones(2, 4)) == (
        float("inf")
    )


def test_lazy_weights_chunks_are_the_tensor(tmp_path) -> None:
    write_random_model(tmp_path, llama_config(2, 64, 96, 300), torch.float32)
    weights = LazyWeights(tmp_path)
    for key in sorted(weights.files):
        whole = weights.read([key])[key].reshape(-1)
        pieces = list(weights.chunks(key, chunk_bytes=1000))
        assert all(p.numel() * p.element_size() <= 1000 for p in pieces)
        assert torch.equal(torch.cat(pieces), whole)


# In a fresh interpreter: in a long process (the test suite) glibc may serve the block from a
# large free chunk already in the heap, which the threshold does not govern (it applies only
# when the heap has no chunk that fits), and then freeing it returns nothing. The probe first
# frees a 24 MiB mapped block (under the 32 MiB cap of the dynamic rise), which raises glibc's
# dynamic threshold past 16 MiB, as a streamed run's first freed weights do; then, unless the
# threshold is fixed again, the 16 MiB block comes from the heap and its free gives nothing
# back (the negative control).
MAPPED_PROBE = """
import sys
import torch
from core.machine import process_memory as pm
del_me = torch.ones(24 * 2**20 // 4)
del del_me
if sys.argv[1] == "fixed":
    assert pm.map_large_blocks()
big = torch.ones(16 * 2**20 // 4)  # 16 MiB, touched
held = pm.proc_status_mb("RssAnon")
del big
print(held - pm.proc_status_mb("RssAnon"))
"""


def _returned_mb(mode: str) -> float:
    out = subprocess.run(
        [sys.executable, "-c", MAPPED_PROBE, mode],
        capture_output=True,
        text=True,
        check=True,
        cwd=Path(__file__).resolve().parents[1],
    )
    return float(out.stdout.split()[-1])


def test_map_large_blocks_returns_freed_blocks_at_once() -> None:
    if process_memory._LIBC is None or process_memory.proc_status_mb("RssAnon") is None:
        pytest.skip("glibc's mallopt and /proc only")
    assert _returned_mb("fixed") > 12  # MiB given back by the free alone
    assert _returned_mb("dynamic") < 4  # the control: kept in the heap
