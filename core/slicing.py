"""SliceGPT runs, representation-dimension sweeps and the effective-dimension comparison.

- ``run_slice``: slice a model to d′ = (1 − s)·d (SliceGPT), measure perplexity, parameter
  count and forward latency against the dense model, store it as a run of kind "slice".
- ``run_sweep``: SliceGPT over a grid of s; fit Paper A's relation ln PPL₀/ln PPL = 1 − s
  (as ratio = a·(1 − s) + b) and tabulate measured vs predicted perplexity (kind "sweep").
- ``effdim_report``: for stored runs of any method, test the relation written with the
  effective dimension of the residual stream: PPL = PPL₀^(d_eff,dense / d_eff).
"""

from __future__ import annotations

import dataclasses
import statistics
import time
from typing import Any

import torch
from torch import nn

from core.config import CalibConfig, EvalConfig, ModelSpec, PruneConfig, RunConfig, ZeroShotConfig
from core.errors import ConfigError, StoreError
from core.perplexity import evaluate_perplexity
from core.progress import ProgressFn, report
from core.store import RunStore, environment_record

DEFAULT_GRID = (0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6)
EFFDIM_KEY = "mean_pca99"  # the effective-dimension statistic the relation is tested with


@torch.no_grad()
def forward_latency_ms(model: nn.Module, seqlen: int, device, repeats: int = 5) -> float:
    """Median wall time of one forward pass on a (1, seqlen) batch, in milliseconds."""
    ids = torch.randint(0, 100, (1, seqlen), generator=torch.Generator().manual_seed(0)).to(device)
    model(input_ids=ids, use_cache=False)  # warm-up
    times = []
    for _ in range(repeats):
        if torch.device(device).type == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        model(input_ids=ids, use_cache=False)
        if torch.device(device).type == "cuda":
            torch.cuda.synchronize()
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def plan_slice(
    model: ModelSpec, prune: PruneConfig, calib: CalibConfig, eval_cfg: EvalConfig,
    zeroshot: ZeroShotConfig | None = None,
) -> RunConfig:  # fmt: skip
    from core.pipeline import plan_prune

    cfg = plan_prune(model, prune, calib, eval_cfg, zeroshot)
    if prune.pattern != "unstructured":
        raise ConfigError("slicegpt slices whole dimensions: use pattern 'unstructured'")
    return dataclasses.replace(cfg, kind="slice")


def run_slice(
    model: ModelSpec, prune: PruneConfig, calib: CalibConfig, eval_cfg: EvalConfig,
    store: RunStore, on_progress: ProgressFn | None = None, force: bool = False,
    save_dir: str | None = None, zeroshot: ZeroShotConfig | None = None,
) -> dict[str, Any]:  # fmt: skip
    """Slice with SliceGPT, evaluate against the dense model (perplexity, and zero-shot
    accuracy when asked), store as a 'slice' run."""
    from core.methods.slicegpt import save_sliced
    from core.pipeline import (
        EFFDIM_WINDOWS,
        cached_result,
        dense_zeroshot,
        get_calib_windows,
        get_eval_windows,
        memory_report,
        prepare_run,
        pruned_zeroshot,
        residual_effdim,
        start_phase,
        tee,
    )

    cfg = plan_slice(model, prune, calib, eval_cfg, zeroshot)
    cached = cached_result(store, cfg, force) if save_dir is None else None
    if cached is not None:
        return cached
    device = torch.device(cfg.model.device)
    with store.begin(cfg, force) as writer:
        progress = tee(writer.progress, on_progress)
        lm, method, dense, loaded_rss = prepare_run(cfg, store, writer, progress)
        dense_zs = dense_zeroshot(cfg, store, lm, progress)
        windows, data_info = get_eval_windows(lm, eval_cfg)
        calib_ids, calib_info = get_calib_windows(lm, calib)
        latency_dense = forward_latency_ms(lm.model, eval_cfg.seqlen, device)

        start_phase()
        t0 = time.perf_counter()
        rep = method.slice(lm.model, calib_ids, cfg.prune.sparsity, device, progress)
        slice_seconds = time.perf_counter() - t0
        memory = memory_report(lm, calib_ids, loaded_rss)

        latency_sliced = forward_latency_ms(lm.model, eval_cfg.seqlen, device)
        pruned = evaluate_perplexity(lm.model, windows, eval_cfg.batch_size, device, progress)
        eff = residual_effdim(lm, windows[:EFFDIM_WINDOWS], device, progress)
        writer.write_table("boundaries", rep.rows)
        writer.write_table("effdim", eff["rows"])
        writer.write_arrays("spectra", {"eigenvalues": rep.spectra})
        summary = rep.summary()
        summary.pop("options")
        metrics = {
            "dense_ppl": dense["metrics"]["ppl"], "dense_run": dense["run_id"],
            "ppl": pruned.ppl, "nll": pruned.nll, "n_windows": pruned.n_windows,
            "n_tokens": pruned.n_tokens, "eval_tokens_per_s": pruned.tokens_per_s,
            **summary, "prune_seconds": slice_seconds,
            "latency_ms_dense": latency_dense, "latency_ms_sliced": latency_sliced,
            **{f"effdim_{k}": v for k, v in eff["overall"].items()},
            **memory, "data": data_info, "calib": calib_info,
            "model": {**lm.adapter.describe(), "hidden_size_sliced": rep.d_sliced},
        }  # fmt: skip
        metrics.update(pruned_zeroshot(cfg, lm, dense_zs, writer, progress))
        if save_dir:
            save_sliced(lm.model, save_dir)
            lm.tokenizer.save_pretrained(save_dir)
            metrics["saved_to"] = str(save_dir)
        writer.commit(metrics)
    return {"run_id": cfg.run_id, "config": cfg.to_dict(), "metrics": metrics, "cached": False}


