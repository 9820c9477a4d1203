"""SliceGPT's procedure, ``slice_model``: fold, PCA at every residual boundary, rotate, slice.

Ashkboos et al., ICLR'24 (arXiv 2401.15024; papers.md §6), through the family's adapter:

1. **Fold** each norm's γ (β) into the linears that read it, so that the bare norm commutes
   with any orthogonal Q (computational invariance). LayerNorm streams (OPT) are first made
   mean-free. The embeddings are not mean-centred by default (the reference does it, which
   changes an RMSNorm model's function; ``SliceOptions.center_embeddings`` restores it).
2. **PCA** of the uncentred, damped float64 Gram at every residual boundary (embeddings, and
   after the attention and the MLP of every layer), each seeing the already sliced layers.
3. **Rotate and slice** with D = I[:, :d′]: inputs W·Q·D, outputs Dᵀ·Qᵀ·W, shortcut matrices
   carrying each block's residual across bases; the head only with ``slice_head``.
4. **Post-block norms** (Gemma-3; this project's extension): the norm sees the block output in
   the original basis, so one d′×d writer after it maps into the sliced stream (exact at s = 0).

d′ = int((1−s)·d) rounded down to a multiple of ``round_to``; s_eff = 1 − d′/d. The sliced model
stays a Hugging Face causal LM whose decoder layers become ``SlicedDecoderLayer``. The reasoning
behind each step is in docs/design-notes.md ("SliceGPT").
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import asdict
from typing import Any

import torch

from core.adapters import ModelAdapter
from core.errors import ConfigError
from core.methods.slicegpt.folding import (
    center_embeddings,
    center_stream,
    fold_final_norm,
    fold_layer_norms,
    fold_post_norms,
    untie_head,
)
from core.methods.slicegpt.modules import (
    SlicedDecoderLayer,
    SliceSpec,
    as_adapter,
    check_sliceable,
)
from core.methods.slicegpt.options import SliceOptions, SliceReport
from core.methods.slicegpt.rotation import (
    accumulate_gram,
    pca_basis,
    randomize_kept,
    rotate_embeddings,
    rotate_inputs,
    rotate_outputs,
    rotated_output,
    sliced_width,
)
from core.models.layer_inputs import capture_layer_inputs
from core.models.offload import Offload
from core.progress import ProgressFn, report

log = logging.getLogger(__name__)


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
        self.rows.append(
            {
                "boundary": site if layer is None else f"{layer}.{site}",
                "layer": layer,
                "site": site,
                "width": d,
                "kept": keep,
                "energy_kept": (energy[:keep].sum() / energy.sum()).item(),
                "top_eigval": eigvals[0].item(),
                "cut_eigval": eigvals[keep - 1].item(),
            }
        )
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
    weight = adapter.attn_writer(layer).weight
    dtype, device = weight.dtype, weight.device
    for lin in adapter.attn_readers(layer):
        rotate_inputs(lin, Q_in, d_in)
    attn_post, mlp_post = fold_post_norms(adapter, index)
    new = SlicedDecoderLayer(
        adapter.attention_block(layer),
        adapter.mlp_block(layer),
        adapter.attn_norm(layer),
        adapter.mlp_norm(layer),
        torch.empty(d_in, d_mid, dtype=dtype, device=device),
        torch.empty(d_mid, d_out, dtype=dtype, device=device),
        attn_post,
        mlp_post,
    )
    # The linears writing into the residual stream: o_proj / down_proj, or with post-block
    # norms the PostNormWriters' projections (o_proj / down_proj then keep d outputs).
    writer = adapter.attn_writer(layer) if attn_post is None else attn_post.proj
    mlp_writer = adapter.mlp_writer(layer) if mlp_post is None else mlp_post.proj

    # Mid boundary. With the writer (o_proj) writing in the full Q_in basis, the residual is
    # [x, 0] + attn: no (T, d_in)·(d_in, d) product to map x back. Its PCA V (in Q_in
    # coordinates) gives Q_mid = Q_in·V; the eigenvalues are those of the unrotated residual.
    with rotated_output(writer, Q_in):
        mids = []  # (B, L, d)
        for x, kw in zip(hidden, kwargs, strict=True):
            r = new.attention_branch(x, **kw)
            r[..., :d_in] += x
            mids.append(r)
    V = bounds.basis(mids, d_mid, "mid", index)
    Q_mid = Q_in @ V
    rotate_outputs(writer, Q_mid, d_mid)
    for lin in adapter.mlp_readers(layer):
        rotate_inputs(lin, Q_mid, d_mid)
    Vk = V[:, :d_mid].to(dtype)
    hidden = [r @ Vk for r in mids]  # (B, L, d_mid): the sliced mid residual
    del mids

    # Out boundary, the same way in Q_mid coordinates.
    with rotated_output(mlp_writer, Q_mid):
        outs = []  # (B, L, d)
        for h in hidden:
            r = new.mlp_branch(h)
            r[..., :d_mid] += h
            outs.append(r)
    V_out = bounds.basis(outs, d_out, "out", index)
    Q_out = Q_mid @ V_out
    rotate_outputs(mlp_writer, Q_out, d_out)
    Vk = V_out[:, :d_out].to(dtype)
    hidden = [r @ Vk for r in outs]  # (B, L, d_out)
    del outs
    # Dᵀ·Q_inᵀ·Q_mid·D = Dᵀ·V·D and likewise for the MLP (SliceGPT's shortcut matrices).
    new.attn_shortcut.copy_(V[:d_in, :d_mid])
    new.mlp_shortcut.copy_(V_out[:d_mid, :d_out])
    return new, hidden, Q_out


def _n_layer_params(adapter: ModelAdapter) -> int:
    return sum(p.numel() for p in adapter.layers.parameters())


@torch.no_grad()
def slice_model(
    model: Any,
    calib_ids: torch.Tensor,
    sparsity: float,
    options: SliceOptions | None = None,
    device: torch.device | str = "cpu",
    on_progress: ProgressFn | None = None,
    offload: Offload | None = None,
) -> SliceReport:
    """Slice a pre-norm model (RMSNorm or LayerNorm, with or without post-block norms) **in
    place** to width d′ = sliced_width(d, s).

    model: LoadedModel, ModelAdapter or the HF causal LM. calib_ids: (N, L) calibration
    tokens. Modules visit ``device`` one at a time through ``offload`` (default: in memory;
    ``core.stream.StreamedOffload`` reads and writes them as safetensors); calibration
    activations live on ``device``. Each layer's norms are folded just before it is sliced
    (equal to folding them all first). ``model.slicing`` then holds the SliceSpec.
    """
    options = options or SliceOptions()
    adapter = as_adapter(model)
    check_sliceable(adapter)
    d, n = adapter.hidden_size, adapter.n_layers
    width = sliced_width(d, sparsity, options.round_to)
    device = torch.device(device)
    offload = offload or Offload(adapter.model, device)
    t0 = time.perf_counter()
    n_dense, n_layers_dense = adapter.n_params(), _n_layer_params(adapter)

    untie_head(adapter)
    if adapter.layout.norm == "layernorm":
        if offload.streamed:  # centring edits every layer before layer 0's inputs exist
            raise ConfigError(f"slicegpt on {adapter.family} (LayerNorm) cannot be streamed")
        center_stream(adapter)  # LayerNorm -> N(x) needs a mean-free residual stream
    tables = [t for t in (adapter.embed_tokens, adapter.position_table) if t is not None]
    for table in tables:
        offload.fetch(table)
    if options.center_embeddings and adapter.layout.norm != "layernorm":
        center_embeddings(adapter.embed_tokens)
    inputs = capture_layer_inputs(adapter, calib_ids, device, options.batch_size, offload=offload)
    bounds = _Boundaries(options, device)
    report(on_progress, "slice", 0, n)

    Q = bounds.basis(inputs.hidden, width, "embed", None)
    for table in tables:  # learned positions are added to the tokens: rotate both
        rotate_embeddings(table, Q, width)
        offload.release(table, changed=True)
    hidden = [h @ Q[:, :width].to(h.dtype) for h in inputs.hidden]  # (B, L, d′)
    inputs.hidden.clear()  # only the sliced copy is needed from here on
    widths: list[tuple[int, int, int]] = []
    for i in range(n):
        offload.fetch(adapter.layers[i])
        fold_layer_norms(adapter, i)
        w = (width, width, d if i == n - 1 and not options.slice_head else width)
        new, hidden, Q = _slice_layer(adapter, i, hidden, inputs.for_layer(i), Q, w, bounds)
        adapter.layers[i] = new
        offload.release(new, changed=True)
        widths.append(w)
        report(on_progress, "slice", i + 1, n, f"layer {i + 1}/{n}")
    del hidden

    offload.fetch(adapter.final_norm)
    head = offload.fetch(adapter.lm_head)
    eps = fold_final_norm(adapter)
    rotate_inputs(head, Q, widths[-1][2])
    head_bias = adapter.lm_head.bias is not None
    offload.release(head, changed=True)
    offload.release(adapter.final_norm, changed=True)
    offload.finish()
    post = adapter.traits(adapter.config).post_norms
    spec = SliceSpec(d, eps, widths, float(sparsity), asdict(options), head_bias, post)
    adapter.model.slicing = spec
    result = SliceReport(
        sparsity=float(sparsity),
        d=d,
        d_sliced=width,
        n_params_dense=n_dense,
        n_params_sliced=adapter.n_params(),
        n_layer_params_dense=n_layers_dense,
        n_layer_params_sliced=_n_layer_params(adapter),
        calib_tokens=int(calib_ids.numel()),
        seconds=time.perf_counter() - t0,
        options=options,
        rows=bounds.rows,
        spectra=torch.stack(bounds.spectra),
    )
    log.info(
        "sliced d=%d -> %d (s=%.3f, s_eff=%.3f): %d -> %d params in %.1fs",
        d,
        width,
        sparsity,
        result.s_eff,
        n_dense,
        result.n_params_sliced,
        result.seconds,
    )
    return result
