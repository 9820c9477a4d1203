"""The 'eval' run kind: dense perplexity of a model (the baseline of every prune/slice run)."""

from __future__ import annotations

from typing import Any

import torch

from core.evaluation.perplexity import evaluate_perplexity
from core.machine.environment import environment_record
from core.machine.gpu_memory import oom_as_error, peak_report, reset_peak
from core.models.load import LoadedModel
from core.names import EFFDIM_PREFIX, T_EFFDIM, T_EVAL_WINDOWS
from core.progress import ProgressFn, report
from core.runs.measure import residual_effdim
from core.runs.resources import effdim_windows, get_eval_windows, get_model
from core.runs.store_access import result, stored_or_wait, tee
from core.runs.stream_model import streamed_lm, streamed_perplexity
from core.settings.config import RunConfig
from core.store.run_store import RunStore


def execute_eval(
    cfg: RunConfig,
    store: RunStore,
    on_progress: ProgressFn | None = None,
    force: bool = False,
    lm: LoadedModel | None = None,
) -> dict[str, Any]:
    """Run a planned 'eval' config; reuses a finished run with the same config unless forced.
    ``lm``: the model to measure (a prune run's private copy before it is changed)."""
    cached = stored_or_wait(store, cfg, force, on_progress, "the same dense baseline")
    if cached is not None:
        return cached
    if cfg.model.stream and lm is None:
        return _execute_streamed(cfg, store, on_progress, force)
    with store.begin(cfg, force) as writer:
        progress = tee(writer.progress, on_progress)
        report(progress, "load", 0, 1, f"loading {cfg.model.name}")
        lm = lm or get_model(cfg.model, fresh=False)
        windows, data_info = get_eval_windows(lm, cfg.eval)
        writer.write_env(environment_record(cfg.model.device))
        device = torch.device(cfg.model.device)
        reset_peak(device)
        with oom_as_error(device, "the dense evaluation"):
            res = evaluate_perplexity(lm.model, windows, cfg.eval.batch_size, device, progress)
        eff_ids = effdim_windows(windows, lm.adapter.hidden_size)
        eff = residual_effdim(lm, eff_ids, device, progress)
        writer.write_table(T_EFFDIM, eff["rows"])
        writer.write_table(T_EVAL_WINDOWS, res.window_rows())
        metrics = {
            **res.to_dict(),
            "data": data_info,
            "model": lm.adapter.describe(),
            **{f"{EFFDIM_PREFIX}{k}": v for k, v in eff["overall"].items()},
            **peak_report(device),  # GPU peak of the evaluation (and effdim), on CUDA
        }
        writer.commit(metrics)
    return result(cfg, metrics)


def _execute_streamed(
    cfg: RunConfig, store: RunStore, on_progress: ProgressFn | None, force: bool
) -> dict[str, Any]:
    """The dense perplexity of a streamed model (``ModelSpec.stream``): every window passes
    one decoder layer at a time, each read from the safetensors files; same numbers as in
    memory. The effective dimension is not measured (it needs the whole model at once)."""
    with store.begin(cfg, force) as writer:
        progress = tee(writer.progress, on_progress)
        report(progress, "load", 0, 1, f"opening {cfg.model.name} (streamed)")
        lm, folder = streamed_lm(cfg.model)
        windows, data_info = get_eval_windows(lm, cfg.eval)
        writer.write_env(environment_record(cfg.model.device))
        device = torch.device(cfg.model.device)
        reset_peak(device)
        with oom_as_error(device, "the streamed dense evaluation"):
            res = streamed_perplexity(
                cfg.model, folder, windows, cfg.eval.batch_size, progress=progress
            )
        writer.write_table(T_EVAL_WINDOWS, res.window_rows())
        metrics = {
            **res.to_dict(),
            "data": data_info,
            "model": lm.adapter.describe(),
            "streamed": True,
            **peak_report(device),
        }
        writer.commit(metrics)
    return result(cfg, metrics)