def run_sweep(
    model: ModelSpec, sparsities: tuple[float, ...], calib: CalibConfig, eval_cfg: EvalConfig,
    store: RunStore, options: tuple = (), on_progress: ProgressFn | None = None, force: bool = False,
    zeroshot: ZeroShotConfig | None = None,
) -> dict[str, Any]:  # fmt: skip
    """SliceGPT at every s of the grid (each a stored 'slice' run) and Paper A's relations:
    (A1) for perplexity always, (A2) for accuracy per task and averaged when ``zeroshot``."""
    from core.config import zeroshot_dict
    from core.pipeline import cached_result, resolve_model_spec, tee
    from core.repdim import predicted_ppl, relation_fit

    grid = tuple(sorted({float(s) for s in sparsities}))
    if not grid:
        raise ConfigError("the sweep needs at least one sparsity")
    base = PruneConfig("slicegpt", 0.0, options=options)
    extra = (("sparsities", grid),)
    if zeroshot is not None:
        extra += (("zeroshot", zeroshot_dict(zeroshot)),)
    cfg = RunConfig("sweep", resolve_model_spec(model), eval_cfg, calib, base, extra=extra)
    for s in grid:  # validate every point before any work
        plan_slice(model, dataclasses.replace(base, sparsity=s), calib, eval_cfg, zeroshot)
    cached = cached_result(store, cfg, force)
    if cached is not None:
        return cached
    with store.begin(cfg, force) as writer:
        progress = tee(writer.progress, on_progress)
        writer.write_env(environment_record(cfg.model.device))
        points = []
        for i, s in enumerate(grid):
            report(progress, "sweep", i, len(grid), f"s = {s:g}")
            res = run_slice(model, dataclasses.replace(base, sparsity=s), calib, eval_cfg, store,
                            progress, force, zeroshot=zeroshot)  # fmt: skip
            points.append((s, res))
        report(progress, "sweep", len(grid), len(grid))
        ppl0 = points[0][1]["metrics"]["dense_ppl"]
        d = points[0][1]["metrics"]["d"]
        fit = relation_fit(
            [s for s, _ in points], [r["metrics"]["ppl"] for _, r in points], ppl0, d=d
        )
        rows = []
        for (s, res), frow in zip(points, fit["rows"], strict=True):
            m = res["metrics"]
            rows.append({
                "s": s, "s_eff": m["s_eff"], "d_prime": m["d_sliced"], "params": m["n_params_sliced"],
                "layer_params": m["n_layer_params_sliced"], "ppl": m["ppl"],
                "predicted_ppl": predicted_ppl(ppl0, s), "rel_error": frow["rel_error"],
                "predicted_ppl_seff": predicted_ppl(ppl0, m["s_eff"]),
                "fit_ppl": frow.get("predicted_fit"), "ratio": frow.get("ratio"),
                "latency_ms": m["latency_ms_sliced"], "latency_ms_dense": m["latency_ms_dense"],
                "effdim_mean_pca99": m.get("effdim_mean_pca99"), "run_id": res["run_id"],
            })  # fmt: skip
        writer.write_table("sweep", rows)
        metrics = {"ppl0": ppl0, "d": d, "a": fit["a"], "b": fit["b"], "r2": fit["r2"],
                   "n_points": len(rows), "params_dense": points[0][1]["metrics"]["n_params_dense"],
                   "data": points[0][1]["metrics"]["data"]}  # fmt: skip
        if zeroshot is not None:
            acc_rows, fit_rows = accuracy_tables(store, points, d, zeroshot.tasks)
            writer.write_table("accuracy", acc_rows)
            writer.write_table("accuracy_fit", fit_rows)
            mean = next(r for r in fit_rows if r["task"] == "mean")
            metrics.update({f"acc_fit_{k}": mean[k] for k in
                            ("kappa", "intercept", "r2", "held", "kappa_chance", "r2_chance",
                             "held_chance")})  # fmt: skip
        writer.commit(metrics)
    return {"run_id": cfg.run_id, "config": cfg.to_dict(), "metrics": metrics, "cached": False}


