"""The 'sweep' run kind: SliceGPT over a grid of s (each point a stored 'slice' run) and
Paper A's relations: (A1) ln PPL₀/ln PPL = 1 − s for perplexity always, by the primary
protocol's estimands (core.analysis.sweep_report: the joint test, the local first order, κ
against fit range, the laws compared out of sample) on the achieved s_eff (the headline
metrics) and on the nominal s (a sensitivity analysis: the same keys ending in
``_nominal``); (A2) for accuracy per task and averaged when tasks were asked."""

from __future__ import annotations

import math
import statistics
from typing import Any

from core.analysis.relation import accuracy_relation, predicted_ppl, relation_fit
from core.analysis.sweep_report import SweepPoint, accuracy_report, relation_report
from core.machine.environment import environment_record
from core.names import DEFAULT_DIM as EFFDIM_COLUMN
from core.names import (
    NO_PROTOCOL,
    T_ACCURACY,
    T_ACCURACY_FIT,
    T_KAPPA_RANGE,
    T_LAW_DIFFERENCES,
    T_LAW_POINTS,
    T_LAWS,
    T_SWEEP,
)
from core.progress import ProgressFn, report
from core.runs.common import RunOptions
from core.runs.plan import plan_run, relation_sweep_points
from core.runs.planned import Plan
from core.runs.slice import execute_slice
from core.runs.store_access import cached_result, result, tee
from core.settings.config import RunConfig, zeroshot_from
from core.store.run_store import RunStore

ACC_FIT_KEYS = ("kappa", "intercept", "r2", "kappa_chance", "r2_chance")
# (A1)'s report per s basis (core.analysis.sweep_report.relation_on): the joint test, the
# local first order, the nesting law's κ and κ₂, the line law's a and b, the verdict words
# and sentence, and the lists (κ against fit range, the laws, their paired differences).
INTERVAL_KEYS = (
    "basis", "joint", "joint_w", "joint_p", "joint_rejected", "joint_df", "joint_widening",
    "joint_points", "detect_kappa", "detect_kappa2", "kappa_local", "kappa_local_lo",
    "kappa_local_hi", "local_smax", "local_points", "first_order", "kappa", "kappa_lo",
    "kappa_hi", "kappa2", "kappa2_lo", "kappa2_hi", "a", "a_lo", "a_hi", "b", "b_lo", "b_hi",
    "curvature", "reach", "best_loo", "best_extrap", "sentence", "kappa_range", "laws",
    "law_differences",
)  # fmt: skip
NOMINAL = "_nominal"  # the suffix of the nominal-s sensitivity analysis's keys


def _mean_ppl(runs: list[dict[str, Any]]) -> float:
    """A point's perplexity over its calibration seeds: exp of the mean ln PPL."""
    return math.exp(sum(r["metrics"]["nll"] for r in runs) / len(runs))


def _median(runs: list[dict[str, Any]], key: str) -> float:
    return statistics.median(r["metrics"].get(key, math.nan) for r in runs)


def _sweep_row(s: float, runs: list[dict[str, Any]], ppl0: float, frow: dict, irow: dict) -> dict:
    m = runs[0]["metrics"]  # the structure (d′, parameters) is the same for every seed
    return {
        "s": s,
        "s_eff": m["s_eff"],
        "d_prime": m["d_sliced"],
        "params": m["n_params_sliced"],
        "layer_params": m["n_layer_params_sliced"],
        "kept_params": m["kept_params"],
        "ppl": frow["measured"],
        "ppl_lo": irow["ppl_lo"],
        "ppl_hi": irow["ppl_hi"],
        "predicted_ppl": predicted_ppl(ppl0, s),
        "rel_error": frow["rel_error"],
        "predicted_ppl_seff": predicted_ppl(ppl0, m["s_eff"]),
        "fit_ppl": frow.get("predicted_fit"),
        "ratio": frow.get("ratio"),
        "ratio_lo": irow["ratio_lo"],
        "ratio_hi": irow["ratio_hi"],
        # a lean sweep measures no latency: NaN, left out of the charts
        "latency_ms": _median(runs, "latency_ms"),
        "latency_ms_dense": m.get("latency_ms_dense", math.nan),
        "latency": _median(runs, "latency"),
        EFFDIM_COLUMN: statistics.mean(r["metrics"].get(EFFDIM_COLUMN, math.nan) for r in runs),
        "n_seeds": len(runs),
        "run_id": runs[0]["run_id"],
        "run_ids": ",".join(r["run_id"] for r in runs),
    }


