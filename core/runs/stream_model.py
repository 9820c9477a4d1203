"""What a streamed run (``ModelSpec.stream``) reads of its model without holding it.

- ``streamed_lm``: the model's meta-device skeleton with its tokenizer (no weight is read);
- ``streamed_perplexity``: perplexity with every window passing one decoder layer at a time,
  each layer read from the folder's safetensors files (``core.stream.pipeline``);
- ``folder_measures``: sparsity, W_Q/W_K and non-zero parameters of a written folder, one
  layer (then one tensor) at a time.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import torch
from transformers import AutoTokenizer

from core.errors import ModelLoadError
from core.evaluation.perplexity import PerplexityResult
from core.machine.device import resolve_dtype
from core.models.load import LoadedModel
from core.progress import ProgressFn
from core.runs.measure import QK_MAX_HIDDEN, layer_qk, layer_zeros, sparsity_of
from core.settings.config import ModelSpec
from core.stream.pipeline import model_folder, open_streamed, perplexity_streamed


def run_dtype(spec: ModelSpec) -> torch.dtype:
    """The dtype a resolved spec computes in."""
    return resolve_dtype(spec.dtype, torch.device(spec.device))


def streamed_lm(spec: ModelSpec) -> tuple[LoadedModel, Path]:
    """(the skeleton as a LoadedModel with the model's tokenizer, the safetensors folder)."""
    folder = model_folder(spec.name, spec.revision)
    lm, _ = open_streamed(folder, "cpu", run_dtype(spec))
    lm.model.tie_weights()  # shapes only: a tied head counts once, as in a loaded model
    try:
        tok = AutoTokenizer.from_pretrained(folder)
    except (OSError, ValueError) as exc:
        raise ModelLoadError(f"model {spec.name!r} has no usable tokenizer: {exc}") from exc
    source = "embedded" if folder != Path(spec.name).expanduser() else "local"
    return dataclasses.replace(lm, tokenizer=tok, name=spec.name, source=source), folder


def streamed_perplexity(
    spec: ModelSpec,
    folder: Path,
    windows: torch.Tensor,
    batch_size: int,
    activations_on_cpu: bool = False,
    progress: ProgressFn | None = None,
) -> PerplexityResult:
    """Perplexity of the model in ``folder`` on windows (n, L), layer by layer."""
    res, _ = perplexity_streamed(
        folder,
        windows,
        batch_size,
        spec.device,
        run_dtype(spec),
        activations_on_cpu,
        progress,
    )
    return res


def folder_measures(
    spec: ModelSpec, folder: Path, roles: tuple[str, ...] | None
) -> tuple[dict[str, float], dict[str, torch.Tensor], int]:
    """(weight sparsities, W_Q/W_K per layer as ``qk_arrays`` stores them, non-zero
    parameters with a tied matrix counted once) of the model written to ``folder``.
    roles None (a sliced model): only the non-zero parameters."""
    lm, offload = open_streamed(folder, "cpu", run_dtype(spec))
    counts, arrays = [0, 0, 0, 0], {}
    keep_qk = lm.adapter.hidden_size <= QK_MAX_HIDDEN
    for i, layer in enumerate(lm.adapter.layers if roles is not None else []):
        offload.fetch(layer)
        try:
            counts = [a + b for a, b in zip(counts, layer_zeros(lm, layer, roles), strict=True)]
            if keep_qk:
                arrays.update(layer_qk(lm, i, layer))
        finally:
            offload.release(layer)
    nonzero = 0
    # file keys: a tied head the skeleton did not tie reads the embeddings' key, counted once
    keys = {offload.alias.get(n, n): p.dtype for n, p in lm.model.named_parameters()}
    for key, dtype in keys.items():  # in pieces: the head alone is a unit's size
        nonzero += sum(int(torch.count_nonzero(c.to(dtype))) for c in offload.source.chunks(key))
    return (sparsity_of(counts) if roles is not None else {}), arrays, nonzero
