"""The 'sweep' run kind: SliceGPT over a grid of s (each point a stored 'slice' run) and
Paper A's relations: (A1) ln PPL₀/ln PPL = 1 − s, fitted as ratio = a·(1 − s) + b, for
perplexity always; (A2) for accuracy per task and averaged when tasks were asked."""

from __future__ import annotations

from typing import Any

from core.config import RunConfig, zeroshot_from
from core.environment import environment_record
from core.names import T_ACCURACY, T_ACCURACY_FIT, T_SWEEP
from core.progress import ProgressFn, report
from core.repdim import accuracy_relation, predicted_ppl, relation_fit
from core.runs.common import RunOptions
from core.runs.plan import sweep_points
from core.runs.slice import execute_slice
from core.runs.store_access import cached_result, result, tee
from core.store import RunStore

ACC_FIT_KEYS = ("kappa", "intercept", "r2", "held", "kappa_chance", "r2_chance", "held_chance")


def _sweep_row(s: float, res: dict[str, Any], ppl0: float, frow: dict[str, Any]) -> dict:
    m = res["metrics"]
    return {
        "s": s,
        "s_eff": m["s_eff"],
        "d_prime": m["d_sliced"],
        "params": m["n_params_sliced"],
        "layer_params": m["n_layer_params_sliced"],
        "ppl": m["ppl"],
        "predicted_ppl": predicted_ppl(ppl0, s),
        "rel_error": frow["rel_error"],
        "predicted_ppl_seff": predicted_ppl(ppl0, m["s_eff"]),
        "fit_ppl": frow.get("predicted_fit"),
        "ratio": frow.get("ratio"),
        "latency_ms": m["latency_ms_sliced"],
        "latency_ms_dense": m["latency_ms_dense"],
        "effdim_mean_pca99": m.get("effdim_mean_pca99"),
        "run_id": res["run_id"],
    }


def execute_sweep(
    cfg: RunConfig, store: RunStore, on_progress: ProgressFn | None = None, force: bool = False
) -> dict[str, Any]:
    """Run a planned 'sweep' config."""
    cached = cached_result(store, cfg, force)
    if cached is not None:
        return cached
    zeroshot = zeroshot_from(cfg.extra_value("zeroshot"))
    with store.begin(cfg, force) as writer:
        progress = tee(writer.progress, on_progress)
        writer.write_env(environment_record(cfg.model.device))
        points = []
        grid = sweep_points(cfg)
        for i, (s, point) in enumerate(grid):
            report(progress, "sweep", i, len(grid), f"s = {s:g}")
            points.append((s, execute_slice(point, store, progress, RunOptions(force=force))))
        report(progress, "sweep", len(grid), len(grid))
        first = points[0][1]["metrics"]
        ppl0, d = first["dense_ppl"], first["d"]
        fit = relation_fit(
            [s for s, _ in points], [r["metrics"]["ppl"] for _, r in points], ppl0, d=d
        )
        rows = [
            _sweep_row(s, res, ppl0, frow)
            for (s, res), frow in zip(points, fit["rows"], strict=True)
        ]
        writer.write_table(T_SWEEP, rows)
        metrics = {
            "ppl0": ppl0,
            "d": d,
            "a": fit["a"],
            "b": fit["b"],
            "r2": fit["r2"],
            "n_points": len(rows),
            "params_dense": first["n_params_dense"],
            "data": first["data"],
        }
        if zeroshot is not None:
            acc_rows, fit_rows = accuracy_tables(store, points, d, zeroshot.tasks)
            writer.write_table(T_ACCURACY, acc_rows)
            writer.write_table(T_ACCURACY_FIT, fit_rows)
            mean = next(r for r in fit_rows if r["task"] == "mean")
            metrics.update({f"acc_fit_{k}": mean[k] for k in ACC_FIT_KEYS})
        writer.commit(metrics)
    return result(cfg, metrics)


def accuracy_tables(
    store: RunStore, points: list[tuple[float, dict[str, Any]]], d: int, tasks: tuple[str, ...]
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Accuracy per (s, task) with the dense point first, and the (A2) fits per task and for
    the mean over tasks (core.repdim.accuracy_relation)."""
    pruned = [(s, res["metrics"]) for s, res in points if s > 0]
    first = points[0][1]["metrics"]
    dense = store.load(first["dense_zeroshot_run"]).metrics["zeroshot"]
    series = [(0.0, d, dense)] + [(s, m["d_sliced"], m["zeroshot"]) for s, m in pruned]
    acc_rows = []
    for s, d_prime, zs in series:
        for name in tasks:
            t = zs["tasks"][name]
            acc_rows.append(
                {
                    "s": s,
                    "d_prime": d_prime,
                    "task": name,
                    "label": t["label"],
                    "acc": t["acc"],
                    "acc_stderr": t["acc_stderr"],
                    "acc_norm": t.get("acc_norm"),
                    "n": t["n"],
                    "chance": t["chance"],
                }
            )
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