def execute_relation_sweep(
    plan: Plan, store: RunStore, on_progress: ProgressFn | None = None, force: bool = False
) -> dict[str, Any]:
    """Run a planned 'sweep': every (s, seed) slice run, each a run of its own planned on the
    sweep's geometry, then (A1) fitted on the seeds' mean perplexities with bootstrap
    intervals over windows and seeds (core.analysis.sweep_report)."""
    cfg = plan.cfg
    cached = cached_result(store, cfg, force)
    if cached is not None:
        return cached
    zeroshot = zeroshot_from(cfg.extra_value("zeroshot"))
    with store.begin(cfg, force) as writer:
        progress = tee(writer.progress, on_progress)
        writer.write_env(environment_record(cfg.model.device))
        grid = relation_sweep_points(cfg)
        total, done = sum(len(configs) for _, configs in grid), 0
        points: list[tuple[float, list[dict[str, Any]]]] = []
        for s, configs in grid:
            runs = []
            for point in configs:
                report(progress, "sweep", done, total, f"s = {s:g}, seed {point.calib.seed}")
                point_plan = plan_run(point, plan.geo)
                runs.append(execute_slice(point_plan, store, progress, RunOptions(force=force)))
                done += 1
            points.append((s, runs))
        report(progress, "sweep", total, total)
        first = points[0][1][0]["metrics"]
        ppl0, d = first["dense_ppl"], first["d"]
        fit = relation_fit([s for s, _ in points], [_mean_ppl(r) for _, r in points], ppl0, d=d)
        spans = [
            SweepPoint(s, runs[0]["metrics"]["s_eff"], tuple(r["run_id"] for r in runs))
            for s, runs in points
        ]
        rep = relation_report(store, spans, first["dense_run"])
        primary = rep["primary"]
        rows = [
            _sweep_row(s, runs, ppl0, frow, irow)
            for (s, runs), frow, irow in zip(points, fit["rows"], rep["points"], strict=True)
        ]
        writer.write_table(T_SWEEP, rows)
        tables, relation = relation_record(rep)
        for name, table in tables.items():
            writer.write_table(name, table)
        metrics = {
            "ppl0": ppl0,
            "d": d,
            **relation,
            "r2": fit["r2"],
            "protocol": protocol(cfg, rep["n_seeds"], primary["n_windows"]),
            "n_points": len(rows),
            "n_seeds": rep["n_seeds"],
            "n_windows": primary["n_windows"],
            "params_dense": first["n_params_dense"],
            "data": first["data"],
        }
        if zeroshot is not None:
            acc_rows, fit_rows = accuracy_tables(store, points, d, zeroshot.tasks)
            kappas = _accuracy_intervals(store, spans, first, zeroshot.tasks)
            for row in fit_rows:
                row.update(kappas.get(row["task"], {}))
            writer.write_table(T_ACCURACY, acc_rows)
            writer.write_table(T_ACCURACY_FIT, fit_rows)
            mean = next(r for r in fit_rows if r["task"] == "mean")
            metrics.update({f"acc_fit_{k}": mean[k] for k in ACC_FIT_KEYS})
            metrics["acc_verdicts"] = {t: kappas[t]["kappa_verdict"] for t in kappas}
        writer.commit(metrics)
    return result(cfg, metrics)


def relation_record(rep: dict[str, Any]) -> tuple[dict[str, list], dict[str, Any]]:
    """(tables, metrics) a sweep stores of core.analysis.sweep_report's report: the laws,
    their points and paired differences and κ against fit range of both s bases, and the
    metrics of the primary basis (s_eff) beside the nominal one's (``NOMINAL`` suffix)."""
    primary, nominal = rep["primary"], rep["nominal"]
    tables = {
        name: primary[name] + nominal[name]
        for name in (T_LAWS, T_LAW_POINTS, T_KAPPA_RANGE, T_LAW_DIFFERENCES)
    }
    metrics = {
        **{k: primary[k] for k in INTERVAL_KEYS},
        **{f"{k}{NOMINAL}": nominal[k] for k in INTERVAL_KEYS},
        "points": rep["points"],
    }
    return tables, metrics


def protocol(cfg: RunConfig, n_seeds: int, n_windows: int) -> dict[str, Any]:
    """The protocol the relation was measured under, printed beside it: κ moves with the
    evaluation window and the calibration size, so a verdict is a verdict on this protocol;
    only ``name`` = primary (core.analysis.protocol) is the headline, any other protocol is a
    sensitivity analysis."""
    calib = cfg.calib
    return {
        "name": cfg.extra_value("protocol") or NO_PROTOCOL,
        "eval_seqlen": cfg.eval.seqlen,
        "n_windows": n_windows,
        "calib_nsamples": None if calib is None else calib.nsamples,
        "calib_seqlen": None if calib is None else calib.seqlen,
        "n_seeds": n_seeds,
    }


def _accuracy_intervals(
    store: RunStore, spans: list[SweepPoint], first: dict[str, Any], tasks: tuple[str, ...]
) -> dict[str, dict[str, Any]]:
    """task -> κ of (A2) with its interval over items and seeds (not for the mean of tasks),
    from one ``accuracy_report`` over every task."""
    rows = accuracy_report(
        store, spans, first["dense_zeroshot_run"], [p.run_ids for p in spans], tasks
    )
    keys = ("kappa_lo", "kappa_hi", "loo_error", "loo_error_lo", "loo_error_hi", "verdict")
    return {
        row["task"]: {("kappa_verdict" if k == "verdict" else k): row[k] for k in keys}
        for row in rows
    }


def accuracy_tables(
    store: RunStore,
    points: list[tuple[float, list[dict[str, Any]]]],
    d: int,
    tasks: tuple[str, ...],
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Accuracy per (s, task) with the dense point first (the first seed's), and the (A2)
    point fits per task and for the mean over tasks (core.analysis.relation.accuracy_relation)."""
    pruned = [(s, runs[0]["metrics"]) for s, runs in points if s > 0]
    first = points[0][1][0]["metrics"]
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
