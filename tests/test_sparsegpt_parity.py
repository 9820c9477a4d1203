"""SparseGPT against a transcription of the reference sweep, and reproducibility (issue #19).

The reference is IST-DASLab/sparsegpt ``SparseGPT.fasterprune`` (the same loop runs in
locuslab/wanda and llm-compressor's ``sparsify_weight``), transcribed below in float64 on
hand-sized matrices. The reproducibility test prunes a small model twice, with different
thread counts and runner batches, and needs the same masks.
"""

from __future__ import annotations

import copy

import pytest
import torch

import core.methods.sparsegpt as sgpt
from core.adapters import ROLES, adapter_for
from core.errors import ConfigError
from core.methods.masks import prune_count
from core.methods.obs_factor import hessian_factor, inverse_hessian_factor
from core.methods.sparsegpt import (
    SparseGPT,
    SparseGPTOptions,
    block_mask,
    lazy_update,
    sparsegpt_prune,
    sparsegpt_prune_group,
)
from core.models.load import build_tiny_model
from core.pruning.layerwise import run_layerwise, run_method


def make_problem(seed: int, out: int = 48, d_in: int = 96, tokens: int = 384):
    """W (out, in), H = 2XᵀX/n (in, in) float64, with outlier features as in LLM inputs."""
    g = torch.Generator().manual_seed(seed)
    W = torch.randn(out, d_in, generator=g, dtype=torch.float64)
    X = torch.randn(tokens, 24, generator=g, dtype=torch.float64)
    X = X @ torch.randn(24, d_in, generator=g, dtype=torch.float64)
    X += 0.3 * torch.randn(tokens, d_in, generator=g, dtype=torch.float64)
    X[:, torch.randperm(d_in, generator=g)[:3]] *= 10.0
    return W, 2 * X.T @ X / tokens


def reference_fasterprune(W, H, sparsity, prunen=0, prunem=0, blocksize=128, percdamp=0.01):
    """IST-DASLab/sparsegpt sparsegpt.py ``fasterprune`` without quantisation, in W's dtype."""
    W, H = W.clone(), H.clone()
    columns = W.shape[1]
    dead = torch.diag(H) == 0
    H[dead, dead] = 1
    W[:, dead] = 0
    damp = percdamp * torch.mean(torch.diag(H))
    diag = torch.arange(columns)
    H[diag, diag] += damp
    H = torch.linalg.cholesky(H)
    H = torch.cholesky_inverse(H)
    Hinv = torch.linalg.cholesky(H, upper=True)
    for i1 in range(0, columns, blocksize):
        i2 = min(i1 + blocksize, columns)
        W1 = W[:, i1:i2].clone()
        Q1 = torch.zeros_like(W1)
        Err1 = torch.zeros_like(W1)
        Hinv1 = Hinv[i1:i2, i1:i2]
        if prunen == 0:
            tmp = W1**2 / (torch.diag(Hinv1).reshape((1, -1))) ** 2
            thresh = torch.sort(tmp.flatten())[0][int(tmp.numel() * sparsity)]
            mask1 = tmp <= thresh
        else:
            mask1 = torch.zeros_like(W1) == 1
        for i in range(i2 - i1):
            w = W1[:, i]
            d = Hinv1[i, i]
            if prunen != 0 and i % prunem == 0:
                tmp = W1[:, i : i + prunem] ** 2 / (torch.diag(Hinv1)[i : i + prunem]) ** 2
                mask1.scatter_(1, i + torch.topk(tmp, prunen, dim=1, largest=False)[1], True)
            q = w.clone()
            q[mask1[:, i]] = 0
            Q1[:, i] = q
            err1 = (w - q) / d
            W1[:, i:] -= err1.unsqueeze(1).matmul(Hinv1[i, i:].unsqueeze(0))
            Err1[:, i] = err1
        W[:, i1:i2] = Q1
        W[:, i2:] -= Err1.matmul(Hinv[i1:i2, i2:])
    return W


