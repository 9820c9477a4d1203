"""Measurements a run takes of a model: sparsity, memory of the pruning phase, forward
latency, the residual stream's effective dimension, W_Q/W_K for later heatmaps."""

from __future__ import annotations

import os
import shutil
import statistics
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch
from torch import nn

from core.analysis.relation import collect_residual_dims
from core.evaluation.attention_error import AttentionProbe
from core.machine.gpu_memory import peak_report, reset_peak
from core.machine.process_memory import (
    peak_rss_mb,
    phase_report,
    release_freed,
    reset_peak_rss,
    tensor_mb,
)
from core.machine.process_memory import weight_mb as model_weight_mb
from core.methods import Method
from core.models.load import LoadedModel
from core.progress import ProgressFn, report

QK_MAX_HIDDEN = 2048  # W_Q/W_K are stored for heatmaps up to this width (qk_arrays)


def layer_zeros(lm: LoadedModel, layer: nn.Module, roles: tuple[str, ...]) -> list[int]:
    """[zeros, weights] over a decoder layer's targeted linears, then over all its linears."""
    z_t = n_t = z_a = n_a = 0
    for role, lin in lm.adapter.linears(layer).items():
        w = lin.weight
        z, n = int((w == 0).sum()), w.numel()
        z_a, n_a = z_a + z, n_a + n
        if role in roles:
            z_t, n_t = z_t + z, n_t + n
    return [z_t, n_t, z_a, n_a]


def sparsity_of(counts: list[int]) -> dict[str, float]:
    """The run's two sparsities from summed ``layer_zeros``."""
    z_t, n_t, z_a, n_a = counts
    return {"achieved_sparsity": z_t / max(n_t, 1), "decoder_sparsity": z_a / max(n_a, 1)}


def weight_sparsity(lm: LoadedModel, roles: tuple[str, ...]) -> dict[str, float]:
    """Fraction of exact zeros over the targeted linears and over every decoder linear."""
    counts = [layer_zeros(lm, layer, roles) for layer in lm.adapter.layers]
    return sparsity_of([sum(c) for c in zip(*counts, strict=True)])


def nonzero_params(model: nn.Module) -> int:
    """Non-zero parameters of the whole model (a tied matrix counted once)."""
    return sum(int(torch.count_nonzero(p)) for p in model.parameters())


def layer_qk(lm: LoadedModel, i: int, layer: nn.Module) -> dict[str, torch.Tensor]:
    """One layer's W_Q/W_K (float16, CPU) under their ``qk_arrays`` names."""
    return {
        f"layer{i}.{role}": lin.weight.detach().to("cpu", torch.float16)
        for role, lin in lm.adapter.linears(layer, ("q", "k")).items()
    }


def qk_arrays(lm: LoadedModel, max_hidden: int = QK_MAX_HIDDEN) -> dict[str, torch.Tensor]:
    """Pruned W_Q/W_K (float16) per layer for attention heatmaps of any prompt later.

    Only for models with hidden size <= max_hidden (SmolLM2: ~26 MB); larger models keep the
    masks the method stored and the heatmaps computed at prune time.
    """
    if lm.adapter.hidden_size > max_hidden:
        return {}
    out = {}
    for i, layer in enumerate(lm.adapter.layers):
        out.update(layer_qk(lm, i, layer))
    return out


def probe_mb(probes: list[AttentionProbe]) -> float:
    """Bytes the attention probes hold (shared dense weights counted once), in MiB."""
    seen: set[int] = set()
    total = 0.0
    for probe in probes:
        total += tensor_mb(*probe.X)
        for w in (w for pair in probe.dense for w in pair):
            if id(w) not in seen:
                seen.add(id(w))
                total += tensor_mb(w)
    return total


def start_phase(device: torch.device | str = "cpu") -> None:
    """Return memory freed by set-up to the OS and restart the peaks (RSS, and the GPU's
    when ``device`` is CUDA), just before pruning."""
    release_freed()
    reset_peak_rss()
    reset_peak(device)


def memory_report(
    lm: LoadedModel,
    calib_ids: torch.Tensor,
    loaded_rss_mb: float | None,
    analysis_mb: float = 0.0,
    widths: int | None = None,
    device: torch.device | str = "cpu",
) -> dict[str, float]:
    """The pruning phase's peak RSS beside its budget (core.machine.process_memory): the process
    once the model is loaded with its weights resident + the calibration activations, float32 +
    analysis buffers kept on purpose (attention probes).

    widths: features per calibration token the phase holds: d for the shared runner, which
    overwrites one buffer in place, plus the inputs a method keeps (``Method.needs_inputs``);
    the default 2·d is inputs and outputs of a layer (SliceGPT keeps both). On CUDA the
    phase's peak GPU memory (allocated and reserved) and the device's capacity are added
    (``core.machine.gpu_memory.peak_report``)."""
    widths = 2 * lm.adapter.hidden_size if widths is None else widths
    act = calib_ids.numel() * widths * 4 / 2**20
    rss = phase_report(peak_rss_mb(), loaded_rss_mb, model_weight_mb(lm.model), act, analysis_mb)
    return {**rss, **peak_report(device)}


def runner_widths(lm: LoadedModel, method: Method, roles: tuple[str, ...]) -> int:
    """Features per calibration token the shared runner holds for ``method`` (memory_report)."""
    linears = lm.adapter.linears(lm.adapter.layers[0], roles)
    kept = sum(linears[r].in_features for r in method.needs_inputs if r in linears)
    return lm.adapter.hidden_size + kept


def residual_effdim(
    lm: LoadedModel, windows: torch.Tensor, device: torch.device, progress: ProgressFn | None
) -> dict[str, Any]:
    """Effective dimension of the residual stream on held-out windows (core.analysis.relation)."""
    report(progress, "effdim", 0, 1, "effective dimension of the residual stream")
    res = collect_residual_dims(lm.adapter, windows, device)
    report(progress, "effdim", 1, 1)
    return res


@torch.no_grad()
def forward_latency_ms(model: nn.Module, seqlen: int, device, repeats: int = 5) -> float:
    """Median wall time of one forward pass on a (1, seqlen) batch, in milliseconds."""
    ids = torch.randint(0, 100, (1, seqlen), generator=torch.Generator().manual_seed(0)).to(device)
    model(input_ids=ids, use_cache=False)  # warm-up
    cuda = torch.device(device).type == "cuda"
    times = []
    for _ in range(repeats):
        if cuda:
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        model(input_ids=ids, use_cache=False)
        if cuda:
            torch.cuda.synchronize()
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


@contextmanager
def writing_folder(folder: str | Path) -> Iterator[Path]:
    """A hidden temporary folder to write into; on success its files move into ``folder``
    (created if needed), on failure it is removed: never a half-written model."""
    path = Path(folder).expanduser()
    tmp = path.parent / f".{path.name}.partial"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    try:
        yield tmp
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    path.mkdir(parents=True, exist_ok=True)
    for f in tmp.iterdir():
        os.replace(f, path / f.name)
    tmp.rmdir()


def save_model(lm: LoadedModel, folder: str) -> str:
    """save_pretrained (safetensors) + tokenizer: reloadable by plain transformers."""
    with writing_folder(folder) as tmp:
        lm.model.save_pretrained(tmp, safe_serialization=True)
        lm.tokenizer.save_pretrained(tmp)
    return str(Path(folder).expanduser())
