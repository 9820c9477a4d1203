"""The 'slice' run kind: SliceGPT slices the representation dimension d to d′ = (1 − s)·d;
perplexity, parameter count and forward latency (the common epilogue) are measured against
the dense model."""

from __future__ import annotations

import time
from typing import Any

import torch

from core.methods.slicegpt import save_sliced
from core.models.load import LoadedModel
from core.names import A_SPECTRA, T_BOUNDARIES
from core.pruning.apply import apply_prune
from core.runs.common import Prologue, changed_model_kind
from core.runs.measure import memory_report, start_phase, writing_folder
from core.runs.streamed import StreamedStep, streamed_kind
from core.store.run_store import RunWriter


def _record(writer: RunWriter, rep: Any, seconds: float, memory: dict) -> dict[str, Any]:
    """Store the PCA cut at every boundary; the slice kind's own metrics."""
    writer.write_table(T_BOUNDARIES, rep.rows)
    writer.write_arrays(A_SPECTRA, {"eigenvalues": rep.spectra})
    summary = rep.summary()
    summary.pop("options")
    return {
        **summary,
        "prune_seconds": seconds,
        **memory,
        "model": {"hidden_size_sliced": rep.d_sliced},
    }


def _slice(p: Prologue) -> dict[str, Any]:
    """The slice kind's own step: slice, then store the PCA cut at every boundary."""
    start_phase(p.device)
    t0 = time.perf_counter()
    method = p.plan.method
    rep, _ = apply_prune(p.lm, p.cfg.prune, p.calib_ids, p.device, p.progress, method=method)
    slice_seconds = time.perf_counter() - t0
    memory = memory_report(p.lm, p.calib_ids, p.loaded_rss, device=p.device)
    return _record(p.writer, rep, slice_seconds, memory)


def _record_streamed(s: StreamedStep) -> dict[str, Any]:
    """The streamed slice's own step (``core.runs.streamed``)."""
    device = torch.device(s.cfg.model.device)
    memory = memory_report(s.lm, s.calib_ids, s.loaded_rss, device=device)
    return _record(s.writer, s.run.result, s.seconds, memory)


def _save(lm: LoadedModel, folder: str) -> str:
    """The sliced weights with their widths (reload: core.methods.slicegpt.load_sliced)."""
    with writing_folder(folder) as tmp:
        save_sliced(lm.model, tmp)
        lm.tokenizer.save_pretrained(tmp)
    return str(folder)


execute_slice = streamed_kind(changed_model_kind(_slice, _save), _record_streamed)
