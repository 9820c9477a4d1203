"""The prune and slice kinds' frame for a streamed model (``ModelSpec.stream``).

The same steps as ``core.runs.common.run_changed_model``, with the model never held: the
dense baseline is a streamed 'eval' run; the method runs through ``core.stream.pipeline``
(each decoder layer read from the source safetensors when its turn comes, changed, written
to the output shards and dropped), and the output is written into the run's own folder
(``model/``, moved to ``--save`` once the run is complete); the changed model's perplexity
is streamed from that folder, its sparsity and W_Q/W_K read from it one layer at a time.
The masks, the tables and perplexity are the in-memory run's (tests/test_stream_runs.py).

Not measured when streamed (each needs the whole model at once): the effective dimension,
forward latency, the attention-error probes and zero-shot accuracy (refused at the edge).
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from core.machine.environment import environment_record
from core.machine.process_memory import peak_rss_mb, phase_report, proc_status_mb, release_freed
from core.models.load import LoadedModel
from core.names import A_QK, PRUNE, T_EVAL_WINDOWS
from core.progress import ProgressFn, report
from core.runs.common import KindRunner, RunOptions
from core.runs.dense import execute_eval
from core.runs.measure import start_phase
from core.runs.plan import dense_config
from core.runs.planned import Plan
from core.runs.resources import get_calib_windows, get_eval_windows
from core.runs.store_access import result, reusable, tee, writing
from core.runs.stream_model import folder_measures, run_dtype, streamed_lm, streamed_perplexity
from core.settings.config import RunConfig
from core.store.run_store import RunStore, RunWriter
from core.stream.pipeline import StreamedRun, prune_streamed
from core.stream.residency import largest_unit_bytes

MODEL_DIR = "model"  # the changed model, inside the run's folder


@dataclass
class StreamedStep:
    """What a streamed kind's ``record`` sees: the run's plan and writer, the skeleton
    (shapes only), the streamed result, the calibration ids and the RSS once set up (no
    weights held)."""

    plan: Plan
    writer: RunWriter
    lm: LoadedModel
    run: StreamedRun
    calib_ids: torch.Tensor
    loaded_rss: float | None
    seconds: float

    @property
    def cfg(self) -> RunConfig:
        return self.plan.cfg


# A kind's own step after streaming: write its tables, return its own metrics.
Record = Callable[[StreamedStep], dict[str, Any]]


def run_streamed(
    plan: Plan,
    store: RunStore,
    on_progress: ProgressFn | None,
    opts: RunOptions,
    record: Record,
) -> dict[str, Any]:
    """Dense baseline, the streamed change, the kind's ``record``, streamed perplexity."""
    cfg = plan.cfg
    cached = reusable(store, cfg, opts.force, opts.save_dir)
    if cached is not None:
        return cached
    with writing(store, cfg, opts.force, f"the streamed {cfg.kind} run") as writer:
        progress = tee(writer.progress, on_progress)
        report(progress, "load", 0, 1, f"opening {cfg.model.name} (streamed)")
        lm, source = streamed_lm(cfg.model)
        release_freed()
        loaded_rss = proc_status_mb("VmRSS")  # interpreter + libraries + tokenizer, no weights
        writer.write_env(environment_record(cfg.model.device))
        dense = execute_eval(dense_config(cfg.model, cfg.eval), store, progress)
        windows, data_info = get_eval_windows(lm, cfg.eval)
        calib_ids, calib_info = get_calib_windows(lm, cfg.calib)
        device = torch.device(cfg.model.device)
        start_phase(device)
        t0 = time.perf_counter()
        run = prune_streamed(
            source,
            writer.dir / MODEL_DIR,
            cfg.prune,
            calib_ids,
            device,
            run_dtype(cfg.model),
            opts.activations_on_cpu,
            progress=progress,
            planned=plan,
        )
        step = StreamedStep(plan, writer, lm, run, calib_ids, loaded_rss, time.perf_counter() - t0)
        own = record(step)
        if "prune_peak_rss_mb" in own:  # the budget holds two units on purpose (residency)
            units = 2 * largest_unit_bytes(lm.model) / 2**20
            keys = ("weight_mb", "calib_buffers_mb", "analysis_buffers_mb")
            own.update(
                phase_report(own["prune_peak_rss_mb"], loaded_rss, *(own[k] for k in keys), units)
            )
        pruned = streamed_perplexity(
            cfg.model, run.folder, windows, cfg.eval.batch_size, opts.activations_on_cpu, progress
        )
        writer.write_table(T_EVAL_WINDOWS, pruned.window_rows())
        roles = plan.roles if cfg.kind == PRUNE else None
        sparsity, qk, nonzero = folder_measures(cfg.model, run.folder, roles)
        if qk:
            writer.write_arrays(A_QK, qk)
        n_dense = dense["metrics"]["model"]["n_params"]
        metrics = {
            "dense_ppl": dense["metrics"]["ppl"],
            "dense_run": dense["run_id"],
            "ppl": pruned.ppl,
            "nll": pruned.nll,
            "n_windows": pruned.n_windows,
            "n_tokens": pruned.n_tokens,
            "eval_tokens_per_s": pruned.tokens_per_s,
            "kept_params": nonzero / n_dense,
            **sparsity,
            **own,
            "data": data_info,
            "calib": calib_info,
            "model": {**lm.adapter.describe(), **own.get("model", {})},
            "streamed": True,
            "peak_materialised_params": run.peak_materialised,
            "peak_rss_mb": peak_rss_mb(),
        }
        if opts.save_dir:
            metrics["saved_to"] = _move(run.folder, opts.save_dir)
        writer.commit(metrics)
    return result(cfg, metrics)


def _move(folder: Path, save_dir: str) -> str:
    """Move the finished model out of the run folder to ``save_dir`` (replacing it), through
    a hidden temporary name so no half-copied folder is ever visible."""
    dest = Path(save_dir).expanduser()
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.parent / f".{dest.name}.partial"
    shutil.rmtree(tmp, ignore_errors=True)
    shutil.move(str(folder), str(tmp))
    if dest.exists():
        shutil.rmtree(dest)
    tmp.rename(dest)
    return str(dest)


def streamed_kind(in_memory: KindRunner, record: Record) -> KindRunner:
    """The executor of a kind that runs ``in_memory`` unless the model is streamed."""

    def execute(
        plan: Plan, store: RunStore, progress: ProgressFn | None, opts: RunOptions
    ) -> dict[str, Any]:
        if plan.cfg.model.stream:
            return run_streamed(plan, store, progress, opts, record)
        return in_memory(plan, store, progress, opts)

    return execute
