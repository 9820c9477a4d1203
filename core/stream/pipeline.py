"""Prune, slice and evaluate a safetensors model folder without ever holding the model.

The model is a meta-device skeleton (``core.stream.residency``); every walk (calibration
capture, the shared runner or SliceGPT, perplexity) fetches one module at a time from the
source files, and a changed module is written to the output folder's shards as soon as it is
released. Peak memory is then about one decoder layer plus the calibration (or evaluation)
activations, whatever the model's size:

    prune_streamed("big/", "big-wanda/", prune_cfg, calib_ids)
    perplexity_streamed("big-wanda/", windows)

The output folder reloads with ``transformers.AutoModelForCausalLM.from_pretrained``
(SliceGPT folders: ``core.methods.slicegpt.load_sliced``) and is streamed the same way.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from huggingface_hub import snapshot_download
from transformers import AutoConfig

from core.adapters import adapter_for, family_traits
from core.errors import ConfigError, ModelLoadError
from core.evaluation.perplexity import PerplexityResult, layerwise_perplexity
from core.machine.process_memory import map_large_blocks
from core.methods.slicegpt import SLICING_FILE, is_sliced
from core.models.gguf import GGUF_MODELS, gguf_folder
from core.models.load import TINY_MODELS, LoadedModel
from core.models.weights import INDEX_FILE, SHARD_BYTES, SINGLE_FILE, LazyWeights, ShardWriter
from core.progress import ProgressFn
from core.pruning.apply import apply_prune
from core.settings.config import PruneConfig
from core.stream.residency import StreamedOffload, skeleton

# files of a model folder that are not weights or config: tokenizer and generation settings
_WEIGHT_FILES = {SINGLE_FILE, INDEX_FILE, "config.json", SLICING_FILE}


@dataclass
class StreamedRun:
    """What a streamed prune/slice did: the method's result and allocation rows, the output
    folder and the most parameters ever materialised at once."""

    result: Any
    alloc_rows: list[dict[str, Any]]
    folder: Path
    peak_materialised: int


def model_folder(name: str | Path, revision: str | None = None) -> Path:
    """The safetensors folder of a model name: a local folder as it is, the embedded model's
    converted copy (any packaged GGUF model), or a Hugging Face id's snapshot (safetensors, configs
    and tokenizer files only; downloaded once into the Hub cache). The tiny models have no files:
    save one with ``build_tiny_model(...).save_pretrained(folder)``."""
    path = Path(name).expanduser()
    if path.is_dir():
        return path
    if str(name) in GGUF_MODELS:
        return gguf_folder(str(name))
    if str(name) in TINY_MODELS:
        raise ConfigError(f"{name} is built in memory; save it to a folder to stream it")
    try:
        return Path(
            snapshot_download(
                str(name), revision=revision, allow_patterns=["*.safetensors", "*.json", "*.txt"]
            )
        )
    except Exception as exc:
        raise ModelLoadError(
            f"model {name!r}: no local folder and no Hub snapshot ({exc})"
        ) from exc


def check_streamable(folder: str | Path, method: str | None = None) -> None:
    """ConfigError (before any weight is read: config only) for what the streamed path
    cannot do. Every family streams (tests/test_stream.py compares each tiny family with its
    in-memory run), except SliceGPT on a LayerNorm family (OPT): its residual stream must be
    centred in every layer's writer before layer 0's inputs are captured, which needs all
    layers at once."""
    traits = family_traits(AutoConfig.from_pretrained(folder))
    if method == "slicegpt" and traits.norm == "layernorm":
        raise ConfigError(
            f"{folder}: slicegpt cannot be streamed layer by layer on a {traits.family} model "
            "(LayerNorm: the residual stream is centred in every layer before slicing "
            "starts); slice it in memory instead"
        )


def open_streamed(
    folder: str | Path,
    device: torch.device | str = "cpu",
    dtype: torch.dtype = torch.float32,
    writer: ShardWriter | None = None,
    attn_implementation: str | None = None,
) -> tuple[LoadedModel, StreamedOffload]:
    """A folder's meta skeleton as a LoadedModel (no tokenizer) and its streamed residency.
    Blocks of 4 MiB and more are mapped from here on (``map_large_blocks``), so the freed
    weights and transients of one layer leave no heap holes behind for the next."""
    check_streamable(folder)
    map_large_blocks()
    model = skeleton(folder, dtype, attn_implementation)
    lm = LoadedModel(model, None, adapter_for(model), str(folder), "streamed")
    return lm, StreamedOffload(model, device, LazyWeights(folder), writer)


def _fill(source: Path, model: torch.nn.Module):
    """Write config (and the SliceGPT widths) and copy tokenizer files into the new folder."""

    def fill(tmp: Path) -> None:
        model.config.save_pretrained(tmp)
        if is_sliced(model):
            (tmp / SLICING_FILE).write_text(json.dumps(model.slicing.to_json(), indent=2) + "\n")
        for f in source.iterdir():
            if f.is_file() and f.name not in _WEIGHT_FILES and not f.name.endswith(".safetensors"):
                shutil.copy2(f, tmp / f.name)

    return fill


def prune_streamed(
    source: str | Path,
    out: str | Path,
    prune: PruneConfig,
    calib_ids: torch.Tensor,
    device: torch.device | str = "cpu",
    dtype: torch.dtype = torch.float32,
    activations_on_cpu: bool = False,
    shard_bytes: int = SHARD_BYTES,
    progress: ProgressFn | None = None,
    attn_implementation: str | None = None,
    planned: Any = None,
) -> StreamedRun:
    """Prune or slice the model ``source`` (a folder or name, ``model_folder``) with a
    resolved config, layer by layer, into ``out`` (written shard by shard; nothing is left
    there if it fails). ``planned``: the run's plan (``core.runs.planned.Plan``:
    the method and roles), used as it is."""
    source, device = model_folder(source), torch.device(device)
    check_streamable(source, prune.method)  # before the output folder is started
    writer = ShardWriter(out, shard_bytes)
    lm, offload = open_streamed(source, device, dtype, writer, attn_implementation)
    try:
        result, rows = apply_prune(
            lm,
            prune,
            calib_ids,
            device,
            progress,
            method=None if planned is None else planned.method,
            roles=(planned.roles or None) if planned is not None else None,
            offload=offload,
            activations_on_cpu=activations_on_cpu,
        )
        folder = writer.finish(offload.source, _fill(source, lm.model))
    except BaseException:
        writer.abort()
        raise
    return StreamedRun(result, rows, folder, offload.peak_materialised)


def perplexity_streamed(
    folder: str | Path,
    windows: torch.Tensor,
    batch_size: int = 4,
    device: torch.device | str = "cpu",
    dtype: torch.dtype = torch.float32,
    activations_on_cpu: bool = False,
    progress: ProgressFn | None = None,
    attn_implementation: str | None = None,
) -> tuple[PerplexityResult, int]:
    """Perplexity of a model (a folder or name, ``model_folder``) on windows (n, L), layer
    by layer; also the most parameters materialised at once."""
    lm, offload = open_streamed(model_folder(folder), device, dtype, None, attn_implementation)
    store = torch.device("cpu") if activations_on_cpu else torch.device(device)
    res = layerwise_perplexity(lm.adapter, windows, batch_size, offload, store, progress)
    return res, offload.peak_materialised
