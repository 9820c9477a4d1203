"""The shared layer-wise runner: statistics, sequential propagation, adapter errors."""

import pytest
import torch
from torch import nn

import core.pruning.layerwise as layerwise
from core.adapters import ROLES, adapter_for, resolve_roles
from core.errors import ConfigError, ModelLoadError
from core.models.layer_inputs import capture_layer_inputs, forward_layer
from core.models.load import TINY_MODELS, build_tiny_model
from core.pruning.layerwise import run_layerwise


def _ids(n=4, L=16, seed=0):
    return torch.randint(0, 256, (n, L), generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("name", list(TINY_MODELS))
def test_noop_pass_reproduces_the_model(name):
    """With nothing pruned, propagating captured inputs layer by layer equals the model's
    own hidden states (checks kwargs capture per layer kind (Gemma-3's sliding and global
    layers; 32 tokens exceed the tiny models' 16-token windows), RoPE, GQA, learned positions
    and tensor-or-tuple outputs) for every family."""
    model = build_tiny_model(name).eval()
    adapter = adapter_for(model)
    ids = _ids(L=32)
    with torch.no_grad():
        ref = model(input_ids=ids, output_hidden_states=True).hidden_states
    inputs = capture_layer_inputs(adapter, ids, torch.device("cpu"), batch_size=3)
    assert [h.shape[0] for h in inputs.hidden] == [3, 1]
    for i, layer in enumerate(adapter.layers):
        assert torch.allclose(torch.cat(inputs.hidden), ref[i], atol=1e-5)
        with torch.no_grad():
            inputs.hidden = [
                forward_layer(layer, h, kw)
                for h, kw in zip(inputs.hidden, inputs.for_layer(i), strict=True)
            ]


def test_gram_statistics_match_direct_computation():
    model = build_tiny_model("tiny-llama").eval()
    adapter = adapter_for(model)
    ids = _ids()
    seen = {}

    def grab(ctx):
        if ctx.index == 0:
            seen.update(stats=ctx.stats, inputs=ctx.inputs)
        return []

    run_layerwise(adapter, ids, grab, ROLES, needs_inputs=frozenset({"q"}), batch_size=2)
    layer0 = adapter.layers[0]
    with torch.no_grad():
        x = layer0.input_layernorm(model.model.embed_tokens(ids)).reshape(-1, adapter.hidden_size)
    assert seen["stats"]["q"] is seen["stats"]["k"] is seen["stats"]["v"]  # shared input
    assert seen["stats"]["q"].n_tokens == ids.numel()
    assert torch.allclose(seen["stats"]["q"].gram, x.T @ x, rtol=1e-4, atol=1e-4)
    assert seen["inputs"]["q"].shape == (4, 16, adapter.hidden_size)
    assert seen["stats"]["down"].gram.shape == (adapter.intermediate_size,) * 2


def test_sequential_inputs_come_from_pruned_layers():
    """Layer 1 must see layer 0's pruned output (Wanda/SparseGPT sequential scheme)."""
    model = build_tiny_model("tiny-llama").eval()
    adapter = adapter_for(model)
    grams = []

    def zero_layer0(ctx):
        grams.append(ctx.stats["q"].gram.clone())
        if ctx.index == 0:
            for lin in ctx.linears.values():
                lin.weight.data.zero_()
        return []

    run_layerwise(adapter, _ids(), zero_layer0, ROLES)
    # layer 0 zeroed -> identity residual: layer 1 input equals layer 0 input
    assert torch.allclose(grams[0], grams[1], rtol=1e-5, atol=1e-5)


def test_resolve_roles():
    assert resolve_roles("qk") == ("q", "k")
    assert resolve_roles("down,q") == ("q", "down")
    with pytest.raises(ConfigError):
        resolve_roles("q,bogus")


def test_model_without_decoder_layers():
    class NotALM(nn.Module):
        def __init__(self):
            super().__init__()
            self.model = nn.Module()
            self.model.layers = nn.ModuleList()

    with pytest.raises(ModelLoadError, match="no decoder layers"):
        adapter_for(NotALM())


def test_model_without_separate_qk():
    model = build_tiny_model("tiny-llama")
    for layer in model.model.layers:
        del layer.self_attn.q_proj
    with pytest.raises(ModelLoadError, match="separate linears"):
        adapter_for(model)


def test_light_statistics_norms_and_sample(monkeypatch):
    """Light mode (Wanda/magnitude): exact column norms, an evenly strided token sample."""
    import core.pruning.layerwise

    monkeypatch.setattr(core.pruning.layerwise, "SAMPLE_ROWS", 16)
    model = build_tiny_model("tiny-llama").eval()
    adapter = adapter_for(model)
    ids = _ids(4, 16)  # 64 tokens -> stride 4 -> 16 sampled rows
    seen = {}

    def grab(ctx):
        if ctx.index == 0:
            seen.update(stats=ctx.stats)
        return []

    run_layerwise(adapter, ids, grab, ROLES, needs_gram=False, batch_size=3)
    with torch.no_grad():
        x = model.model.layers[0].input_layernorm(model.model.embed_tokens(ids)).reshape(-1, 64)
    q = seen["stats"]["q"]
    assert q.gram is None and q.n_tokens == 64
    # float32 inputs squared exactly and summed in float64: only the order of the sum may
    # differ from this one's
    assert q.col_sq_norms.dtype == torch.float64
    torch.testing.assert_close(q.col_sq_norms, x.double().square().sum(0), rtol=1e-12, atol=0)
    assert torch.allclose(q.sample, x[::4], atol=1e-6)
    assert q.error_tokens == 16


def test_every_layer_sees_the_models_own_hidden_states():
    """Nothing pruned: the Gram of layer i's q input equals that of the model's own normed
    hidden state i (in-place propagation over uneven batches, 3 + 1 sequences)."""
    model = build_tiny_model("tiny-llama").eval()
    adapter = adapter_for(model)
    ids = _ids()
    with torch.no_grad():
        hidden = model(input_ids=ids, output_hidden_states=True).hidden_states
    grams = []
    run_layerwise(
        adapter, ids, lambda ctx: grams.append(ctx.stats["q"].gram) or [], ROLES, batch_size=3
    )
    for i, layer in enumerate(adapter.layers):
        with torch.no_grad():
            x = layer.input_layernorm(hidden[i]).reshape(-1, adapter.hidden_size)
        assert torch.allclose(grams[i], x.T @ x, rtol=1e-4, atol=1e-4)


def test_statistics_pass_stops_after_the_last_hooked_linear():
    """From the second batch on, the statistics pass ends once the last hooked linear has read
    its input: down_proj multiplies once (batch 0) in that pass, then once per batch when the
    pruned layer propagates. The statistics are those of full layer calls."""
    model = build_tiny_model("tiny-llama").eval()
    adapter = adapter_for(model)
    ids = _ids(6, 16)
    calls = []
    down = adapter.linears(adapter.layers[0], ("down",))["down"]
    handle = down.register_forward_hook(lambda *_: calls.append(1))
    seen = {}

    def grab(ctx):
        if ctx.index == 0:
            seen.update(calls=len(calls), stats=ctx.stats)
        return []

    run_layerwise(adapter, ids, grab, ROLES, batch_size=2)  # 3 batches
    handle.remove()
    assert seen["calls"] == 1 and len(calls) == 1 + 3
    inputs = []
    handle = down.register_forward_pre_hook(lambda _m, args: inputs.append(args[0]))
    with torch.no_grad():
        model(input_ids=ids)  # the dense model's own down_proj inputs, all 6 sequences
    handle.remove()
    x_down = inputs[0].reshape(-1, down.in_features)
    assert seen["stats"]["down"].n_tokens == ids.numel()
    assert torch.allclose(seen["stats"]["down"].gram, x_down.T @ x_down, rtol=1e-4, atol=1e-4)


def test_bfloat16_calibration_forwards_change_the_statistics_not_the_shapes():
    """calib_dtype="bfloat16" runs the statistics pass and the propagation under bfloat16
    autocast: layer 1's statistics (its inputs come from layer 0's bfloat16 products) differ
    from float32's, by bfloat16 rounding and not more, and keep their float64/float32 dtypes."""
    model = build_tiny_model("tiny-llama").eval()
    adapter = adapter_for(model)
    ids = _ids(L=32)
    seen = {}

    def grab(dtype):
        def fn(ctx):
            if ctx.index == 1:
                seen[dtype] = {r: ctx.stats[r] for r in ("q", "o", "down")}
            return []

        return fn

    for dtype in ("float32", "bfloat16"):
        run_layerwise(adapter, ids, grab(dtype), ROLES, needs_gram=False, calib_dtype=dtype)
    f32, bf16 = seen["float32"], seen["bfloat16"]
    for role in ("q", "o", "down"):
        a, b = f32[role].col_sq_norms, bf16[role].col_sq_norms
        assert b.dtype == torch.float64 and bf16[role].sample.dtype == torch.float32
        rel = ((a - b).abs() / a.clamp_min(1e-12)).max().item()
        assert 0 < rel < 0.1, (role, rel)  # layer 1 sees layer 0's bfloat16 outputs


def test_bfloat16_forwards_warn_where_they_would_be_emulated(monkeypatch, caplog):
    """Without bfloat16 units the autocast forwards are emulated and slower than float32:
    the runner says so once; with them, or in float32, it says nothing."""
    cpu = torch.device("cpu")
    for native, dtype, warned in [
        (False, "bfloat16", True),
        (True, "bfloat16", False),
        (False, "float32", False),
    ]:
        monkeypatch.setattr(layerwise, "native_bf16", lambda _d, n=native: n)
        caplog.clear()
        with caplog.at_level("WARNING", logger="core.pruning.layerwise"):
            layerwise.warn_if_emulated(cpu, dtype)
        assert ("emulated" in caplog.text) == warned, (native, dtype)
