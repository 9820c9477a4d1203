"""The modules of a sliced model and the record of its shapes.

A sliced decoder layer reuses the original attention and MLP modules (with smaller
``nn.Linear``s) around ``FoldedRMSNorm``s and carries the residual across each block by a
shortcut matrix; ``SliceSpec`` records every layer's widths so a saved model can be rebuilt.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

import torch
from torch import nn

from core.adapters import ModelAdapter, Traits, adapter_for
from core.errors import ConfigError, ModelLoadError

SLICING_FILE = "slicing.json"
WEIGHTS_FILE = "model.safetensors"
FORMAT_VERSION = 1


class FoldedRMSNorm(nn.Module):
    """RMSNorm with γ folded away and the mean taken over the original width d.

    N(x) = x / √(‖x‖²/d + ε) for x (..., d′) with any d′ ≤ d (papers.md §2: the output norm
    stays √d whatever d′ is). Computed in at least float32, like the HF norms.
    """

    def __init__(self, d: int, eps: float) -> None:
        super().__init__()
        self.d = d
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        xf = x.to(torch.promote_types(x.dtype, torch.float32))
        mean_sq = xf.pow(2).sum(-1, keepdim=True) / self.d
        return (xf * torch.rsqrt(mean_sq + self.eps)).to(x.dtype)

    def extra_repr(self) -> str:
        return f"mean over d={self.d}, eps={self.eps}"


class PostNormWriter(nn.Module):
    """A post-block norm followed by the linear that writes into the sliced residual stream.

    This project's extension of SliceGPT to post-norm blocks (Gemma-3): the norm sees the
    block output o (..., d) in the original basis, so o_proj / down_proj keep their d outputs,
    the norm becomes a bare N(o) over d, and ``proj`` (d′, d) = Dᵀ·Qᵀ·diag(γ) carries its γ and
    the residual basis's sliced rotation: the block adds N(o)·diag(γ)·Q·D to the stream.
    Exact at s = 0; the sliced model keeps these extra d′×d matrices (counted in n_params).
    """

    def __init__(self, d: int, eps: float, weight: torch.Tensor) -> None:
        super().__init__()
        self.norm = FoldedRMSNorm(d, eps)
        self.proj = nn.Linear(d, weight.shape[0], bias=False, device="meta")
        self.proj.weight = nn.Parameter(weight, requires_grad=False)  # (d_out, d)

    def forward(self, o: torch.Tensor) -> torch.Tensor:
        return self.proj(self.norm(o))


class SlicedDecoderLayer(nn.Module):
    """A pre-norm decoder layer with shortcut matrices on the residual (SliceGPT Fig. 4).

    h = x·S_attn + Attn(N(x));  y = h·S_mlp + MLP(N(h)).
    x: (B, L, d_in), h: (B, L, d_mid), y: (B, L, d_out); S_attn (d_in, d_mid), S_mlp
    (d_mid, d_out). ``self_attn`` and ``mlp`` are the model's own modules, so the HF model's
    layer loop, KV cache and the ModelAdapter work unchanged. With post-block norms (Gemma-3)
    each block's output passes its ``PostNormWriter`` before the add: h = x·S_attn +
    P_attn(Attn(N(x))), and likewise for the MLP.
    """

    def __init__(
        self,
        self_attn: nn.Module,
        mlp: nn.Module,
        input_layernorm: nn.Module,
        post_attention_layernorm: nn.Module,
        attn_shortcut: torch.Tensor,
        mlp_shortcut: torch.Tensor,
        attn_post: PostNormWriter | None = None,
        mlp_post: PostNormWriter | None = None,
    ) -> None:
        super().__init__()
        self.self_attn = self_attn
        self.mlp = mlp
        self.input_layernorm = input_layernorm
        self.post_attention_layernorm = post_attention_layernorm
        # Weights in their own right (counted in n_params, saved), never trained here.
        self.attn_shortcut = nn.Parameter(attn_shortcut, requires_grad=False)
        self.mlp_shortcut = nn.Parameter(mlp_shortcut, requires_grad=False)
        self.attn_post, self.mlp_post = attn_post, mlp_post  # None: no submodule, no weights

    def attention_branch(self, x: torch.Tensor, **kwargs: Any) -> torch.Tensor:
        """What the attention block adds to the residual stream."""
        out = self.self_attn(hidden_states=self.input_layernorm(x), **kwargs)
        out = out[0] if isinstance(out, tuple) else out
        return out if self.attn_post is None else self.attn_post(out)

    def mlp_branch(self, h: torch.Tensor) -> torch.Tensor:
        """What the MLP block adds to the residual stream."""
        out = self.mlp(self.post_attention_layernorm(h))
        return out if self.mlp_post is None else self.mlp_post(out)

    def forward(self, hidden_states: torch.Tensor, **kwargs: Any) -> torch.Tensor:
        h = hidden_states @ self.attn_shortcut + self.attention_branch(hidden_states, **kwargs)
        return h @ self.mlp_shortcut + self.mlp_branch(h)


# ---- structure of a sliced model -----------------------------------------------------------------
@dataclass
class SliceSpec:
    """Everything needed to rebuild a sliced model's shapes; stored as ``slicing.json``.

    widths[i] = (d_in, d_mid, d_out) of decoder layer i; the embeddings have width
    widths[0][0] and the final norm / head read widths[-1][2].
    """

    hidden_size: int
    eps: float
    widths: list[tuple[int, int, int]]
    sparsity: float
    options: dict[str, Any] = field(default_factory=dict)
    head_bias: bool = False  # the final norm's β folded into a head bias (LayerNorm models)
    post_norms: bool = False  # each block writes through a PostNormWriter (Gemma-3)

    def to_json(self) -> dict[str, Any]:
        return {"format": FORMAT_VERSION, "method": "slicegpt", **asdict(self)}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> SliceSpec:
        if data.get("format") != FORMAT_VERSION or data.get("method") != "slicegpt":
            raise ModelLoadError(f"{SLICING_FILE}: unknown format {data.get('format')!r}")
        return cls(
            hidden_size=int(data["hidden_size"]),
            eps=float(data["eps"]),
            widths=[(int(a), int(b), int(c)) for a, b, c in data["widths"]],
            sparsity=float(data["sparsity"]),
            options=dict(data.get("options", {})),
            head_bias=bool(data.get("head_bias", False)),
            post_norms=bool(data.get("post_norms", False)),
        )


ROW_CHUNK = 4096  # rows of a weight transformed at once in float64 (bounds the transient)


def map_rows(W: torch.Tensor, fn, chunk: int = ROW_CHUNK, inplace: bool = False) -> torch.Tensor:
    """fn applied to row blocks of W (R, ·) -> (R, ·) in W's dtype, ``chunk`` rows at a time.

    The float64 products of a 128k-vocabulary embedding or head would otherwise take several
    times the matrix's own bytes at once; row blocks of a matrix product are independent.
    inplace (fn keeps the width): each block's result overwrites its rows of W, so no second
    matrix exists (a 32k x 1024 head is 125 MiB in float32).
    """
    if inplace:
        for start in range(0, W.shape[0], chunk):
            W[start : start + chunk] = fn(W[start : start + chunk])
        return W
    first = fn(W[:chunk]).to(W.dtype)
    out = torch.empty(W.shape[0], *first.shape[1:], dtype=W.dtype, device=W.device)
    out[: first.shape[0]] = first
    for start in range(chunk, W.shape[0], chunk):
        out[start : start + chunk] = fn(W[start : start + chunk])
    return out


def map_rows_narrowing(W: torch.Tensor, fn, chunk: int = ROW_CHUNK) -> torch.Tensor:
    """``map_rows`` for an fn that narrows rows (R, d) -> (R, d′ ≤ d), written over W's own
    storage: block [a, b) lands on elements [a·d′, b·d′), which hold only rows already read
    (b·d′ ≤ b·d), so no second matrix is allocated (a 32k-vocabulary embedding or head:
    94 MiB). Returns the (R, d′) view; W must not be used after."""
    if not W.is_contiguous():
        return map_rows(W, fn, chunk)
    flat = W.view(-1)
    width = W.shape[1]
    for start in range(0, W.shape[0], chunk):
        block = fn(W[start : start + chunk]).to(W.dtype)  # (b - a, d′), a copy
        width = block.shape[1]
        flat[start * width : start * width + block.numel()] = block.reshape(-1)
    return flat[: W.shape[0] * width].view(W.shape[0], width)


def set_linear(lin: nn.Linear, weight: torch.Tensor, bias: torch.Tensor | None = None) -> None:
    """Give ``lin`` a new (out, in) weight (and bias), updating its declared shape."""
    lin.weight = nn.Parameter(weight.contiguous(), requires_grad=lin.weight.requires_grad)
    if lin.bias is not None:
        lin.bias = nn.Parameter(bias.contiguous(), requires_grad=lin.bias.requires_grad)
    lin.out_features, lin.in_features = weight.shape


def set_embedding(embed: nn.Embedding, weight: torch.Tensor) -> None:
    embed.weight = nn.Parameter(weight.contiguous(), requires_grad=embed.weight.requires_grad)
    embed.embedding_dim = weight.shape[1]


def as_adapter(model: Any) -> ModelAdapter:
    """LoadedModel | ModelAdapter | nn.Module -> ModelAdapter (ModelLoadError if unsupported)."""
    if isinstance(model, ModelAdapter):
        return model
    if isinstance(getattr(model, "adapter", None), ModelAdapter):
        return model.adapter
    if isinstance(model, nn.Module):
        return adapter_for(model)
    raise ConfigError(f"expected a model, ModelAdapter or LoadedModel, got {type(model).__name__}")


def is_sliced(model: nn.Module) -> bool:
    return isinstance(getattr(model, "slicing", None), SliceSpec)


def family_refusal(traits: Traits) -> str | None:
    """Why SliceGPT cannot slice a family (from its config's traits), or None if it can.

    Slicing needs computational invariance (papers.md §6): every norm on the residual stream
    must read it directly and pass an orthogonal Q through once its affine part is folded.
    Post-block norms (Gemma-3) read the block output, not the stream: they stay in the
    original basis and write through a ``PostNormWriter`` (this project's extension).
    """
    if not traits.pre_norm:
        return (
            "its layers normalise the residual stream after the add (post-LN), so the "
            "stream itself is not rotation-invariant"
        )
    if traits.embed_proj:
        return "its embeddings are projected in and out of a different width"
    if traits.norm not in ("rms", "rms_1p", "layernorm"):
        return f"its {traits.norm} norms have no fold here"
    return None


def check_sliceable(adapter: ModelAdapter) -> None:
    """Raise a clear error unless the family can be sliced and every decoder layer is a plain
    pre-norm sequential block of that family."""
    name = type(adapter.model).__name__
    if is_sliced(adapter.model):
        raise ConfigError(f"{name} is already sliced; load the dense model to slice it again")
    why = family_refusal(adapter.traits(adapter.config))
    if why:
        raise ConfigError(f"slicegpt cannot slice {adapter.family} models: {why}")
    children = adapter.layout.children
    for i, layer in enumerate(adapter.layers):
        extra = sorted({n for n, _ in layer.named_children()} - children)
        if extra:
            raise ModelLoadError(
                f"{name}: decoder layer {i} has submodules {extra} besides {sorted(children)}; "
                "SliceGPT here supports pre-norm sequential layers only"
            )
