"""The 'recover' run kind: fine-tune the model a stored prune or slice run produced, keeping
its zeros (core.recovery), and measure it as every run is measured.

The parent's model is loaded from its saved folder or rebuilt by re-running its pruning
(``core.runs.rebuild``), trained on calibration text (C4 train by default, a draw other than
the pruning's), then evaluated on the same evaluation windows as the parent and the dense
model, with bootstrap intervals over those windows. Stored beside the headline: the curve
(``T_RECOVERY``), the achieved sparsity against the parent's and whether the zero set is
exactly the parent's, zero-shot accuracy beside the parent's when tasks are asked, the time
and peak memory of the fine-tune. A killed run resumes from the checkpoint in its scratch
folder (``scratch_dir``) when started again with the same settings.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from core.analysis.uncertainty import ppl_intervals
from core.errors import StoreError
from core.evaluation.perplexity import evaluate_perplexity
from core.machine.environment import environment_record
from core.machine.gpu_memory import peak_report
from core.machine.process_memory import peak_rss_mb
from core.methods.slicegpt import save_sliced
from core.methods.structure import save_structured
from core.models.load import LoadedModel
from core.names import PRUNE, ROLES, SLICE, STRUCTURED, T_EVAL_WINDOWS, T_RECOVERY, resolve_roles
from core.progress import ProgressFn, report
from core.recovery import Checkpoint, ZeroSet, finetune, pruned_linears
from core.runs.common import RunOptions
from core.runs.measure import (
    nonzero_params,
    save_model,
    start_phase,
    weight_sparsity,
    writing_folder,
)
from core.runs.planned import Plan
from core.runs.rebuild import model_of_run
from core.runs.recovery_parent import parent_of_recovery
from core.runs.resources import get_calib_windows, get_eval_windows
from core.runs.store_access import result, reusable, tee, writing
from core.runs.zeroshot import pruned_zeroshot, run_zeroshot
from core.settings.config import RecoverConfig, RunConfig, recover_from, zeroshot_from
from core.store.run_store import RunStore, RunWriter


def scratch_dir(store: RunStore, run_id: str) -> Path:
    """Where a recover run keeps its checkpoint while it trains (survives a kill; removed
    once the run is stored)."""
    return store.root / "scratch" / run_id


def _window_nll(store: RunStore, run_id: str) -> np.ndarray | None:
    """A stored run's per-window NLLs (None for a run stored before they were)."""
    try:
        run = store.load(run_id)
    except StoreError:
        return None
    if T_EVAL_WINDOWS not in run.tables():
        return None
    return run.table(T_EVAL_WINDOWS)["nll"].to_numpy()


def _intervals(store: RunStore, nll: np.ndarray, parent: str, dense: str) -> dict[str, float]:
    """95% bootstrap intervals of the recovered, parent and dense perplexities over the
    shared evaluation windows (core.analysis.uncertainty)."""
    named = [("ppl", nll), ("parent_ppl", _window_nll(store, parent))]
    named.append(("dense_ppl", _window_nll(store, dense)))
    named = [(k, v) for k, v in named if v is not None and len(v) == len(nll)]
    out: dict[str, float] = {}
    for (key, _), iv in zip(named, ppl_intervals([v for _, v in named]), strict=True):
        out.update({f"{key}_lo": iv.lo, f"{key}_hi": iv.hi})
    return out


def _dense_params(store: RunStore, dense_run: str) -> int | None:
    """The dense model's parameter count (the denominator of kept_params)."""
    try:
        return store.load(dense_run).metrics["model"]["n_params"]
    except (StoreError, KeyError):
        return None


def _sparsity(lm: LoadedModel, src: RunConfig, parent: dict[str, Any]) -> dict[str, Any]:
    """The merged model's sparsity beside the parent's (a prune parent's targeted linears)."""
    if src.kind != PRUNE:
        return {}
    now = weight_sparsity(lm, resolve_roles(src.prune.targets))
    return {**now, "parent_achieved_sparsity": parent.get("achieved_sparsity")}


def _save(lm: LoadedModel, kind: str, folder: str) -> str:
    """A sliced model through save_sliced (reload: load_sliced), a structured one through
    save_structured (reload: load_structured), any other save_pretrained."""
    saver = {SLICE: save_sliced, STRUCTURED: save_structured}.get(kind)
    if saver is None:
        return save_model(lm, folder)
    with writing_folder(folder) as tmp:
        saver(lm.model, tmp)
        lm.tokenizer.save_pretrained(tmp)
    return str(Path(folder).expanduser())


def _parent_zeroshot(cfg: RunConfig, store: RunStore, lm: LoadedModel, progress) -> dict | None:
    """The parent model's zero-shot run (computed on ``lm`` before training, or reused)."""
    zs = zeroshot_from(cfg.extra_value("zeroshot"))
    if zs is None:
        return None
    parent = recover_from(cfg.extra_value("recover")).parent
    return run_zeroshot(None, zs, store, source_run=parent, on_progress=progress, lm=lm)


