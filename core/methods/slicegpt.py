"""SliceGPT: delete rows and columns by projecting the residual stream onto its top PCA subspace.

Ashkboos et al., ICLR'24 (arXiv 2401.15024; papers.md §6). For a pre-norm decoder whose
norms are RMSNorm, the steps are:

1. **Fold** (``untie_head``, ``fold_norms``). Each norm's γ moves into the linears that read
   it, W ← W·diag(γ). What remains is N(x) = x / √(‖x‖²/d + ε) with d the *original* width,
   which commutes with any orthogonal Q: N(xQ) = N(x)Q (computational invariance, §6). No
   embedding mean-centring: the reference code centres embeddings for every model, which
   changes the function of an RMSNorm model; without it s = 0 is exactly function preserving.
2. **PCA at every residual boundary** (``pca_basis``). C = Σ XᵀX (uncentred, float64) over the
   calibration tokens, C += damp·mean(diag C)·I, Q = eigenvectors by descending eigenvalue.
   The boundaries are the embeddings, and the residual after the attention ("mid") and after
   the MLP ("out") of every layer. Each PCA sees the signals of the *already sliced* earlier
   layers (the reference ``rotate_and_slice``).
3. **Rotate and slice** with D = I[:, :d′]. Input linears W ← W·Q_in·D; output linears
   W ← Dᵀ·Q_outᵀ·W (and the bias alike); embeddings E ← E·Q·D; the residual of each block is
   carried across by the shortcut matrices Dᵀ·Q_inᵀ·Q_mid·D and Dᵀ·Q_midᵀ·Q_out·D.
   The head is not sliced unless asked (the last block then writes full width d).

d′ = int((1−s)·d) rounded down to a multiple of 8 (``sliced_width``); s_eff = 1 − d′/d.

The sliced model stays a Hugging Face causal LM with the same attribute names: each decoder
layer becomes a ``SlicedDecoderLayer`` that reuses the original attention and MLP modules
(with smaller ``nn.Linear``s). ``save_sliced`` / ``load_sliced`` store it as safetensors plus
``slicing.json`` (the widths) next to the HF ``config.json``.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn

from core.adapter import ModelAdapter
from core.errors import ConfigError, ModelLoadError
from core.methods import register
from core.methods.base import LayerContext, LinearReport, Method
from core.progress import ProgressFn, report
from core.runner import capture_layer_inputs, model_device

log = logging.getLogger(__name__)

ORIENTATIONS = ("pca", "random")
SLICING_FILE = "slicing.json"
WEIGHTS_FILE = "model.safetensors"
FORMAT_VERSION = 1
# The submodules a pre-norm sequential decoder layer may have; anything else (Gemma-2's extra
# norms, a parallel block's single norm, ...) is computation SlicedDecoderLayer would drop.
LAYER_CHILDREN = frozenset({"self_attn", "mlp", "input_layernorm", "post_attention_layernorm"})


# ---- pure functions ------------------------------------------------------------------------------
def sliced_width(d: int, s: float, round_to: int = 8) -> int:
    """d′ = int((1−s)·d) rounded down to a multiple of ``round_to`` (``round_interval``)."""
    if not 0.0 <= s < 1.0:
        raise ConfigError(f"slicing sparsity must be in [0, 1), got {s}")
    if round_to < 1:
        raise ConfigError(f"round_to must be a positive integer, got {round_to}")
    width = int((1.0 - s) * d)
    width -= width % round_to
    if width <= 0:
        raise ConfigError(
            f"sparsity {s} leaves int((1-s)*{d}) = {int((1.0 - s) * d)} dimensions, which rounds "
            f"down to 0 with round_to={round_to}; use a smaller sparsity or round_to"
        )
    return width


def pca_basis(cov: torch.Tensor, damp: float = 0.01) -> tuple[torch.Tensor, torch.Tensor]:
    """Principal axes of an uncentred covariance C (d, d), float64 (SliceGPT ``pca_calc``).

    Diagonalises C + damp·mean(diag C)·I and returns (eigvals (d,), Q (d, d)) with the
    eigenvalues of C itself in descending order (the damping shifts every eigenvalue by the
    same amount, so it only stabilises the eigenvectors) and Q's columns the matching axes.
    """
    if cov.dtype != torch.float64:
        raise ConfigError(f"pca_basis expects a float64 covariance, got {cov.dtype}")
    shift = damp * cov.diagonal().mean()
    damped = cov + shift * torch.eye(cov.shape[0], dtype=cov.dtype, device=cov.device)
    with _single_thread(cov.device):
        eigvals, Q = torch.linalg.eigh(damped)
    order = torch.argsort(eigvals, descending=True)
    return eigvals[order] - shift, Q[:, order]


@contextmanager
def _single_thread(device: torch.device) -> Iterator[None]:
    """Run a CPU eigendecomposition on one thread.

    MKL's multi-threaded syevd barely beats one thread at d ≈ 500-4000 and, when the cores are
    shared, was measured 20× slower (1.1 s vs 0.05 s at d = 576 on 2 busy cores).
    """
    if device.type != "cpu":
        yield
        return
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def randomize_kept(Q: torch.Tensor, keep: int, generator: torch.Generator) -> torch.Tensor:
    """Q·blockdiag(R, I): a Haar-random rotation R (keep, keep) inside the kept subspace.

    The kept span, and so the sliced model's function, is unchanged; only the basis the
    sliced coordinates use differs (reference ``final_orientation="random"``).
    """
    G = torch.randn(keep, keep, generator=generator, dtype=torch.float64)
    R, upper = torch.linalg.qr(G)
    R = R * torch.sign(torch.diagonal(upper)).unsqueeze(0)  # sign fix makes R Haar-distributed
    out = Q.clone()
    out[:, :keep] = Q[:, :keep] @ R.to(Q.device)
    return out


def accumulate_gram(gram: torch.Tensor, x: torch.Tensor) -> None:
    """gram += XᵀX for x (..., d), accumulated in float64; every token counts (no padding).

    The per-batch product is taken in x's precision but at least float32 (float64 for a
    float64 model): half the cost of a float64 product, and the 1% damping dwarfs its error.
    """
    flat = x.reshape(-1, x.shape[-1]).to(torch.promote_types(x.dtype, torch.float32))
    gram += (flat.T @ flat).to(torch.float64)


# ---- modules -------------------------------------------------------------------------------------
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


class SlicedDecoderLayer(nn.Module):
    """A pre-norm decoder layer with shortcut matrices on the residual (SliceGPT Fig. 4).

    h = x·S_attn + Attn(N(x));  y = h·S_mlp + MLP(N(h)).
    x: (B, L, d_in), h: (B, L, d_mid), y: (B, L, d_out); S_attn (d_in, d_mid), S_mlp
    (d_mid, d_out). ``self_attn`` and ``mlp`` are the model's own modules, so the HF model's
    layer loop, KV cache and the ModelAdapter work unchanged.
    """

    def __init__(
        self,
        self_attn: nn.Module,
        mlp: nn.Module,
        input_layernorm: nn.Module,
        post_attention_layernorm: nn.Module,
        attn_shortcut: torch.Tensor,
        mlp_shortcut: torch.Tensor,
    ) -> None:
        super().__init__()
        self.self_attn = self_attn
        self.mlp = mlp
        self.input_layernorm = input_layernorm
        self.post_attention_layernorm = post_attention_layernorm
        # Weights in their own right (counted in n_params, saved), never trained here.
        self.attn_shortcut = nn.Parameter(attn_shortcut, requires_grad=False)
        self.mlp_shortcut = nn.Parameter(mlp_shortcut, requires_grad=False)

    def attention_branch(self, x: torch.Tensor, **kwargs: Any) -> torch.Tensor:
        out = self.self_attn(hidden_states=self.input_layernorm(x), **kwargs)
        return out[0] if isinstance(out, tuple) else out

    def mlp_branch(self, h: torch.Tensor) -> torch.Tensor:
        return self.mlp(self.post_attention_layernorm(h))

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
        )


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
        return ModelAdapter.from_model(model)
    raise ConfigError(f"expected a model, ModelAdapter or LoadedModel, got {type(model).__name__}")


def _n_layer_params(adapter: ModelAdapter) -> int:
    return sum(p.numel() for p in adapter.layers.parameters())


def is_sliced(model: nn.Module) -> bool:
    return isinstance(getattr(model, "slicing", None), SliceSpec)


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


def check_sliceable(adapter: ModelAdapter) -> None:
    """Raise a clear error unless every decoder layer is a plain pre-norm sequential block."""
    name = type(adapter.model).__name__
    if is_sliced(adapter.model):
        raise ConfigError(f"{name} is already sliced; load the dense model to slice it again")
    for i, layer in enumerate(adapter.layers):
        extra = sorted({n for n, _ in layer.named_children()} - LAYER_CHILDREN)
        if extra:
            raise ModelLoadError(
                f"{name}: decoder layer {i} has submodules {extra} besides "
                f"{sorted(LAYER_CHILDREN)}; "
                "SliceGPT here supports pre-norm sequential (Llama-shaped) layers only"
            )


# ---- fold ----------------------------------------------------------------------------------------
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
    lin.weight.data = (W.double() * gamma.double().to(W.device)).to(W.dtype)


def fold_norms(adapter: ModelAdapter) -> float:
    """Fold every RMSNorm's γ into the linears reading it and replace the norms by FoldedRMSNorm.

    input_layernorm -> q, k, v; post_attention_layernorm -> gate, up; final norm -> lm_head.
    Function preserving. Returns ε.
    """
    d, eps = adapter.hidden_size, adapter.rms_eps
    for i, layer in enumerate(adapter.layers):
        lin = adapter.linears(layer)
        for norm_attr, roles in (("input_layernorm", "qkv"), ("post_attention_layernorm", "gu")):
            gamma = _check_rms_norm(getattr(layer, norm_attr), d, eps, f"layer {i} {norm_attr}")
            for role in {"qkv": ("q", "k", "v"), "gu": ("gate", "up")}[roles]:
                _scale_inputs(lin[role], gamma)
            setattr(layer, norm_attr, FoldedRMSNorm(d, eps))
    _scale_inputs(adapter.lm_head, _check_rms_norm(adapter.final_norm, d, eps, "final norm"))
    adapter.backbone.norm = FoldedRMSNorm(d, eps)
    return eps


# ---- rotate and slice ----------------------------------------------------------------------------
def rotate_inputs(lin: nn.Linear, Q: torch.Tensor, width: int) -> None:
    """W ← (W·Q)[:, :width]: the linear reads the rotated, sliced signal. Q (d, d) float64."""
    W = lin.weight.detach()
    set_linear(lin, (W.double() @ Q[:, :width].to(W.device)).to(W.dtype), lin.bias)


def rotate_outputs(lin: nn.Linear, Q: torch.Tensor, width: int) -> None:
    """W ← (Qᵀ·W)[:width], b ← (Qᵀ·b)[:width]: the linear writes the rotated, sliced signal."""
    W = lin.weight.detach()
    Qk = Q[:, :width].to(W.device)
    bias = None if lin.bias is None else (Qk.T @ lin.bias.detach().double()).to(W.dtype)
    set_linear(lin, (Qk.T @ W.double()).to(W.dtype), bias)


def rotate_embeddings(embed: nn.Embedding, Q: torch.Tensor, width: int) -> None:
    """E ← (E·Q)[:, :width] for E (vocab, d)."""
    E = embed.weight.detach()
    set_embedding(embed, (E.double() @ Q[:, :width].to(E.device)).to(E.dtype))


@contextmanager
def _rotated_output(lin: nn.Linear, Q: torch.Tensor) -> Iterator[None]:
    """Let ``lin`` write in the full basis Q for a while, then restore its weights."""
    weight, bias = lin.weight, lin.bias
    rotate_outputs(lin, Q, Q.shape[1])
    try:
        yield
    finally:
        lin.weight, lin.bias = weight, bias
        lin.out_features = weight.shape[0]


# ---- options and report --------------------------------------------------------------------------
@dataclass(frozen=True)
class SliceOptions:
    """round_to: d′ multiple (reference 8); damp: PCA damping as a fraction of mean(diag C);
    slice_head: also slice the final norm/lm_head input; orientation: "pca" or "random"
    (a seeded random basis inside the kept subspace); seed: for "random"; batch_size:
    calibration sequences per forward."""

    round_to: int = 8
    damp: float = 0.01
    slice_head: bool = False
    orientation: str = "pca"
    seed: int = 42
    batch_size: int = 8

    def __post_init__(self) -> None:
        if not isinstance(self.round_to, int) or self.round_to < 1:
            raise ConfigError(f"round_to must be a positive integer, got {self.round_to!r}")
        if not self.damp >= 0.0:
            raise ConfigError(f"damp must be >= 0, got {self.damp!r}")
        if self.orientation not in ORIENTATIONS:
            raise ConfigError(
                f"orientation must be one of {ORIENTATIONS}, got {self.orientation!r}"
            )
        if not isinstance(self.batch_size, int) or self.batch_size < 1:
            raise ConfigError(f"batch_size must be a positive integer, got {self.batch_size!r}")


@dataclass
class SliceReport:
    """What ``slice_model`` did.

    n_params_*: every parameter (shortcut matrices included; a tied head counts once when
    dense and again once untied, so a tied-embedding model can grow at small s);
    n_layer_params_*: the decoder layers only.
    rows: one per residual boundary (embed, then mid/out of every layer): kept width and
    the fraction of calibration energy Σλ[:kept]/Σλ it keeps. spectra: (n_boundaries, d)
    float64 eigenvalues of C, descending, in the order of ``rows``.
    """

    sparsity: float
    d: int
    d_sliced: int
    n_params_dense: int
    n_params_sliced: int
    n_layer_params_dense: int
    n_layer_params_sliced: int
    n_tokens: int
    seconds: float
    options: SliceOptions
    rows: list[dict[str, Any]]
    spectra: torch.Tensor

    @property
    def s_eff(self) -> float:
        return 1.0 - self.d_sliced / self.d

    def summary(self) -> dict[str, Any]:
        """Flat JSON-able scalars for run records and tables."""
        return {
            "sparsity": self.sparsity,
            "s_eff": self.s_eff,
            "d": self.d,
            "d_sliced": self.d_sliced,
            "n_params_dense": self.n_params_dense,
            "n_params_sliced": self.n_params_sliced,
            "param_ratio": self.n_params_sliced / self.n_params_dense,
            "n_layer_params_dense": self.n_layer_params_dense,
            "n_layer_params_sliced": self.n_layer_params_sliced,
            "n_tokens": self.n_tokens,
            "seconds": self.seconds,
            "options": asdict(self.options),
        }


class _Boundaries:
    """PCA of each residual boundary, in order, with its report row and spectrum."""

    def __init__(self, options: SliceOptions, device: torch.device) -> None:
        self.options, self.device = options, device
        self.generator = torch.Generator().manual_seed(options.seed)
        self.rows: list[dict[str, Any]] = []
        self.spectra: list[torch.Tensor] = []

    def basis(
        self, signals: Sequence[torch.Tensor], keep: int, site: str, layer: int | None
    ) -> torch.Tensor:
        """Q (d, d) float64 on the device for signals [(B, L, d)], keeping ``keep`` columns."""
        d = signals[0].shape[-1]
        gram = torch.zeros(d, d, dtype=torch.float64, device=self.device)
        for x in signals:
            accumulate_gram(gram, x)
        eigvals, Q = pca_basis(gram, self.options.damp)
        if self.options.orientation == "random":
            Q = randomize_kept(Q, keep, self.generator)
        energy = eigvals.clamp_min(0.0)
        self.rows.append({
            "boundary": site if layer is None else f"{layer}.{site}",
            "layer": layer,
            "site": site,
            "width": d,
            "kept": keep,
            "energy_kept": (energy[:keep].sum() / energy.sum()).item(),
            "top_eigval": eigvals[0].item(),
            "cut_eigval": eigvals[keep - 1].item(),
        })  # fmt: skip
        self.spectra.append(eigvals.cpu())
        return Q


# ---- the procedure -------------------------------------------------------------------------------
@torch.no_grad()
def _slice_layer(
    adapter: ModelAdapter,
    index: int,
    hidden: list[torch.Tensor],
    kwargs: list[dict[str, Any]],
    Q_in: torch.Tensor,
    widths: tuple[int, int, int],
    bounds: _Boundaries,
) -> tuple[SlicedDecoderLayer, list[torch.Tensor], torch.Tensor]:
    """Rotate and slice decoder layer ``index`` (already on the compute device).

    hidden: layer inputs [(B, L, d_in)] in the rotated, sliced basis of Q_in (d, d) float64.
    Returns the new layer, its outputs [(B, L, d_out)] in the basis of Q_out, and Q_out.
    """
    d_in, d_mid, d_out = widths
    layer = adapter.layers[index]
    lin = adapter.linears(layer)
    dtype, device = lin["q"].weight.dtype, lin["q"].weight.device
    for role in ("q", "k", "v"):
        rotate_inputs(lin[role], Q_in, d_in)
    new = SlicedDecoderLayer(
        layer.self_attn, layer.mlp, layer.input_layernorm, layer.post_attention_layernorm,
        torch.empty(d_in, d_mid, dtype=dtype, device=device),
        torch.empty(d_mid, d_out, dtype=dtype, device=device),
    )  # fmt: skip

    # Mid boundary. With o_proj writing in the full Q_in basis, the residual there is
    # [x, 0] + attn: no (T, d_in)·(d_in, d) product to map x back. Its PCA V (in Q_in
    # coordinates) gives Q_mid = Q_in·V; the eigenvalues are those of the unrotated residual.
    with _rotated_output(lin["o"], Q_in):
        mids = []  # (B, L, d)
        for x, kw in zip(hidden, kwargs, strict=True):
            r = new.attention_branch(x, **kw)
            r[..., :d_in] += x
            mids.append(r)
    V = bounds.basis(mids, d_mid, "mid", index)
    Q_mid = Q_in @ V
    rotate_outputs(lin["o"], Q_mid, d_mid)
    for role in ("gate", "up"):
        rotate_inputs(lin[role], Q_mid, d_mid)
    Vk = V[:, :d_mid].to(dtype)
    hidden = [r @ Vk for r in mids]  # (B, L, d_mid): the sliced mid residual
    del mids

    # Out boundary, the same way in Q_mid coordinates.
    with _rotated_output(lin["down"], Q_mid):
        outs = []  # (B, L, d)
        for h in hidden:
            r = new.mlp_branch(h)
            r[..., :d_mid] += h
            outs.append(r)
    V_out = bounds.basis(outs, d_out, "out", index)
    Q_out = Q_mid @ V_out
    rotate_outputs(lin["down"], Q_out, d_out)
    Vk = V_out[:, :d_out].to(dtype)
    hidden = [r @ Vk for r in outs]  # (B, L, d_out)
    del outs
    # Dᵀ·Q_inᵀ·Q_mid·D = Dᵀ·V·D and likewise for the MLP (SliceGPT's shortcut matrices).
    new.attn_shortcut.copy_(V[:d_in, :d_mid])
    new.mlp_shortcut.copy_(V_out[:d_mid, :d_out])
    return new, hidden, Q_out


@torch.no_grad()
def slice_model(
    model: Any,
    calib_ids: torch.Tensor,
    sparsity: float,
    options: SliceOptions | None = None,
    device: torch.device | str = "cpu",
    on_progress: ProgressFn | None = None,
) -> SliceReport:
    """Slice a Llama-shaped RMSNorm model **in place** to width d′ = sliced_width(d, s).

    model: LoadedModel, ModelAdapter or the HF causal LM. calib_ids: (N, L) calibration
    tokens. Layers visit ``device`` one at a time; calibration activations live there too.
    Afterwards ``model.slicing`` holds the SliceSpec and ``save_sliced`` can store it.
    """
    options = options or SliceOptions()
    adapter = as_adapter(model)
    check_sliceable(adapter)
    d, n = adapter.hidden_size, adapter.n_layers
    width = sliced_width(d, sparsity, options.round_to)
    device = torch.device(device)
    t0 = time.perf_counter()
    n_dense, n_layers_dense = adapter.n_params(), _n_layer_params(adapter)

    untie_head(adapter.model)
    eps = fold_norms(adapter)
    inputs = capture_layer_inputs(adapter, calib_ids, device, options.batch_size)
    bounds = _Boundaries(options, device)
    report(on_progress, "slice", 0, n)

    Q = bounds.basis(inputs.hidden, width, "embed", None)
    rotate_embeddings(adapter.embed_tokens, Q, width)
    hidden = [h @ Q[:, :width].to(h.dtype) for h in inputs.hidden]  # (B, L, d′)
    inputs.hidden.clear()  # only the sliced copy is needed from here on
    widths: list[tuple[int, int, int]] = []
    for i in range(n):
        layer = adapter.layers[i]
        home = model_device(layer)
        layer.to(device)
        w = (width, width, d if i == n - 1 and not options.slice_head else width)
        new, hidden, Q = _slice_layer(adapter, i, hidden, inputs.kwargs, Q, w, bounds)
        adapter.layers[i] = new.to(home)
        widths.append(w)
        report(on_progress, "slice", i + 1, n, f"layer {i + 1}/{n}")
    del hidden

    head = adapter.lm_head
    rotate_inputs(head, Q, widths[-1][2])
    spec = SliceSpec(d, eps, widths, float(sparsity), asdict(options))
    adapter.model.slicing = spec
    result = SliceReport(
        sparsity=float(sparsity),
        d=d,
        d_sliced=width,
        n_params_dense=n_dense,
        n_params_sliced=adapter.n_params(),
        n_layer_params_dense=n_layers_dense,
        n_layer_params_sliced=_n_layer_params(adapter),
        n_tokens=int(calib_ids.numel()),
        seconds=time.perf_counter() - t0,
        options=options,
        rows=bounds.rows,
        spectra=torch.stack(bounds.spectra),
    )
    log.info(
        "sliced d=%d -> %d (s=%.3f, s_eff=%.3f): %d -> %d params in %.1fs",
        d, width, sparsity, result.s_eff, n_dense, result.n_params_sliced, result.seconds,
    )  # fmt: skip
    return result


# ---- save / load ---------------------------------------------------------------------------------
def apply_structure(model: nn.Module, spec: SliceSpec) -> None:
    """Give a freshly built dense HF model the sliced shapes of ``spec`` (weights uninitialised)."""
    adapter = as_adapter(model)
    check_sliceable(adapter)
    if adapter.hidden_size != spec.hidden_size or adapter.n_layers != len(spec.widths):
        raise ModelLoadError(
            f"{SLICING_FILE} describes d={spec.hidden_size} with {len(spec.widths)} layers but the "
            f"config has d={adapter.hidden_size} with {adapter.n_layers}"
        )
    untie_head(adapter.model)
    embed = adapter.embed_tokens
    dtype = embed.weight.dtype

    def empty(*shape: int) -> torch.Tensor:
        return torch.empty(*shape, dtype=dtype, device=embed.weight.device)

    set_embedding(embed, empty(embed.num_embeddings, spec.widths[0][0]))
    for i, (d_in, d_mid, d_out) in enumerate(spec.widths):
        layer = adapter.layers[i]
        lin = adapter.linears(layer)
        for role, (out, inp) in {
            "q": (lin["q"].out_features, d_in), "k": (lin["k"].out_features, d_in),
            "v": (lin["v"].out_features, d_in), "o": (d_mid, lin["o"].in_features),
            "gate": (lin["gate"].out_features, d_mid), "up": (lin["up"].out_features, d_mid),
            "down": (d_out, lin["down"].in_features),
        }.items():  # fmt: skip
            set_linear(lin[role], empty(out, inp), None if lin[role].bias is None else empty(out))
        adapter.layers[i] = SlicedDecoderLayer(
            layer.self_attn, layer.mlp, FoldedRMSNorm(spec.hidden_size, spec.eps),
            FoldedRMSNorm(spec.hidden_size, spec.eps), empty(d_in, d_mid), empty(d_mid, d_out),
        )  # fmt: skip
    adapter.backbone.norm = FoldedRMSNorm(spec.hidden_size, spec.eps)
    head = adapter.lm_head
    set_linear(
        head,
        empty(head.out_features, spec.widths[-1][2]),
        None if head.bias is None else empty(head.out_features),
    )
    adapter.model.slicing = spec


def save_sliced(model: nn.Module, folder: str | Path) -> Path:
    """Write ``model.safetensors``, ``slicing.json`` and the HF ``config.json`` into folder."""
    from safetensors.torch import save_file

    model = as_adapter(model).model
    if not is_sliced(model):
        raise ConfigError("save_sliced needs a model sliced by slice_model (no .slicing found)")
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    state = {k: v.detach().contiguous().cpu() for k, v in model.state_dict().items()}
    save_file(state, folder / WEIGHTS_FILE, metadata={"format": "pt"})
    (folder / SLICING_FILE).write_text(json.dumps(model.slicing.to_json(), indent=2) + "\n")
    model.config.save_pretrained(folder)
    return folder


def load_sliced(
    folder: str | Path,
    device: torch.device | str = "cpu",
    dtype: torch.dtype = torch.float32,
    attn_implementation: str | None = None,
) -> nn.Module:
    """Rebuild a sliced model saved by ``save_sliced``: HF model from config, sliced shapes
    from ``slicing.json``, then the weights (strict). Returns the model in eval mode.

    attn_implementation: as for ``from_pretrained`` ("eager" to get attention weights);
    None lets transformers choose (sdpa), which may differ from the sliced model's in the
    last float bits."""
    from safetensors.torch import load_file
    from transformers import AutoConfig, AutoModelForCausalLM

    folder = Path(folder)
    missing = [f for f in ("config.json", SLICING_FILE, WEIGHTS_FILE) if not (folder / f).is_file()]
    if missing:
        raise ModelLoadError(f"{folder} is not a sliced model folder: missing {', '.join(missing)}")
    spec = SliceSpec.from_json(json.loads((folder / SLICING_FILE).read_text()))
    config = AutoConfig.from_pretrained(folder)
    config.tie_word_embeddings = False
    model = AutoModelForCausalLM.from_config(
        config, dtype=dtype, attn_implementation=attn_implementation
    )
    apply_structure(model, spec)
    model.load_state_dict(load_file(folder / WEIGHTS_FILE), strict=True)
    return model.to(device).eval()


# ---- registry ------------------------------------------------------------------------------------
@register
class SliceGPT(Method):
    """SliceGPT: rotate by PCA and slice the representation dimension d to (1 − s)·d.

    Structured: the orchestrator calls ``slice`` (whole model) instead of the layer runner."""

    name = "slicegpt"
    options_cls = SliceOptions
    structured = True
    needs_gram = False
    supports_patterns = ("unstructured",)
    options: SliceOptions

    def slice(
        self,
        model: Any,
        calib_ids: torch.Tensor,
        sparsity: float,
        device: torch.device | str = "cpu",
        on_progress: ProgressFn | None = None,
    ) -> SliceReport:
        return slice_model(model, calib_ids, sparsity, self.options, device, on_progress)

    def prune_layer(self, ctx: LayerContext) -> list[LinearReport]:
        raise NotImplementedError(
            "slicegpt changes the model's width and is not run layer by layer; call "
            "SliceGPT.slice / core.methods.slicegpt.slice_model on the whole model"
        )
