"""Step 1 of SliceGPT: fold every RMSNorm's γ into the linears that read it (papers.md §6).

What remains of each norm is N(x) = x / √(‖x‖²/d + ε) with d the *original* width, which
commutes with any orthogonal Q: N(xQ) = N(x)Q (computational invariance).
"""

from __future__ import annotations

import torch
from torch import nn

from core.adapter import ModelAdapter
from core.errors import ModelLoadError
from core.methods.slicegpt.modules import FoldedRMSNorm, map_rows


def _check_rms_norm(norm: nn.Module, d: int, eps: float, where: str) -> torch.Tensor:
    """Return γ (d,) if ``norm`` computes γ·x/√(mean x² + ε); ModelLoadError otherwise."""
    weight = getattr(norm, "weight", None)
    if (
        not isinstance(weight, torch.Tensor)
        or weight.shape != (d,)
        or getattr(norm, "bias", None) is not None
    ):
        raise ModelLoadError(
            f"{where} is a {type(norm).__name__}, not an RMSNorm with a ({d},) weight and no "
            "bias; SliceGPT here supports RMSNorm (Llama-shaped) models"
        )
    # A probe with a non-zero mean tells RMSNorm from LayerNorm and γ from (1 + γ) variants.
    probe = torch.randn(4, d, generator=torch.Generator().manual_seed(0)) + 1.0
    probe = probe.to(device=weight.device, dtype=weight.dtype)
    with torch.no_grad():
        got = norm(probe).double()
        xf = probe.double()
        want = weight.double() * xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    tol = 1e-2 if weight.dtype in (torch.float16, torch.bfloat16) else 1e-4
    if not torch.allclose(got, want, rtol=tol, atol=tol * want.abs().max().item()):
        raise ModelLoadError(
            f"{where} ({type(norm).__name__}) does not compute γ·x/√(mean(x²)+ε); SliceGPT "
            "here supports RMSNorm (Llama-shaped) models"
        )
    return weight.detach()


def untie_head(model: nn.Module) -> None:
    """Give lm_head its own copy of a weight it may share with the embeddings."""
    head, embed = model.lm_head, model.model.embed_tokens
    if head.weight is embed.weight or head.weight.data_ptr() == embed.weight.data_ptr():
        head.weight = nn.Parameter(
            head.weight.detach().clone(), requires_grad=head.weight.requires_grad
        )
    model.config.tie_word_embeddings = False


def _scale_inputs(lin: nn.Linear, gamma: torch.Tensor) -> None:
    """W ← W·diag(γ) for W (out, in), computed in float64."""
    W = lin.weight.detach()
    g = gamma.double().to(W.device)
    lin.weight.data = map_rows(W, lambda rows: rows.double() * g)


def fold_layer_norms(adapter: ModelAdapter, index: int) -> None:
    """Fold decoder layer ``index``'s two RMSNorms into the linears reading them
    (input_layernorm -> q, k, v; post_attention_layernorm -> gate, up) and replace the
    norms by FoldedRMSNorm. Function preserving; the layer must be materialised."""
    d, eps = adapter.hidden_size, adapter.rms_eps
    layer = adapter.layers[index]
    lin = adapter.linears(layer)
    for norm_attr, roles in (("input_layernorm", "qkv"), ("post_attention_layernorm", "gu")):
        gamma = _check_rms_norm(getattr(layer, norm_attr), d, eps, f"layer {index} {norm_attr}")
        for role in {"qkv": ("q", "k", "v"), "gu": ("gate", "up")}[roles]:
            _scale_inputs(lin[role], gamma)
        setattr(layer, norm_attr, FoldedRMSNorm(d, eps))


def fold_final_norm(adapter: ModelAdapter) -> float:
    """Fold the final norm's γ into lm_head and replace it by FoldedRMSNorm. Returns ε."""
    d, eps = adapter.hidden_size, adapter.rms_eps
    _scale_inputs(adapter.lm_head, _check_rms_norm(adapter.final_norm, d, eps, "final norm"))
    adapter.backbone.norm = FoldedRMSNorm(d, eps)
    return eps


def fold_norms(adapter: ModelAdapter) -> float:
    """Fold every RMSNorm's γ into the linears reading it and replace the norms by
    FoldedRMSNorm (``fold_layer_norms`` for each layer, then ``fold_final_norm``).
    Function preserving. Returns ε."""
    for i in range(adapter.n_layers):
        fold_layer_norms(adapter, i)
    return fold_final_norm(adapter)


def center_embeddings(embed: nn.Embedding) -> None:
    """E ← E − mean(E, −1)·1ᵀ for E (vocab, d): every token's embedding loses its mean over d.

    The reference ``fuse_modules`` does this for every model (run after untying, so the head
    keeps the uncentred rows). For an RMSNorm model it changes the function: layer 0 reads
    x − x̄·1 instead of x, and the residual stream carries the difference.
    """
    E = embed.weight.detach()
    Ed = E.double()
    embed.weight.data = (Ed - Ed.mean(dim=-1, keepdim=True)).to(E.dtype)
