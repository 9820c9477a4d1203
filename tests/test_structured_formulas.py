"""ShortGPT, FLAP and structured Wanda against their papers' formulas, on hand-sized tensors
and on tiny models: Block Influence against a brute-force cosine, FLAP's fluctuation metric,
standardisation and global ranking, its bias compensation (the blocks' mean output on the
calibration tokens unchanged), structured Wanda's scores, and KV groups removed whole."""

from __future__ import annotations

import pytest
import torch

from core.methods import make_method
from core.methods.base import ApplyPlan
from core.methods.structure.flap import (
    compensation,
    fluctuation,
    group_scores,
    select_global,
    standardise,
)
from core.methods.structure.stats import Moments, block_influence_walk, writer_walk
from core.methods.structure.wanda_sp import channel_scores
from core.methods.structure.wanda_sp import group_scores as wanda_group_scores
from core.models.load import load_model
from tests.family_helpers import ids, randomized

CPU = torch.device("cpu")


def _plan(s: float) -> ApplyPlan:
    return ApplyPlan(s, (), "unstructured", CPU)


# ---- ShortGPT ------------------------------------------------------------------------------------
def _layer_io(model, adapter, x):
    """Every decoder layer's (input, output) hidden states for ids x, by hooks."""
    got = []
    hooks = [
        layer.register_forward_hook(
            lambda _m, args, out: got.append(
                (args[0].detach(), (out[0] if isinstance(out, tuple) else out).detach())
            )
        )
        for layer in adapter.layers
    ]
    with torch.no_grad():
        model(input_ids=x, use_cache=False)
    for h in hooks:
        h.remove()
    return got


@pytest.mark.parametrize("name", ["tiny-llama", "tiny-gemma3"])
def test_block_influence_is_one_minus_the_mean_token_cosine(name: str) -> None:
    model, ad = randomized(name, dtype=torch.float64)
    x = ids(3, 24)
    brute = []
    for xin, xout in _layer_io(model, ad, x):
        cos = []
        for b in range(xin.shape[0]):
            for t in range(xin.shape[1]):
                u, v = xin[b, t], xout[b, t]
                cos.append(float(u @ v) / (float(u.norm()) * float(v.norm())))
        brute.append(1.0 - sum(cos) / len(cos))
    got = block_influence_walk(ad, x, CPU, batch_size=2)
    assert got == pytest.approx(brute, abs=1e-10)
    # the method removes the layer with the lowest BI, and only it
    lm = load_model(name)
    lm.model.load_state_dict(model.float().state_dict())
    make_method("shortgpt").apply(lm, x, _plan(0.25))
    lowest = min(range(len(brute)), key=brute.__getitem__)
    assert lm.model.structure.kept == tuple(i for i in range(len(brute)) if i != lowest)
    assert lm.model.config.num_hidden_layers == len(brute) - 1


# ---- FLAP ----------------------------------------------------------------------------------------
def test_fluctuation_is_sample_variance_times_column_norm() -> None:
    g = torch.Generator().manual_seed(0)
    X = torch.randn(50, 6, generator=g, dtype=torch.float64) * torch.arange(1, 7) + 3.0
    W = torch.randn(4, 6, generator=g, dtype=torch.float64)
    m = Moments()
    m.add(X[:20].view(4, 5, 6))
    m.add(X[20:])
    for j in range(6):
        col = X[:, j]
        var = float(((col - col.mean()) ** 2).sum() / (len(col) - 1))
        norm2 = float(sum(W[i, j] ** 2 for i in range(4)))
        assert float(m.variance[j]) == pytest.approx(var, rel=1e-10)
        assert float(m.mean[j]) == pytest.approx(float(col.mean()), rel=1e-12)
        assert float(fluctuation(m.variance, W)[j]) == pytest.approx(var * norm2, rel=1e-10)
        assert float(fluctuation(m.variance, W, "IFV")[j]) == pytest.approx(var, rel=1e-10)


