"""The skeleton every run kind shares.

- ``cached_result`` / ``stored_or_wait``: a finished run with the same id is reused;
- ``tee``: the run's own progress log beside the caller's progress function;
- ``run_changed_model`` (bound to a kind's steps by ``changed_model_kind``): the prune and
  slice kinds' common frame. Prologue: load a private copy of the model, record the
  environment, compute (or reuse) the dense baseline and its zero-shot accuracy, load
  evaluation and calibration windows. The kind's own step changes the model and returns
  its metrics. Epilogue: pruned perplexity, effective dimension,
  zero-shot accuracy, the headline metrics every such run has, saving, commit. A lean run
  (``RunConfig.lean``) measures neither latency nor the changed model's effective dimension.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

import torch

from core.evaluation.perplexity import evaluate_perplexity
from core.machine.environment import environment_record
from core.machine.process_memory import peak_rss_mb, proc_status_mb, release_freed, touch_weights
from core.models.load import LoadedModel
from core.names import EFFDIM_PREFIX, T_EFFDIM, T_EVAL_WINDOWS
from core.progress import ProgressFn, report
from core.runs.dense import execute_eval
from core.runs.measure import forward_latency_ms, nonzero_params, residual_effdim
from core.runs.plan import dense_config
from core.runs.planned import Plan
from core.runs.resources import effdim_windows, get_calib_windows, get_eval_windows, get_model
from core.runs.store_access import result, reusable, tee, writing
from core.runs.zeroshot import dense_zeroshot, pruned_zeroshot
from core.settings.config import RunConfig
from core.store.run_store import RunStore, RunWriter


@dataclass
class RunOptions:
    """How to execute a run; none of it enters the run id. save_dir: save the changed model
    there; activations_on_cpu: keep the runner's calibration activations on the CPU."""

    force: bool = False
    save_dir: str | None = None
    activations_on_cpu: bool = False


# What every run kind's executor is: (the run's plan, store, progress, options) -> result.
KindRunner = Callable[[Plan, RunStore, ProgressFn | None, RunOptions], dict[str, Any]]


@dataclass
class Prologue:
    """What the prologue of a prune or slice run prepared for the kind's own step."""

    plan: Plan  # the run's: its config, the method and roles the kind's step applies
    opts: RunOptions
    writer: RunWriter
    progress: ProgressFn
    device: torch.device
    lm: LoadedModel
    loaded_rss: float | None  # MiB once the model is loaded with its weights resident
    dense: dict[str, Any]  # the dense baseline's result
    dense_zs: dict[str, Any] | None  # the dense zero-shot run's result, when tasks were asked
    windows: torch.Tensor  # (n, L) evaluation windows
    data_info: dict[str, Any]
    calib_ids: torch.Tensor  # (nsamples, seqlen) calibration windows
    calib_info: dict[str, Any]
    latency_ms_dense: float | None  # forward time of one window before the change (lean: None)

    @property
    def cfg(self) -> RunConfig:
        return self.plan.cfg


def prologue(
    plan: Plan, opts: RunOptions, store: RunStore, writer: RunWriter, progress: ProgressFn
) -> Prologue:
    """Load a private copy of the model and everything measured before it is changed."""
    cfg = plan.cfg
    report(progress, "load", 0, 1, f"loading {cfg.model.name}")
    lm = get_model(cfg.model, fresh=True)
    touch_weights(lm.model)  # memory-mapped weights resident, so the baseline counts them
    release_freed()
    loaded_rss = proc_status_mb("VmRSS")  # interpreter + libraries + tokenizer + the weights
    writer.write_env(environment_record(cfg.model.device))
    dense = execute_eval(dense_config(cfg.model, cfg.eval), store, progress, lm=lm)
    dense_zs = dense_zeroshot(cfg, store, lm, progress)
    windows, data_info = get_eval_windows(lm, cfg.eval)
    calib_ids, calib_info = get_calib_windows(lm, cfg.calib)
    device = torch.device(cfg.model.device)
    latency_dense = None if cfg.lean else forward_latency_ms(lm.model, cfg.eval.seqlen, device)
    return Prologue(
        plan,
        opts,
        writer,
        progress,
        device,
        lm,
        loaded_rss,
        dense,
        dense_zs,
        windows,
        data_info,
        calib_ids,
        calib_info,
        latency_dense,
    )


