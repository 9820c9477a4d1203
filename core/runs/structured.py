"""The 'structured' run kind: a method removes whole decoder layers, KV groups or MLP channels
(ShortGPT, FLAP, structured Wanda: core.methods.structure) and leaves a smaller dense model;
perplexity, kept parameters, forward latency and the effective dimension (the common
epilogue) are measured against the dense model. Stored: one row per dense layer
(``T_STRUCTURE``) and the fraction of decoder parameters removed (``PARAMS_REMOVED``)."""

from __future__ import annotations

import time
from typing import Any

from core.methods.structure import save_structured
from core.models.load import LoadedModel
from core.names import T_STRUCTURE
from core.pruning.apply import apply_prune
from core.runs.common import Prologue, changed_model_kind
from core.runs.measure import memory_report, start_phase, writing_folder


def _structure(p: Prologue) -> dict[str, Any]:
    """The kind's own step: remove the structures, store what each layer kept."""
    start_phase(p.device)
    t0 = time.perf_counter()
    method = p.plan.method
    rep, _ = apply_prune(p.lm, p.cfg.prune, p.calib_ids, p.device, p.progress, method=method)
    seconds = time.perf_counter() - t0
    memory = memory_report(p.lm, p.calib_ids, p.loaded_rss, device=p.device)
    p.writer.write_table(T_STRUCTURE, rep.rows)
    spec = p.lm.model.structure
    return {
        **rep.summary(),
        "prune_seconds": seconds,
        **memory,
        "model": {"n_layers_dense": spec.dense_layers, "structure_in_config": spec.in_config},
    }


def _save(lm: LoadedModel, folder: str) -> str:
    """The smaller model with its shapes (reload: core.methods.structure.load_structured, or
    plain transformers where the config states them)."""
    with writing_folder(folder) as tmp:
        save_structured(lm.model, tmp)
        lm.tokenizer.save_pretrained(tmp)
    return str(folder)


execute_structured = changed_model_kind(_structure, _save)
