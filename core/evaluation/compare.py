"""Dense and pruned model side by side on one text: per-token NLL, logit lens, per-layer
divergence (the app's Compare page and ``python -m core compare``).

- **Token NLL.** ``nll[t] = −log p(x_{t+1} | x_{≤t})`` from the model's logits; its mean over an
  evaluation window is the window NLL that perplexity averages (papers.md §1), so the mean of
  ``pruned − dense`` over the windows equals ``ln PPL_pruned − ln PPL_dense``.
- **Logit lens.** Each decoder layer's output h_ℓ read through the final norm and the head,
  ``log softmax(head(norm(h_ℓ)))``: what the model would predict if it stopped at layer ℓ. The
  last layer's lens is the model's own logits.
- **Divergence per layer.** KL(dense ‖ pruned) of the two lenses' next-token distributions,
  averaged over the text's last ``LENS_POSITIONS`` positions (those nearest the continuation;
  each lens position costs a product with the whole head, n_layers × d × V per model, the
  largest share of a comparison on a CPU), and the relative error
  ‖H_pruned − H_dense‖_F / ‖H_dense‖_F of the layer outputs.
- **SliceGPT** computes in its own rotated, sliced basis (papers.md §2): its layer outputs are
  rotated back to the dense basis, h·(Q_ℓD)ᵀ, for the relative error, and into the basis of
  its head (the last layer's, Q_LD) for its lens, which then reads them through its own folded
  norm and rotated head. Q_ℓD is read off the weights: the layer's residual writer is
  Dᵀ·Q_ℓᵀ·W_dense, so a least-squares solve against the dense writer recovers it (exact for a
  pre-norm stack; with post-block norms it is the writer divided by the norm's γ). A basis
  that does not come out orthonormal leaves the KL and the error NaN.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import numpy as np
import torch
import torch.nn.functional as F

from core.errors import ConfigError
from core.models.load import LoadedModel

LENS_POSITIONS = 8  # positions (the last ones) whose lens distributions the KL averages
LENS_CHUNK = 2**25  # logits (rows × vocabulary) of one lens product: 128 MB of float32
ORTHONORMAL_TOL = 1e-3  # ‖MᵀM − I‖_max above which a recovered basis is not trusted
WORST_TOKENS = 8  # tokens listed as the worst hit


@dataclass(frozen=True)
class Trace:
    """One forward pass of a text: the layer outputs (n_layers tensors (L, d_ℓ), float32, the
    model's own basis), the final logits (L, V) float32, and the token ids (L,)."""

    states: list[torch.Tensor] = field(repr=False)
    logits: torch.Tensor = field(repr=False)
    ids: torch.Tensor = field(repr=False)


def _out(output) -> torch.Tensor:
    return output[0] if isinstance(output, tuple) else output


def model_device(lm: LoadedModel) -> torch.device:
    return next(lm.model.parameters()).device


@contextmanager
def recording(lm: LoadedModel) -> Iterator[list[torch.Tensor]]:
    """Within the block, every decoder layer's output of the forwards run is appended to the
    list yielded (float32 (L, d_ℓ) tensors of the first sequence, on the model's device)."""
    states: list[torch.Tensor] = []
    hooks = [
        layer.register_forward_hook(lambda _m, _i, out: states.append(_out(out)[0].float()))
        for layer in lm.adapter.layers
    ]
    try:
        yield states
    finally:
        for h in hooks:
            h.remove()


def check_text(ids: torch.Tensor) -> None:
    if ids.ndim != 1 or ids.numel() < 2:
        raise ConfigError("a comparison needs a text of at least two tokens")


@torch.no_grad()
def trace(lm: LoadedModel, ids: torch.Tensor) -> Trace:
    """Run ids (L,) through the model once, keeping every decoder layer's output."""
    check_text(ids)
    with recording(lm) as states:
        logits = lm.model(input_ids=ids[None].to(model_device(lm)), use_cache=False).logits
    return Trace([s.cpu() for s in states], logits[0].float().cpu(), ids.cpu())


@torch.no_grad()
def lens_logits(lm: LoadedModel, hidden: torch.Tensor) -> torch.Tensor:
    """A layer output (L, d) read through the model's final norm and head: (L, V) float32."""
    ad = lm.adapter
    param = next(ad.final_norm.parameters(), None)
    dtype = param.dtype if param is not None else ad.lm_head.weight.dtype
    h = hidden.to(model_device(lm), dtype)
    return ad.logits(ad.final_norm(h)).float().cpu()


def token_nll(logits: torch.Tensor, ids: torch.Tensor) -> np.ndarray:
    """Per-token NLL (L−1,) in nats: position t predicts token t+1."""
    return F.cross_entropy(logits[:-1].float(), ids[1:].long(), reduction="none").numpy()


def kl_rows(logp: torch.Tensor, logq: torch.Tensor) -> torch.Tensor:
    """KL(p ‖ q) per row of two (L, V) log-probability tensors (nats, ≥ 0)."""
    return (logp.exp() * (logp - logq)).sum(-1).clamp_min(0.0)


def rotation_back(dense: LoadedModel, sliced: LoadedModel) -> list[torch.Tensor | None] | None:
    """Per layer, the map M_ℓ (d, d_ℓ) with h_dense ≈ h_sliced·M_ℓᵀ, read off the residual
    writers (None where it does not come out orthonormal); None for a model that is not
    sliced (same basis as the dense one). See the module docstring."""
    ds, ss = dense.adapter, sliced.adapter
    if getattr(sliced.model, "slicing", None) is None:
        return None
    out: list[torch.Tensor | None] = []
    for d_layer, s_layer in zip(ds.layers, ss.layers, strict=True):
        post = getattr(s_layer, "mlp_post", None)
        if post is None:
            Wd = ds.mlp_writer(d_layer).weight.detach().double().cpu()  # (d, ffn)
            Ws = ss.mlp_writer(s_layer).weight.detach().double().cpu()  # (d_ℓ, ffn)
            M = torch.linalg.lstsq(Wd.T, Ws.T).solution  # (d, d_ℓ)
        else:
            gamma, _ = ds.norm_affine(ds.post_norms(d_layer)[1])
            M = (post.proj.weight.detach().double().cpu() / gamma.double()[None]).T
        eye = torch.eye(M.shape[1], dtype=M.dtype)
        ok = (M.T @ M - eye).abs().max().item() <= ORTHONORMAL_TOL
        out.append(M.float() if ok else None)
    return out


@dataclass(frozen=True)
class LayerDivergence:
    """Per layer ℓ = 0..n−1: KL(dense ‖ pruned) of the lens (mean over positions, nats), the
    relative error of the layer output (NaN where the basis is unknown), and each model's lens
    top token at the last position with its probability."""

    kl: list[float]
    rel_error: list[float]
    dense_top: list[tuple[int, float]]
    pruned_top: list[tuple[int, float]]


def _top(logp: torch.Tensor) -> tuple[int, float]:
    p, i = logp[-1].exp().max(-1)
    return int(i), float(p)


@torch.no_grad()
def layer_divergence(
    dense: LoadedModel,
    dt: Trace,
    pruned: LoadedModel,
    pt: Trace,
    basis: list[torch.Tensor | None] | None = None,
    dense_lens: list[torch.Tensor] | None = None,
    pruned_lens: list[torch.Tensor] | None = None,
) -> LayerDivergence:
    """KL(dense ‖ pruned) of the logit lens and the relative error of every layer's output
    (``basis``: ``rotation_back`` for a sliced model, None when both share the dense basis).

    Each model reads all its layers' last positions through its head in one product,
    (n_layers·P, d) × (d, V), rather than one small product per layer. ``dense_lens`` /
    ``pruned_lens``: that product already taken (``lens_of`` of the trace, e.g. in the thread
    that decoded the model); a sliced model's is taken here, in the head's basis."""
    n, P = len(dt.states), min(LENS_POSITIONS, dt.states[0].shape[0])
    states, pruned_lens = aligned(pruned, pt.states, pruned_lens, n)
    same = basis is None
    basis = [None] * n if same else basis
    last = basis[-1]
    backs, lens_in = [], []  # per layer: the output in the dense basis, and in the head's
    for hp, M in zip(states, basis, strict=True):
        if hp is None:  # a layer the pruned model no longer has
            backs.append(None)
            lens_in.append(None)
        elif same:
            backs.append(hp)
            lens_in.append(hp[-P:])
        elif M is None or last is None:  # the basis is unknown: no lens, no error
            backs.append(None)
            lens_in.append(None)
        else:  # rotated back to the dense basis, then into the head's (the last layer's)
            back = hp @ M.T
            backs.append(back)
            lens_in.append(back[-P:] @ last)
    logp = dense_lens if dense_lens is not None else lens_of(dense, dt)
    known = [i for i, x in enumerate(lens_in) if x is not None]
    if same and pruned_lens is not None:
        logq_known = [pruned_lens[i] for i in known]
    else:
        logq_known = _lens(pruned, [lens_in[i] for i in known]) if known else []
    logq: list[torch.Tensor | None] = [None] * n
    for i, lq in zip(known, logq_known, strict=True):
        logq[i] = lq
    kl, rel, dtop, ptop = [], [], [], []
    for hd, back, lp, lq in zip(dt.states, backs, logp, logq, strict=True):
        dtop.append(_top(lp))
        if lq is None:
            kl.append(float("nan"))
            rel.append(float("nan"))
            ptop.append((-1, float("nan")))
            continue
        kl.append(float(kl_rows(lp, lq).mean()))
        rel.append(float((back - hd).norm() / hd.norm().clamp_min(1e-30)))
        ptop.append(_top(lq))
    return LayerDivergence(kl, rel, dtop, ptop)


def aligned(
    pruned: LoadedModel, states: list, lens: list | None, n: int
) -> tuple[list, list | None]:
    """The pruned model's per-layer outputs (and lenses) placed at the dense layers they
    came from: a structured model that dropped layers records which it kept
    (``model.structure.kept``); the dropped ones are None. Same count otherwise."""
    spec = getattr(pruned.model, "structure", None)
    kept = list(spec.kept) if spec is not None else list(range(len(states)))
    if len(kept) != len(states) or any(i >= n for i in kept):
        raise ConfigError("the two models have different numbers of layers")
    out: list = [None] * n
    out_lens: list | None = None if lens is None else [None] * n
    for j, i in enumerate(kept):
        out[i] = states[j]
        if out_lens is not None:
            out_lens[i] = lens[j]
    return out, out_lens


def lens_of(lm: LoadedModel, tr: Trace) -> list[torch.Tensor]:
    """The log-softmax lens of every layer's last ``LENS_POSITIONS`` positions in the model's
    own basis: one (P, V) tensor per layer (what ``layer_divergence`` compares)."""
    P = min(LENS_POSITIONS, tr.states[0].shape[0])
    return _lens(lm, [h[-P:] for h in tr.states])


def _lens(lm: LoadedModel, hidden: list[torch.Tensor]) -> list[torch.Tensor]:
    """The log-softmax lens of several (P, d) blocks: one (P, V) log-probability tensor per
    block, through as few head products as ``LENS_CHUNK`` logits allow."""
    vocab = lm.adapter.lm_head.weight.shape[0]
    out: list[torch.Tensor] = []
    group: list[torch.Tensor] = []
    for i, h in enumerate(hidden):
        group.append(h)
        rows = sum(g.shape[0] for g in group)
        if i == len(hidden) - 1 or (rows + hidden[i + 1].shape[0]) * vocab > LENS_CHUNK:
            logp = torch.log_softmax(lens_logits(lm, torch.cat(group)), -1)
            out += list(logp.split([g.shape[0] for g in group]))
            group = []
    return out


def worst_tokens(diff: np.ndarray, labels: list[str], k: int = WORST_TOKENS) -> list[dict]:
    """The k predicted tokens whose NLL rose most (labels[t + 1] is what position t predicts)."""
    order = np.argsort(-diff)[:k]
    return [
        {"position": int(t + 1), "token": labels[t + 1], "nll_diff": float(diff[t])} for t in order
    ]