def test_attention_scores_standardise_then_average_a_groups_channels() -> None:
    s = torch.tensor([1.0, 2.0, 3.0, 4.0, 0.5, 0.5, 6.0, 1.0], dtype=torch.float64)
    sq = s**2
    mean = sum(sq) / 8
    std = (sum((v - mean) ** 2 for v in sq) / 7) ** 0.5
    z = [(v - mean) / std for v in sq]
    want = [sum(z[:4]) / 4, sum(z[4:]) / 4]  # two KV groups of four o_proj channels
    assert group_scores(s, 2).tolist() == pytest.approx([float(w) for w in want])
    mlp = standardise(s)
    assert float(mlp.mean()) == pytest.approx(0.0, abs=1e-12)
    assert float(mlp.std()) == pytest.approx(1.0)


def test_global_selection_removes_the_lowest_until_nearest_the_target() -> None:
    scores = torch.tensor([0.1, -2.0, 0.5, -1.0, 3.0, -0.5])
    params = torch.tensor([10, 1, 1, 10, 1, 1])
    protected = torch.tensor([False, False, False, False, True, False])
    # ascending: -2 (1), -1 (10), -0.5 (1), 0.1 (10), 0.5 (1); cumulative 1, 11, 12, 22, 23
    assert select_global(scores, params, protected, 12).tolist() == [
        False, True, False, True, False, True,
    ]  # fmt: skip
    assert select_global(scores, params, protected, 17).tolist() == [
        False,
        True,
        False,
        True,
        False,
        True,
    ]  # 12 is nearer 17 than 22; fmt: skip
    assert not select_global(scores, params, protected, 0).any()
    assert not select_global(scores, params, protected, 100)[4]  # protected stays


def test_compensation_keeps_the_mean_output() -> None:
    g = torch.Generator().manual_seed(1)
    X = torch.randn(40, 8, generator=g, dtype=torch.float64) + torch.linspace(-2, 2, 8)
    W = torch.randn(5, 8, generator=g, dtype=torch.float64)
    keep = torch.tensor([True, False, True, True, False, False, True, True])
    b = compensation(W, X.mean(0), keep)
    dense = (X @ W.T).mean(0)
    pruned = (X[:, keep] @ W[:, keep].T + b).mean(0)
    assert torch.allclose(pruned, dense, atol=1e-12)
    assert not torch.allclose((X[:, keep] @ W[:, keep].T).mean(0), dense, atol=1e-3)


def _block_calls(model, ad, x):
    """Per layer, the (args, kwargs) its attention block and its MLP block received."""
    calls: dict[tuple[int, str], list] = {}
    hooks = []
    for i, layer in enumerate(ad.layers):
        for kind, block in (("attn", ad.attention_block(layer)), ("mlp", ad.mlp_block(layer))):
            hooks.append(
                block.register_forward_pre_hook(
                    lambda _m, a, kw, key=(i, kind): calls.setdefault(key, []).append((a, kw)),
                    with_kwargs=True,
                )
            )
    with torch.no_grad():
        model(input_ids=x, use_cache=False)
    for h in hooks:
        h.remove()
    return calls


def _mean_out(block, calls) -> torch.Tensor:
    outs = []
    with torch.no_grad():
        for a, kw in calls:
            out = block(*a, **kw)
            out = out[0] if isinstance(out, tuple) else out
            outs.append(out.reshape(-1, out.shape[-1]))
    return torch.cat(outs).mean(0)


@pytest.mark.parametrize("name", ["tiny-llama", "tiny-gemma3"])
@pytest.mark.parametrize("bias", [True, False])
def test_flap_keeps_each_blocks_mean_output_on_the_calibration_tokens(name, bias) -> None:
    """Both blocks of every layer, fed the inputs the dense model gave them: the same mean
    output with compensation (float64: to rounding), a different one without (control)."""
    model, ad = randomized(name, dtype=torch.float64)
    x = ids(4, 24)
    lm = load_model(name, dtype=torch.float64)
    lm.model.load_state_dict(model.state_dict())
    calls = _block_calls(model, ad, x)
    make_method("flap", {"bias": bias, "batch_size": 2}).apply(lm, x, _plan(0.4))
    moved = 0.0
    for i, (dense_layer, layer) in enumerate(zip(ad.layers, lm.adapter.layers, strict=True)):
        for kind, blocks in (
            ("attn", (ad.attention_block(dense_layer), lm.adapter.attention_block(layer))),
            ("mlp", (ad.mlp_block(dense_layer), lm.adapter.mlp_block(layer))),
        ):
            want, got = (_mean_out(b, calls[(i, kind)]) for b in blocks)
            if bias:
                assert torch.allclose(got, want, atol=1e-10), (i, kind)
            moved = max(moved, float((got - want).abs().max()))
    assert bias or moved > 1e-3


