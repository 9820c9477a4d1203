"""Step 1 of SliceGPT: make every residual-stream norm a bare N(x) (papers.md §6).

Each norm's affine part (γ, and β for LayerNorm, as ``adapter.norm_affine`` gives it) moves
into the linears that read it: W ← W·diag(γ), b ← b + W·β. What remains is
N(x) = x / √(‖x‖²/d + ε) with d the *original* width, which commutes with any orthogonal Q:
N(xQ) = N(x)Q (computational invariance). A LayerNorm also subtracts the mean; that step is
removed by keeping the residual stream mean-free instead (``center_stream``: the embeddings
and every block's output linear lose their mean over d, which LayerNorm discards anyway), as
the SliceGPT reference does for OPT. The norms then compute N(x) exactly.
"""

from __future__ import annotations

import torch
from torch import nn

from core.adapters import ModelAdapter
from core.errors import ModelLoadError
from core.methods.slicegpt.modules import FoldedRMSNorm, PostNormWriter, as_adapter, map_rows

_FORMS = {
    "rms": "γ·x/√(mean(x²)+ε)",
    "rms_1p": "(1+w)·x/√(mean(x²)+ε)",
    "layernorm": "γ·(x−μ)/√(var(x)+ε)+β",
}


def _check_norm(adapter: ModelAdapter, norm: nn.Module, eps: float, where: str):
    """(γ, β) (d,) of ``norm`` if it computes the family's form; ModelLoadError otherwise."""
    d, kind = adapter.hidden_size, adapter.layout.norm
    try:
        gamma, beta = adapter.norm_affine(norm)
    except AttributeError:  # no weight: not this family's norm
        gamma = beta = None
    has_bias = getattr(norm, "bias", None) is not None
    if gamma is None or gamma.shape != (d,) or (beta is None and has_bias):
        raise ModelLoadError(
            f"{where} is a {type(norm).__name__}, not the {adapter.family} family's "
            f"{'RMSNorm' if kind != 'layernorm' else 'LayerNorm'} with a ({d},) weight; "
            f"SliceGPT folds norms computing {_FORMS[kind]}"
        )
    # A probe with a non-zero mean tells RMSNorm from LayerNorm and γ from (1 + γ) variants.
    ref = next(iter(norm.parameters()), gamma)
    probe = torch.randn(4, d, generator=torch.Generator().manual_seed(0)) + 1.0
    with torch.no_grad():
        got = norm(probe.to(device=ref.device, dtype=ref.dtype)).double().cpu()
        x = probe.double()
        if kind == "layernorm":
            x = x - x.mean(-1, keepdim=True)
        want = gamma.double() * x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)
        if beta is not None:
            want = want + beta.double()
    tol = 1e-2 if ref.dtype in (torch.float16, torch.bfloat16) else 1e-4
    if not torch.allclose(got, want, rtol=tol, atol=tol * want.abs().max().item()):
        raise ModelLoadError(
            f"{where} ({type(norm).__name__}) does not compute {_FORMS[kind]}; SliceGPT here "
            f"folds RMSNorm (Llama-shaped) and pre-LN LayerNorm (OPT) models"
        )
    return gamma, beta


def untie_head(model: nn.Module | ModelAdapter) -> None:
    """Give the head its own copy of a weight it may share with the embeddings."""
    adapter = as_adapter(model)
    head = adapter.lm_head
    if adapter.tied:
        head.weight = nn.Parameter(
            head.weight.detach().clone(), requires_grad=head.weight.requires_grad
        )
    adapter.config.tie_word_embeddings = False


def _fold_into(lin: nn.Linear, gamma: torch.Tensor, beta: torch.Tensor | None) -> None:
    """W ← W·diag(γ), b ← b + W·β for W (out, in), computed in float64. A β needs a bias
    to land in; the head gets one (``SliceSpec.head_bias``), other linears must have it."""
    W = lin.weight.detach()
    if beta is not None and bool(beta.abs().max() > 0):
        # float64 copy only here: a 32k x 1024 head's is 250 MiB
        shift = W.double() @ beta.double().to(W.device)  # (out,)
        if lin.bias is None:
            lin.bias = nn.Parameter(shift.to(W.dtype), requires_grad=False)
        else:
            lin.bias.data = (lin.bias.detach().double() + shift).to(W.dtype)
    g = gamma.double().to(W.device)
    map_rows(W, lambda rows: rows.double() * g, inplace=True)  # W shares lin.weight's storage