def _latency(p: Prologue) -> dict[str, float]:
    """Forward time of one window after the change beside the time before (core.analysis.budget)."""
    latency = forward_latency_ms(p.lm.model, p.cfg.eval.seqlen, p.device)
    ratio = latency / p.latency_ms_dense
    return {"latency_ms_dense": p.latency_ms_dense, "latency_ms": latency, "latency": ratio}


def _effdim(p: Prologue) -> dict[str, float]:
    """The changed model's effective dimension: its per-layer table, overall metrics."""
    eff_ids = effdim_windows(p.windows, p.lm.adapter.hidden_size)
    eff = residual_effdim(p.lm, eff_ids, p.device, p.progress)
    p.writer.write_table(T_EFFDIM, eff["rows"])
    return {f"{EFFDIM_PREFIX}{k}": v for k, v in eff["overall"].items()}


def epilogue(p: Prologue, own: dict[str, Any], save: Callable[[str], str], save_dir: str | None):
    """Perplexity and effective dimension of the changed model, zero-shot accuracy, the
    metrics every prune/slice run has (``own``: the kind's, placed after the headline)."""
    pruned = evaluate_perplexity(p.lm.model, p.windows, p.cfg.eval.batch_size, p.device, p.progress)
    p.writer.write_table(T_EVAL_WINDOWS, pruned.window_rows())
    n_dense = p.dense["metrics"]["model"]["n_params"]
    metrics = {
        "dense_ppl": p.dense["metrics"]["ppl"],
        "dense_run": p.dense["run_id"],
        "ppl": pruned.ppl,
        "nll": pruned.nll,
        "n_windows": pruned.n_windows,
        "n_tokens": pruned.n_tokens,
        "eval_tokens_per_s": pruned.tokens_per_s,
        **({} if p.cfg.lean else _latency(p)),
        # what the run keeps, for comparisons at matched budgets (core.analysis.budget)
        "kept_params": nonzero_params(p.lm.model) / n_dense,
        **own,
        **({} if p.cfg.lean else _effdim(p)),
        "data": p.data_info,
        "calib": p.calib_info,
        "model": {**p.lm.adapter.describe(), **own.get("model", {})},
        "peak_rss_mb": peak_rss_mb(),
    }
    metrics.update(pruned_zeroshot(p.cfg, p.lm, p.dense_zs, p.writer, p.progress))
    if save_dir:
        metrics["saved_to"] = save(save_dir)
    return metrics


def run_changed_model(
    plan: Plan,
    store: RunStore,
    on_progress: ProgressFn | None,
    opts: RunOptions,
    change: Callable[[Prologue], dict[str, Any]],
    save: Callable[[LoadedModel, str], str],
) -> dict[str, Any]:
    """Prologue, the kind's ``change`` (it changes the model, writes its own tables and
    returns its metrics), epilogue; a stored run is reused unless forced or saving."""
    cfg = plan.cfg
    cached = reusable(store, cfg, opts.force, opts.save_dir)
    if cached is not None:
        return cached
    with writing(store, cfg, opts.force, f"the {cfg.kind} run") as writer:
        p = prologue(plan, opts, store, writer, tee(writer.progress, on_progress))
        own = change(p)
        metrics = epilogue(p, own, lambda folder: save(p.lm, folder), opts.save_dir)
        writer.commit(metrics)
    return result(cfg, metrics)


def changed_model_kind(
    change: Callable[[Prologue], dict[str, Any]], save: Callable[[LoadedModel, str], str]
) -> KindRunner:
    """The executor of a kind that changes a private copy of the model with ``change`` and
    saves it with ``save``: ``run_changed_model`` with the kind's two steps bound."""
    return partial(run_changed_model, change=change, save=save)
