"""The 'prune' run kind: a layer-wise method (magnitude, Wanda, SparseGPT, attention-matrix
GD) on the shared runner, compared with the dense model (perplexity, per-layer sparsity and
reconstruction error, attention error when W_Q/W_K are pruned, zero-shot accuracy)."""

from __future__ import annotations

import dataclasses
import time
from typing import Any

import torch

from core.evaluation.attention_error import AttentionProbe
from core.evaluation.attention_error import summarize as summarize_attention
from core.names import A_METHOD, A_QK, A_REBUILD, T_ALLOCATION, T_ATTENTION_ERRORS, T_LAYERS
from core.progress import report
from core.pruning.apply import apply_prune
from core.runs.common import Prologue, changed_model_kind
from core.runs.measure import (
    memory_report,
    probe_mb,
    qk_arrays,
    runner_widths,
    save_model,
    start_phase,
    weight_sparsity,
)
from core.runs.restore import rebuild_arrays
from core.runs.streamed import StreamedStep, streamed_kind
from core.store.run_store import RunWriter

PROBE_WINDOWS = 2  # calibration / held-out windows the attention error is measured on


def layer_rows(reports: list) -> list[dict[str, Any]]:
    """One flat row per pruned linear (a method's scalar extras become columns)."""
    rows = [dataclasses.asdict(r) for r in reports]
    for row in rows:
        row["shape"] = list(row["shape"])
        extra = row.pop("extra")
        row.update({k: v for k, v in extra.items() if isinstance(v, int | float | str | bool)})
    return rows


def _probes(p: Prologue, roles: tuple[str, ...]) -> list[AttentionProbe]:
    """Dense attention references on calibration and held-out text, when q or k is pruned
    (Paper B's measure of the pruned W_Q/W_K)."""
    if not {"q", "k"} & set(roles):
        return []
    report(p.progress, "probe", 0, 1, "dense attention references")
    ad, dev = p.lm.adapter, p.device
    calib = AttentionProbe.capture(ad, p.calib_ids[:PROBE_WINDOWS], "calib", dev)
    held = AttentionProbe.capture(ad, p.windows[:PROBE_WINDOWS], "heldout", dev, dense=calib.dense)
    return [calib, held]


def _write_tables(writer: RunWriter, result: Any, alloc_rows: list, attn_rows: list) -> None:
    """The method's per-linear, allocation and own tables and arrays."""
    writer.write_table(T_LAYERS, layer_rows(result.reports))
    if attn_rows:
        writer.write_table(T_ATTENTION_ERRORS, attn_rows)
    writer.write_table(T_ALLOCATION, alloc_rows)
    for name, rows in result.tables.items():
        writer.write_table(name, rows)
    if result.arrays:
        writer.write_arrays(A_METHOD, result.arrays)


def _prune(p: Prologue) -> dict[str, Any]:
    """The prune kind's own step: prune, then store what the method did."""
    prune, roles, method = p.cfg.prune, p.plan.roles, p.plan.method
    probes = _probes(p, roles)
    start_phase(p.device)  # the budget below is for the pruning phase itself
    t0 = time.perf_counter()
    result, alloc_rows = apply_prune(
        p.lm,
        prune,
        p.calib_ids,
        p.device,
        p.progress,
        method=method,
        roles=roles,
        activations_on_cpu=p.opts.activations_on_cpu,
    )
    prune_seconds = time.perf_counter() - t0
    widths = runner_widths(p.lm, method, roles)
    memory = memory_report(p.lm, p.calib_ids, p.loaded_rss, probe_mb(probes), widths, p.device)
    attn_rows = [row for probe in probes for row in probe.errors(p.lm.adapter)]
    _write_tables(p.writer, result, alloc_rows, attn_rows)
    qk = qk_arrays(p.lm)
    if qk:
        p.writer.write_arrays(A_QK, qk)
    # what rebuilds this model in seconds (the Compare page): masks, and changed weights
    p.writer.write_arrays(A_REBUILD, rebuild_arrays(p.lm, prune.targets, method.updates_weights))
    return {
        "prune_seconds": prune_seconds,
        "layer_seconds": result.layer_seconds,
        **weight_sparsity(p.lm, roles),
        **(summarize_attention(attn_rows) if attn_rows else {}),
        **method.run_summary(result.tables),
        **method.model_summary(p.cfg.model.name),
        **memory,
    }


def _record_streamed(s: StreamedStep) -> dict[str, Any]:
    """The streamed prune's own step (``core.runs.streamed``): store what the method did;
    sparsity and W_Q/W_K are read from the written model by the frame."""
    roles, method = s.plan.roles, s.plan.method
    result, device = s.run.result, torch.device(s.cfg.model.device)
    widths = runner_widths(s.lm, method, roles)
    memory = memory_report(s.lm, s.calib_ids, s.loaded_rss, 0.0, widths, device)
    _write_tables(s.writer, result, s.run.alloc_rows, [])
    return {
        "prune_seconds": s.seconds,
        "layer_seconds": result.layer_seconds,
        **method.run_summary(result.tables),
        **method.model_summary(s.cfg.model.name),
        **memory,
    }


execute_prune = streamed_kind(changed_model_kind(_prune, save_model), _record_streamed)