@pytest.mark.parametrize(("seed", "blocksize"), [(0, 128), (1, 32), (2, 20)])
def test_threshold_selection_is_the_reference_sweep(seed: int, blocksize: int) -> None:
    """selection="threshold" gives the reference's weights (same mask, same updates)."""
    W, H = make_problem(seed)
    W_new, mask, _ = sparsegpt_prune(W, H, 0.5, blocksize=blocksize, selection="threshold")
    ref = reference_fasterprune(W, H, 0.5, blocksize=blocksize)
    assert torch.equal(mask, ref == 0)
    torch.testing.assert_close(W_new, ref.float(), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("blocksize", [128, 12])
def test_nm_is_the_reference_sweep(blocksize: int) -> None:
    W, H = make_problem(3)
    W_new, mask, _ = sparsegpt_prune(W, H, 0.5, nm=(2, 4), blocksize=blocksize)
    ref = reference_fasterprune(W, H, 0.5, prunen=2, prunem=4, blocksize=blocksize)
    assert torch.equal(mask, ref == 0)
    torch.testing.assert_close(W_new, ref.float(), rtol=1e-4, atol=1e-4)


def test_exact_selection_prunes_the_budget_and_threshold_one_more_per_block() -> None:
    """Negative control for the transcription test: "exact" is not the reference's count."""
    W, H = make_problem(4)  # 96 columns, blocks of 32: three blocks
    _, exact, _ = sparsegpt_prune(W, H, 0.5, blocksize=32, selection="exact")
    _, thresh, _ = sparsegpt_prune(W, H, 0.5, blocksize=32, selection="threshold")
    assert exact.sum().item() == prune_count(W.numel(), 0.5)
    assert thresh.sum().item() == prune_count(W.numel(), 0.5) + 3  # no ties in random data
    assert not torch.equal(exact, reference_fasterprune(W, H, 0.5, blocksize=32) == 0)


def test_block_mask_rules_on_ties() -> None:
    scores = torch.tensor([[1.0, 2.0, 2.0, 3.0]])
    assert block_mask(scores, 0.5, 1, 0, 4, "exact").tolist() == [[True, True, False, False]]
    # threshold = sorted[2] = 2: every score <= 2 goes, the tie included
    assert block_mask(scores, 0.5, 1, 0, 4, "threshold").tolist() == [[True, True, True, False]]
    with pytest.raises(ConfigError):
        SparseGPTOptions(selection="topk")


def test_lazy_update_rounds_once() -> None:
    """W −= err @ U in float64, rounded once: 2²⁴+2 − (2²⁴+1) = 1. Negative control: a
    float32 product rounds 2²⁴+1 to 2²⁴ first (as any float32 GEMM must), leaving 2."""
    W = torch.tensor([[2.0**24 + 2]])
    err = torch.tensor([[1.0, 1.0]])
    U = torch.tensor([[2.0**24], [1.0]], dtype=torch.float64)
    assert (W - err @ U.float()).item() == 2.0
    lazy_update(W, err, U)
    assert W.dtype == torch.float32 and W.item() == 1.0


@pytest.mark.parametrize("nm", [None, (2, 4)])
def test_saliencies_are_float64_from_the_float64_factor(monkeypatch, nm) -> None:
    """The scores every mask is chosen from are w²/U_jj² in float64, U_jj from the float64
    factor: the first block's are those of the original weights, bit for bit."""
    W, H = make_problem(5)
    seen = []
    for name in ("block_mask", "nm_prune_mask"):
        real = getattr(sgpt, name)
        monkeypatch.setattr(
            sgpt, name, lambda scores, *a, _real=real: seen.append(scores) or _real(scores, *a)
        )
    sparsegpt_prune(W, H, 0.5, nm=nm, blocksize=32)
    U, _, _ = inverse_hessian_factor(H, 0.01)
    first = W.float().double().square() / U.diagonal().square()
    assert all(s.dtype == torch.float64 for s in seen)
    expected = first[:, :32] if nm is None else first[:, :4]
    assert torch.equal(seen[0], expected)


@pytest.mark.parametrize(
    ("nm", "selection"), [(None, "threshold"), (None, "exact"), ((2, 4), "threshold")]
)
def test_a_group_swept_at_once_is_each_member_alone(nm, selection) -> None:
    """q/k/v-like members (48, 16 and 16 rows, their own sparsities, one dead input) swept as
    one matrix: every weight, mask and OBS loss is the one the member gets alone, bit for bit."""
    g = torch.Generator().manual_seed(7)
    _, H = make_problem(3)
    H[5, :] = H[:, 5] = 0.0  # an input never active
    Ws = [torch.randn(rows, 96, generator=g) for rows in (48, 16, 16)]
    sparsities = [0.5, 0.3, 0.65]
    factor = hessian_factor(H.float(), 0.01)
    together = sparsegpt_prune_group(Ws, sparsities, factor, nm, 20, selection)
    for W, p, (W_new, mask, info) in zip(Ws, sparsities, together, strict=True):
        alone = sparsegpt_prune(W, None, p, nm, 20, selection=selection, factor=factor)
        assert torch.equal(W_new, alone[0]) and torch.equal(mask, alone[1])
        assert info == alone[2] and mask[:, 5].all()


def test_the_method_prunes_the_same_with_groups_together_or_alone(monkeypatch) -> None:
    """SparseGPT on a tiny model with q/k/v and gate/up swept together (the default for
    small groups) and one linear at a time: the same weights bit for bit, the same errors."""
    model = build_tiny_model("tiny-llama", hidden_size=128, intermediate_size=256).eval()
    ids = torch.randint(0, 256, (4, 32), generator=torch.Generator().manual_seed(2))

    sizes = []  # members per sweep
    real = sgpt.sparsegpt_prune_group
    monkeypatch.setattr(
        sgpt, "sparsegpt_prune_group", lambda Ws, *a: sizes.append(len(Ws)) or real(Ws, *a)
    )

    def prune(joint_bytes: int):
        monkeypatch.setattr(SparseGPT, "joint_bytes", joint_bytes)
        m = copy.deepcopy(model)
        adapter = adapter_for(m)
        sparsity = [dict.fromkeys(ROLES, 0.5)] * adapter.n_layers
        res = run_method(
            SparseGPT(SparseGPTOptions()), adapter, ids, ROLES, sparsity, "unstructured", "cpu"
        )
        return m.state_dict(), [(r.role, r.rel_error, r.extra["pruned"]) for r in res.reports]

    method = SparseGPT(SparseGPTOptions())
    assert method.joins([(128, 128), (64, 128), (64, 128)]) and not method.joins([(128, 128)])
    assert not method.joins([(8192, 4096), (8192, 4096)])  # 256 MiB: one at a time
    (together, rep_t), (alone, rep_a) = prune(SparseGPT.joint_bytes), prune(0)
    layers = len(adapter_for(model).layers)
    assert sizes == [3, 1, 2, 1] * layers + [1] * 7 * layers  # q/k/v, o, gate/up, down
    assert rep_t == rep_a
    assert all(torch.equal(together[k], alone[k]) for k in together)


def _prune_tiny(model, ids, threads: int, batch: int) -> dict[str, torch.Tensor]:
    model = copy.deepcopy(model)
    adapter = adapter_for(model)
    sparsity = [dict.fromkeys(ROLES, 0.5)] * adapter.n_layers
    old = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        run_method(
            SparseGPT(SparseGPTOptions()),
            adapter,
            ids,
            ROLES,
            sparsity,
            "unstructured",
            "cpu",
            batch_size=batch,
        )
    finally:
        torch.set_num_threads(old)
    return {
        f"{i}.{role}": lin.weight.detach().clone()
        for i, layer in enumerate(adapter.layers)
        for role, lin in adapter.linears(layer, ROLES).items()
    }


def test_sparsegpt_masks_do_not_depend_on_threads_or_runner_batch() -> None:
    """The same prune with 1 thread and 1 sequence per layer call, then 2 threads and 3
    sequences per call (batches 3+3+2): every linear gets the same mask."""
    model = build_tiny_model("tiny-llama", hidden_size=128, intermediate_size=256).eval()
    ids = torch.randint(0, 256, (8, 64), generator=torch.Generator().manual_seed(0))
    a = _prune_tiny(model, ids, threads=1, batch=1)
    b = _prune_tiny(model, ids, threads=2, batch=3)
    assert a.keys() == b.keys()
    for name in a:
        assert torch.equal(a[name] == 0, b[name] == 0), name
        torch.testing.assert_close(a[name], b[name], rtol=1e-5, atol=1e-6)


def test_gram_is_the_same_for_every_runner_batch() -> None:
    """Layer 0's Gram (inputs straight from the embeddings) is bitwise the same for runner
    batches of 1, 3 and 8 sequences: per-sequence float64 sums in calibration order."""
    model = build_tiny_model("tiny-llama").eval()
    adapter = adapter_for(model)
    ids = torch.randint(0, 256, (8, 32), generator=torch.Generator().manual_seed(1))
    grams = []

    def grab(ctx):
        if ctx.index == 0:
            grams.append({r: ctx.stats[r].gram.clone() for r in ("q", "gate")})
        return []

    for batch in (1, 3, 8):
        run_layerwise(adapter, ids, grab, ("q", "gate"), batch_size=batch)
    for g in grams[1:]:
        assert g["q"].dtype == torch.float32
        assert all(torch.equal(g[r], grams[0][r]) for r in g)
