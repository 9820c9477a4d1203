"""The attention objective is faithful to every architecture the adapter accepts: q/k biases
(Qwen2) and per-head q/k RMSNorms (Qwen3) enter the loss and its closed-form gradient, checked
against the model's own attention weights and against autograd on tiny random models."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
import transformers

from core.adapters import adapter_for
from core.errors import ConfigError
from core.methods.attention_gd import (
    GroupProblem,
    group_loss_and_grad,
    group_loss_autograd,
    head_extras,
    to_heads,
)

CONFIGS = {
    "qwen2": ("Qwen2Config", "Qwen2ForCausalLM", {}),
    "qwen3": ("Qwen3Config", "Qwen3ForCausalLM", {"head_dim": 8}),
    "llama": ("LlamaConfig", "LlamaForCausalLM", {}),
}


def tiny(kind: str):
    cfg_name, model_name, extra = CONFIGS[kind]
    cfg = getattr(transformers, cfg_name)(
        vocab_size=64, hidden_size=32, intermediate_size=48, num_hidden_layers=1,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
        attn_implementation="eager", **extra,
    )  # fmt: skip
    torch.manual_seed(0)
    model = getattr(transformers, model_name)(cfg).double().eval()
    ad = adapter_for(model)
    layer = ad.layers[0]
    with torch.no_grad():  # random biases / norm gains, so that they matter
        for lin in ad.linears(layer, ("q", "k")).values():
            if lin.bias is not None:
                lin.bias.normal_(0, 0.5)
        for norm in ad.qk_norms(layer):
            if norm is not None:
                norm.weight.uniform_(0.5, 1.5)
    return model, ad, layer


def group_setup(kind: str, g: int = 1):
    model, ad, layer = tiny(kind)
    ids = torch.randint(0, 64, (2, 10), generator=torch.Generator().manual_seed(1))
    grabbed = []
    q = ad.linears(layer, ("q",))["q"]
    h = q.register_forward_pre_hook(lambda _m, a: grabbed.append(a[0].detach()))
    with torch.no_grad():
        out = model(input_ids=ids, output_attentions=True)
    h.remove()
    X = torch.cat(grabbed)  # (2, 10, 32)
    pos = torch.arange(10)[None]
    cos, sin = ad.position_embeddings(X[:1], pos)
    r, hd = ad.n_heads // ad.n_kv_heads, ad.head_dim
    lin = ad.linears(layer, ("q", "k"))
    ctx = SimpleNamespace(linears=lin, adapter=ad, layer=layer)
    extras = head_extras(ctx, r, hd, g)
    Wq = to_heads(lin["q"].weight.detach()[g * r * hd : (g + 1) * r * hd], hd)
    Wk = lin["k"].weight.detach()[g * hd : (g + 1) * hd].T
    return X, Wq, Wk, (cos[0], sin[0]), extras, out.attentions[0][:, g * r : (g + 1) * r]


@pytest.mark.parametrize("kind", list(CONFIGS))
def test_dense_targets_are_the_models_attention(kind):
    X, Wq, Wk, rope, extras, attn = group_setup(kind)
    problem = GroupProblem(X, Wq, Wk, True, rope, torch.float64, extras)
    # RoPE tables are computed in float32 by the model: agreement to ~1e-7, not 1e-12.
    torch.testing.assert_close(problem.chunks[0].Y, attn, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("kind", list(CONFIGS))
def test_closed_form_gradient_matches_autograd_with_bias_and_norm(kind):
    X, Wq, Wk, rope, extras, _ = group_setup(kind)
    gen = torch.Generator().manual_seed(2)
    Mq = torch.rand(Wq.shape, generator=gen, dtype=torch.float64)
    Mk = torch.rand(Wk.shape, generator=gen, dtype=torch.float64)
    args = (X, Wq, Wk, Mq, Mk, 0.1, True, rope, extras)
    ours, ref = group_loss_and_grad(*args), group_loss_autograd(*args)
    assert ours.loss.item() == pytest.approx(ref.loss.item(), rel=1e-10)
    for a, b in ((ours.grad_q, ref.grad_q), (ours.grad_k, ref.grad_k)):
        assert ((a - b).norm() / b.norm()).item() <= 1e-8


def test_an_unknown_qk_norm_is_refused():
    _, ad, layer = tiny("qwen3")
    layer.self_attn.q_norm = torch.nn.LayerNorm(8, elementwise_affine=False)  # no weight
    ctx = SimpleNamespace(linears=ad.linears(layer, ("q", "k")), adapter=ad, layer=layer)
    with pytest.raises(ConfigError, match="does not cover"):
        head_extras(ctx, 2, 8, 0)