def fold_layer_norms(adapter: ModelAdapter, index: int) -> None:
    """Fold decoder layer ``index``'s residual norms' (γ, β) into the linears reading them
    (attention norm -> attention readers (q, k, v or fused qkv), MLP norm -> MLP readers)
    and replace the norms by FoldedRMSNorm. Function preserving (for LayerNorm: on a
    mean-free stream, see ``center_stream``); the layer must be materialised."""
    d, eps = adapter.hidden_size, adapter.rms_eps
    layer = adapter.layers[index]
    for where, norm, readers in (
        ("attention", adapter.attn_norm(layer), adapter.attn_readers(layer)),
        ("mlp", adapter.mlp_norm(layer), adapter.mlp_readers(layer)),
    ):
        gamma, beta = _check_norm(adapter, norm, eps, f"layer {index} {where} norm")
        if beta is not None and any(lin.bias is None for lin in readers) and beta.any():
            raise ModelLoadError(
                f"layer {index} {where} norm has a bias but the linears reading it do not"
            )
        for lin in readers:
            _fold_into(lin, gamma, beta)
    adapter.set_norms(layer, FoldedRMSNorm(d, eps), FoldedRMSNorm(d, eps))


def fold_post_norms(
    adapter: ModelAdapter, index: int
) -> tuple[PostNormWriter | None, PostNormWriter | None]:
    """Decoder layer ``index``'s post-attention and post-MLP norms (``adapter.post_norms``)
    as ``PostNormWriter``s N(o)·diag(γ) with ``proj`` = diag(γ) (d, d), in the output writer's
    dtype and device; None where the family has no such norm. The slicing procedure then
    rotates ``proj``'s outputs into the residual basis (``rotate_outputs``), as it would
    o_proj's / down_proj's: P = Dᵀ·Qᵀ·diag(γ). Function preserving until then."""
    d, eps = adapter.hidden_size, adapter.rms_eps
    layer = adapter.layers[index]
    out = []
    for where, norm, writer in zip(
        ("post-attention", "post-MLP"),
        adapter.post_norms(layer),
        (adapter.attn_writer(layer), adapter.mlp_writer(layer)),
        strict=True,
    ):
        if norm is None:
            out.append(None)
            continue
        gamma, beta = _check_norm(adapter, norm, eps, f"layer {index} {where} norm")
        if beta is not None and bool(beta.abs().max() > 0):
            raise ModelLoadError(f"layer {index} {where} norm has a bias; only RMSNorm folds")
        W = writer.weight
        out.append(PostNormWriter(d, eps, torch.diag(gamma).to(W.device, W.dtype)))
    return out[0], out[1]


def fold_final_norm(adapter: ModelAdapter) -> float:
    """Fold the final norm's (γ, β) into the head and replace it by FoldedRMSNorm. Returns ε."""
    d, eps = adapter.hidden_size, adapter.rms_eps
    gamma, beta = _check_norm(adapter, adapter.final_norm, eps, "final norm")
    _fold_into(adapter.lm_head, gamma, beta)
    adapter.set_final_norm(FoldedRMSNorm(d, eps))
    return eps


def fold_norms(adapter: ModelAdapter) -> float:
    """Fold every residual norm (``fold_layer_norms`` for each layer, then
    ``fold_final_norm``). Function preserving. Returns ε."""
    for i in range(adapter.n_layers):
        fold_layer_norms(adapter, i)
    return fold_final_norm(adapter)


def _center_rows(weight: torch.Tensor) -> torch.Tensor:
    """Each row of (n, d) minus its mean over d, in float64."""
    Wd = weight.double()
    return (Wd - Wd.mean(dim=-1, keepdim=True)).to(weight.dtype)


def center_embeddings(embed: nn.Embedding) -> None:
    """E ← E − mean(E, −1)·1ᵀ for E (vocab, d): every token's embedding loses its mean over d.

    The reference ``fuse_modules`` does this for every model (run after untying, so the head
    keeps the uncentred rows). For an RMSNorm model it changes the function: layer 0 reads
    x − x̄·1 instead of x, and the residual stream carries the difference.
    """
    embed.weight.data = _center_rows(embed.weight.detach())


def center_stream(adapter: ModelAdapter) -> None:
    """Make the residual stream mean-free: centre the token and position embeddings and the
    outputs of every block's writer (W ← (I − 11ᵀ/d)·W, b ← b − mean(b)). Function preserving
    for a LayerNorm model: every norm subtracts the mean the stream no longer has."""
    for table in (adapter.embed_tokens, adapter.position_table):
        if table is not None:
            center_embeddings(table)
    for layer in adapter.layers:
        for lin in (adapter.attn_writer(layer), adapter.mlp_writer(layer)):
            lin.weight.data = _center_rows(lin.weight.detach().T).T.contiguous()
            if lin.bias is not None:
                lin.bias.data = _center_rows(lin.bias.detach()[None])[0]