def _zeroshot_after(cfg: RunConfig, lm: LoadedModel, before, writer: RunWriter, progress):
    """The recovered model's accuracy beside the parent's."""
    out = pruned_zeroshot(cfg, lm, before, writer, progress)
    if "dense_zeroshot_run" in out:
        out["parent_zeroshot_run"] = out.pop("dense_zeroshot_run")
        out["parent_mean_acc"] = out.pop("dense_mean_acc")
    return out


def _train(src: RunConfig, cfg: RunConfig, rc: RecoverConfig, store: RunStore, progress):
    """Load the parent's model, fine-tune it, return the model and what the run measured."""
    parent_id = rc.parent
    lm, how = model_of_run(src, store, parent_id, progress)
    device = torch.device(cfg.model.device)
    windows, data_info = get_eval_windows(lm, cfg.eval)
    train_ids, calib_info = get_calib_windows(lm, cfg.calib)
    roles = resolve_roles(src.prune.targets) if src.kind == PRUNE else ROLES
    linears = pruned_linears(lm, roles)
    held = ZeroSet.capture(linears) if src.kind == PRUNE else ZeroSet.empty()
    before_zs = _parent_zeroshot(cfg, store, lm, progress)
    start_phase(device)
    t0 = time.perf_counter()
    checkpoint = Checkpoint(scratch_dir(store, cfg.run_id), cfg.run_id)
    heldout = windows[: rc.curve_windows]
    ft = finetune(lm.model, linears, held, train_ids, heldout, rc, device, checkpoint, progress)
    seconds = time.perf_counter() - t0
    rows = ft.loop.rows
    own = {
        "recover_seconds": seconds,
        "recover_method": rc.method,
        "steps": rc.steps,
        "resumed_from": ft.loop.resumed_from,
        "train_tokens": rc.steps * rc.batch_size * cfg.calib.seqlen,
        "train_tokens_per_s": ft.loop.tokens_per_s,
        "trained_params": ft.trained_params,
        "zero_set_kept": ft.zero_set_kept,
        "held_zeros": held.counts()[0],
        "heldout_ppl_start": rows[0]["heldout_ppl"],
        "heldout_ppl_end": rows[-1]["heldout_ppl"],
        "final_train_loss": rows[-1]["train_loss"],
        "peak_rss_mb": peak_rss_mb(),
        **peak_report(device),
        "model_from": how,
        "data": data_info,
        "calib": calib_info,
    }
    return lm, windows, rows, before_zs, checkpoint, own


def execute_recover(
    plan: Plan, store: RunStore, on_progress: ProgressFn | None, opts: RunOptions
) -> dict[str, Any]:
    """Run a planned 'recover' config (``core.runs.recovery_parent.plan_recover``): its parent is
    checked again first, so a config naming a run that is gone stores nothing."""
    cfg = plan.cfg
    rc = recover_from(cfg.extra_value("recover"))
    parent_rec, src = parent_of_recovery(store, rc)
    cached = reusable(store, cfg, opts.force, opts.save_dir)
    if cached is not None:
        return cached
    parent = store.load(parent_rec.id).metrics
    with writing(store, cfg, opts.force, "the recover run") as writer:
        progress = tee(writer.progress, on_progress)
        writer.write_env(environment_record(cfg.model.device))
        report(progress, "load", 0, 1, f"loading run {rc.parent}'s model")
        lm, windows, rows, before_zs, checkpoint, own = _train(src, cfg, rc, store, progress)
        writer.write_table(T_RECOVERY, rows)
        device = torch.device(cfg.model.device)
        res = evaluate_perplexity(lm.model, windows, cfg.eval.batch_size, device, progress)
        writer.write_table(T_EVAL_WINDOWS, res.window_rows())
        n_dense = _dense_params(store, parent["dense_run"])
        metrics = {
            "parent_run": parent_rec.id,
            "parent_kind": src.kind,
            "parent_ppl": parent["ppl"],
            "dense_ppl": parent["dense_ppl"],
            "dense_run": parent["dense_run"],
            "ppl": res.ppl,
            **_intervals(store, np.asarray(res.window_nll), parent_rec.id, parent["dense_run"]),
            "nll": res.nll,
            "n_windows": res.n_windows,
            "n_tokens": res.n_tokens,
            "eval_tokens_per_s": res.tokens_per_s,
            **_sparsity(lm, src, parent),
            "kept_params": nonzero_params(lm.model) / n_dense if n_dense else None,
            "parent_kept_params": parent.get("kept_params"),
            **own,
            "model": {**parent.get("model", {}), **lm.adapter.describe()},
        }
        metrics.update(_zeroshot_after(cfg, lm, before_zs, writer, progress))
        if opts.save_dir:
            metrics["saved_to"] = _save(lm, src.kind, opts.save_dir)
        writer.commit(metrics)
    checkpoint.clear()
    return result(cfg, metrics)