def accuracy_tables(
    store: RunStore, points: list[tuple[float, dict[str, Any]]], d: int, tasks: tuple[str, ...]
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Accuracy per (s, task) with the dense point first, and the (A2) fits per task and for
    the mean over tasks (core.repdim.accuracy_relation)."""
    from core.repdim import accuracy_relation

    pruned = [(s, res["metrics"]) for s, res in points if s > 0]
    first = points[0][1]["metrics"]
    dense = store.load(first["dense_zeroshot_run"]).metrics["zeroshot"]
    series = [(0.0, d, dense)] + [(s, m["d_sliced"], m["zeroshot"]) for s, m in pruned]
    acc_rows = []
    for s, d_prime, zs in series:
        for name in tasks:
            t = zs["tasks"][name]
            acc_rows.append({"s": s, "d_prime": d_prime, "task": name, "label": t["label"],
                             "acc": t["acc"], "acc_stderr": t["acc_stderr"],
                             "acc_norm": t.get("acc_norm"), "n": t["n"], "chance": t["chance"]})  # fmt: skip
    fit_rows = []
    for name in [*tasks, "mean"]:
        if name == "mean":
            accs = [zs["mean_acc"] for _, _, zs in series]
            chance = sum(dense["tasks"][t]["chance"] for t in tasks) / len(tasks)
            label = "mean of tasks"
        else:
            accs = [zs["tasks"][name]["acc"] for _, _, zs in series]
            chance, label = dense["tasks"][name]["chance"], dense["tasks"][name]["label"]
        fit = accuracy_relation([s for s, _, _ in series[1:]], accs[1:], accs[0], chance)
        fit.pop("rows")
        fit_rows.append({"task": name, "label": label, **fit})
    return acc_rows, fit_rows


def effdim_report(
    store: RunStore, run_ids: list[str] | None = None, key: str = EFFDIM_KEY
) -> dict[str, Any]:
    """Test PPL = PPL₀^(d_eff,dense/d_eff) on stored prune/slice runs.

    Runs are grouped by (model, evaluation config); PPL₀ and d_eff,dense come from the dense
    'eval' run of the same group. Returns {"groups": [{model, data, ppl0, d_dense, a, b, r2,
    mean_abs_rel_error, rows}]}.
    """
    from core.repdim import effective_relation

    recs = [store.get(r) for r in run_ids] if run_ids else [
        r for r in store.list(status="done") if r.kind in ("prune", "slice")]  # fmt: skip
    groups: dict[str, list] = {}
    for rec in recs:
        if rec.status != "done" or rec.kind not in ("prune", "slice"):
            raise StoreError(
                f"run {rec.id} is a {rec.status} {rec.kind} run, not a finished prune/slice"
            )
        dense_id = rec.summary.get("dense_run")
        if dense_id and f"effdim_{key}" in rec.summary:
            groups.setdefault(dense_id, []).append(rec)
    out = []
    for dense_id, members in groups.items():
        try:
            dense = store.get(dense_id).summary
        except StoreError:
            continue
        if f"effdim_{key}" not in dense:
            continue
        rows = [{"run_id": r.id, "method": r.method, "sparsity": r.sparsity, "pattern": r.pattern,
                 "ppl": r.summary["ppl"], "d_eff": r.summary[f"effdim_{key}"]} for r in members]  # fmt: skip
        rel = effective_relation(dense["ppl"], dense[f"effdim_{key}"], rows)
        out.append({"model": members[0].model, "dense_run": dense_id, "ppl0": dense["ppl"],
                    "d_dense": dense[f"effdim_{key}"], "key": key, **rel})  # fmt: skip
    return {"groups": out}
