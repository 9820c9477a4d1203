"""The model a stored run produced: the dense model, its saved folder, or its pruning re-run
in memory (deterministic: same calibration windows, seeds and method)."""

from __future__ import annotations

from pathlib import Path

import torch
from transformers import AutoTokenizer

from core.adapters import adapter_for, resolve_roles
from core.errors import StoreError
from core.machine.device import resolve_dtype
from core.methods.slicegpt import load_sliced
from core.methods.structure import load_structured
from core.models.load import LoadedModel, load_model
from core.names import EVAL, SLICE, STRUCTURED
from core.progress import ProgressFn, report
from core.pruning.apply import apply_prune
from core.runs.measure import weight_sparsity
from core.runs.resources import get_calib_windows, get_model
from core.settings.config import RunConfig
from core.store.run_store import RunStore


def _load_sliced(src: RunConfig, folder: str, device: torch.device, dtype) -> LoadedModel:
    model = load_sliced(folder, device, dtype)
    tok = AutoTokenizer.from_pretrained(folder)
    return LoadedModel(model, tok, adapter_for(model), src.model.name, "saved", folder)


def _load_structured(src: RunConfig, folder: str, device: torch.device, dtype) -> LoadedModel:
    model = load_structured(folder, device, dtype)
    tok = AutoTokenizer.from_pretrained(folder)
    return LoadedModel(model, tok, adapter_for(model), src.model.name, "saved", folder)


def _load_pruned(src: RunConfig, folder: str, device: torch.device, dtype) -> LoadedModel:
    return load_model(folder, device, dtype)


# run kind -> how its saved folder is loaded
SAVED_LOADERS = {SLICE: _load_sliced, STRUCTURED: _load_structured}


def load_saved(src: RunConfig, folder: str) -> LoadedModel:
    """A stored run's ``--save`` folder, loaded the way its kind saved it."""
    device = torch.device(src.model.device)
    dtype = resolve_dtype(src.model.dtype, device)
    return SAVED_LOADERS.get(src.kind, _load_pruned)(src, folder, device, dtype)


def rebuild_model(cfg: RunConfig, progress: ProgressFn | None = None) -> LoadedModel:
    """Re-run a stored prune/slice config's pruning in memory (no evaluation)."""
    lm = get_model(cfg.model, fresh=True)
    calib_ids, _ = get_calib_windows(lm, cfg.calib)
    apply_prune(lm, cfg.prune, calib_ids, torch.device(cfg.model.device), progress)
    return lm


def model_of_run(
    src: RunConfig, store: RunStore, run_id: str, progress: ProgressFn | None
) -> tuple[LoadedModel, str]:
    """The model a stored run produced, and how it was obtained ('dense', 'saved', 'rebuilt')."""
    if src.kind == EVAL:
        report(progress, "load", 0, 1, f"loading {src.model.name}")
        return get_model(src.model, fresh=False), "dense"
    saved = store.load(run_id).metrics.get("saved_to")
    if saved and Path(saved).is_dir():
        report(progress, "load", 0, 1, f"loading the saved model {saved}")
        return load_saved(src, saved), "saved"
    report(progress, "load", 0, 1, f"rebuilding run {run_id}'s model by re-running its pruning")
    lm = rebuild_model(src, progress)
    expected = store.load(run_id).metrics.get("achieved_sparsity")
    if expected is not None:
        got = weight_sparsity(lm, resolve_roles(src.prune.targets))["achieved_sparsity"]
        if abs(got - expected) > 1e-9:
            raise StoreError(
                f"rebuilding run {run_id} gave sparsity {got:.6f}, the run "
                f"recorded {expected:.6f}; the run cannot be reproduced here"
            )
    return lm, "rebuilt"