# ---- structured Wanda and GQA --------------------------------------------------------------------
def test_wanda_sp_scores_sum_weight_times_input_norm_over_rows() -> None:
    g = torch.Generator().manual_seed(2)
    W = torch.randn(3, 8, generator=g)
    sq = torch.rand(8, generator=g) * 4
    want = [sum(abs(float(W[i, j])) * float(sq[j]) ** 0.5 for i in range(3)) for j in range(8)]
    got = channel_scores(W, sq)
    assert got.tolist() == pytest.approx(want, rel=1e-6)
    assert wanda_group_scores(got, 2).tolist() == pytest.approx([sum(want[:4]), sum(want[4:])])


@pytest.mark.parametrize("method, knob", [("wanda-sp", 0.5), ("flap", 0.6)])
def test_kv_groups_are_removed_whole(method: str, knob: float) -> None:
    """tiny-llama: 4 query heads of 16 on 2 KV heads. A removed group takes its KV head and
    both query heads reading it: the kept rows and columns are a kept group's, whole."""
    dense = load_model("tiny-llama")
    lm = load_model("tiny-llama")
    make_method(method).apply(lm, ids(4, 24), _plan(knob))
    hd, gs = 16, 2
    removed_any = False
    for dl, pl in zip(dense.adapter.layers, lm.adapter.layers, strict=True):
        d, p = dense.adapter.linears(dl), lm.adapter.linears(pl)
        n_kv = p["k"].out_features // hd
        assert p["q"].out_features == n_kv * gs * hd and p["o"].in_features == n_kv * gs * hd
        kept = [
            g
            for g in range(2)
            if any(
                torch.equal(
                    p["k"].weight[j * hd : (j + 1) * hd], d["k"].weight[g * hd : (g + 1) * hd]
                )
                for j in range(n_kv)
            )
        ]
        assert len(kept) == n_kv
        q_rows = torch.cat([torch.arange(g * gs * hd, (g + 1) * gs * hd) for g in kept])
        kv_rows = torch.cat([torch.arange(g * hd, (g + 1) * hd) for g in kept])
        assert torch.equal(p["q"].weight, d["q"].weight[q_rows])
        assert torch.equal(p["v"].weight, d["v"].weight[kv_rows])
        assert torch.equal(p["o"].weight, d["o"].weight[:, q_rows])
        removed_any |= n_kv < 2
    assert removed_any


def test_writer_moments_are_those_of_the_dense_writers_inputs() -> None:
    """The walk's statistics (every layer on the dense model, replayed from its captured
    inputs, two sequences a batch) equal those of the writers' inputs in one plain forward."""
    model, ad = randomized("tiny-gemma3", dtype=torch.float64)
    x = ids(3, 24)
    seen: dict[tuple[int, str], list] = {}
    hooks = [
        lin.register_forward_pre_hook(
            lambda _m, a, key=(i, k): seen.setdefault(key, []).append(
                a[0].reshape(-1, a[0].shape[-1])
            )
        )
        for i, layer in enumerate(ad.layers)
        for k, lin in (("attn", ad.attn_writer(layer)), ("mlp", ad.mlp_writer(layer)))
    ]
    with torch.no_grad():
        model(input_ids=x, use_cache=False)
    for h in hooks:
        h.remove()
    walked = writer_walk(ad, x, CPU, batch_size=2)
    for i, m in enumerate(walked):
        for kind, got in (("attn", m.attn), ("mlp", m.mlp)):
            X = torch.cat(seen[(i, kind)])
            assert got.n == X.shape[0] == 72
            assert torch.allclose(got.variance, X.var(0), rtol=1e-8, atol=1e-12)
            assert torch.allclose(got.sq_norm, X.pow(2).sum(0), rtol=1e-10)
