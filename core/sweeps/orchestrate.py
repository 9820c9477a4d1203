"""Grid sweeps of any method: resolve the grid, run what the store lacks on an executor (dense
baselines first), and tabulate perplexity (and accuracy) against sparsity per method with
the spread over calibration seeds.

The table is a pure function of the stored runs (``sweep_table``), so the CLI, the app and a
re-opened sweep draw the same numbers from the same store.
"""

from __future__ import annotations

import logging
import math
import statistics
from collections.abc import Callable
from typing import Any

import pandas as pd

from core.errors import SweepError
from core.names import PRUNED_KINDS
from core.settings.config import RunConfig
from core.store.run_store import RunStore
from core.sweeps.executors import Executor
from core.sweeps.grid import GridSpec, resolve_grid

log = logging.getLogger(__name__)

# Cell states the app's live grid shows (events of ``run_sweep_grid``'s on_event).
CELL_STATES = ("cached", "queued", "done", "failed")
# Columns of the sweep table, one row per (method, pattern, allocation, sparsity).
TABLE_KEYS = ("method", "pattern", "allocation", "sparsity")
TABLE_COLUMNS = (
    *TABLE_KEYS,
    "n_seeds",
    "ppl_mean",
    "ppl_std",
    "ppl_min",
    "ppl_max",
    "acc_mean",
    "acc_std",
    "run_ids",
)
DENSE = "dense"  # the method name of the dense baseline's row
Event = Callable[[dict[str, Any]], None]


def run_sweep_grid(
    spec: GridSpec, store: RunStore, executor: Executor, on_event: Event | None = None
) -> dict[str, Any]:
    """Check the executor and every grid point (ConfigError before any work), then
    ``run_grid``; an 'auto' device resolves to where the executor's workers run."""
    executor.check()
    return run_grid(resolve_grid(spec, executor.device), store, executor, on_event)


def run_grid(
    configs: list[RunConfig], store: RunStore, executor: Executor, on_event: Event | None = None
) -> dict[str, Any]:
    """Run a resolved grid (``resolve_grid``'s configs): the dense baselines, then every point
    the store does not hold yet; return the table.

    Returns {"run_ids": grid order, "computed": n, "cached": n, "executor": name, "where":
    the executor's processes or cluster in words, "device": the runs' resolved device,
    "table": rows (TABLE_COLUMNS)}. Raises SweepError after the others finished when some
    points failed (the finished ones stay stored)."""
    emit = on_event or (lambda event: None)
    executor.check()
    done = {r.id for r in store.list(status="done")}
    todo = [c for c in configs if c.run_id not in done]
    for c in configs:
        emit({"run_id": c.run_id, "kind": c.kind, "state": "queued" if c in todo else "cached"})
    failed: dict[str, str] = {}

    def on_done(cfg: RunConfig, error: str | None) -> None:
        if error is not None:
            failed[cfg.run_id] = error
            log.warning("sweep point %s failed: %s", cfg.run_id, error)
        emit(
            {
                "run_id": cfg.run_id,
                "kind": cfg.kind,
                "state": "failed" if error else "done",
                "error": error,
            }
        )

    dense = [c for c in configs if c.kind in ("eval", "zeroshot")]
    executor.run([c for c in dense if c in todo], store, [], on_done)
    if failed:
        raise SweepError(_failure_message(failed, len(todo), "dense baseline"))
    executor.run([c for c in todo if c not in dense], store, [c.run_id for c in dense], on_done)
    if failed:
        raise SweepError(_failure_message(failed, len(todo), "point"))
    runs = [{"config": c.to_dict(), "metrics": store.load(c.run_id).metrics} for c in configs]
    return {
        "run_ids": [c.run_id for c in configs],
        "computed": len(todo),
        "cached": len(configs) - len(todo),
        "executor": executor.name,
        "where": executor.where,
        "device": configs[0].model.device,
        "table": table_records(sweep_table(runs)),
    }


def _failure_message(failed: dict[str, str], n: int, what: str) -> str:
    first = next(iter(failed.items()))
    return (
        f"{len(failed)} of {n} runs failed ({what}s); the others are stored. First: run "
        f"{first[0]}: {first[1]}"
    )


def _spread(values: list[float]) -> tuple[float | None, float | None]:
    vals = [v for v in values if v is not None and not math.isnan(v)]
    if not vals:
        return None, None
    return statistics.fmean(vals), (statistics.stdev(vals) if len(vals) > 1 else None)


def sweep_table(runs: list[dict[str, Any]]) -> pd.DataFrame:
    """Perplexity (and mean zero-shot accuracy) against sparsity per (method, pattern,
    allocation): mean, sample standard deviation (NaN for one seed), min and max over the
    calibration seeds. ``runs``: [{"config": RunConfig.to_dict(), "metrics": {...}}] of a
    sweep's prune/slice runs and its dense baselines (eval: the 'dense' row at s = 0, with
    the dense accuracy of a dense zeroshot run when present)."""
    groups: dict[tuple, list[dict[str, Any]]] = {}
    dense_acc = [r["metrics"].get("mean_acc") for r in runs if r["config"]["kind"] == "zeroshot"]
    for r in runs:
        cfg, m = r["config"], r["metrics"]
        if cfg["kind"] == "eval":
            key = (DENSE, "-", "-", 0.0)
            m = {**m, "mean_acc": dense_acc[0] if dense_acc else None}
        elif cfg["kind"] in PRUNED_KINDS:
            p = cfg["prune"]
            key = (p["method"], p["pattern"], p["allocation"], float(p["sparsity"]))
        else:
            continue
        groups.setdefault(key, []).append({"id": _run_id(cfg), **m})
    rows = []
    for key, members in groups.items():
        ppl = [m.get("ppl") for m in members]
        ppl_mean, ppl_std = _spread(ppl)
        acc_mean, acc_std = _spread([m.get("mean_acc") for m in members])
        finite = [v for v in ppl if v is not None]
        rows.append(
            {
                **dict(zip(TABLE_KEYS, key, strict=True)),
                "n_seeds": len(members),
                "ppl_mean": ppl_mean,
                "ppl_std": ppl_std,
                "ppl_min": min(finite, default=None),
                "ppl_max": max(finite, default=None),
                "acc_mean": acc_mean,
                "acc_std": acc_std,
                "run_ids": ",".join(m["id"] for m in members),
            }
        )
    df = pd.DataFrame(rows, columns=list(TABLE_COLUMNS))
    order = df["method"].ne(DENSE)  # the dense row first, then by method and sparsity
    return (
        df.assign(_o=order)
        .sort_values(["_o", "method", "pattern", "allocation", "sparsity"])
        .drop(columns="_o")
        .reset_index(drop=True)
    )


def table_records(df: pd.DataFrame) -> list[dict[str, Any]]:
    """Rows as plain dicts, missing values (NaN) as None (JSON-safe)."""
    return df.astype(object).where(df.notna(), None).to_dict(orient="records")


def _run_id(cfg: dict[str, Any]) -> str:
    return RunConfig.from_dict(cfg).run_id


def table_lines(rows: list[dict[str, Any]]) -> list[str]:
    """The sweep table as text: ppl mean ± std (n seeds), accuracy where measured."""
    has_acc = any(r.get("acc_mean") is not None for r in rows)
    head = f"{'method':<14}{'pattern':<14}{'alloc':<9}{'s':>6}{'n':>4}{'ppl':>24}"
    lines = [head + (f"{'mean acc':>20}" if has_acc else "")]

    def pm(mean, std, fmt: str) -> str:
        if mean is None:
            return "-"
        return f"{mean:{fmt}}" + (f" ± {std:{fmt}}" if std is not None else "")

    for r in rows:
        line = (
            f"{r['method']:<14}{r['pattern']:<14}{r['allocation']:<9}{r['sparsity']:>6.3g}"
            f"{r['n_seeds']:>4}{pm(r['ppl_mean'], r['ppl_std'], '.4f'):>24}"
        )
        if has_acc:
            line += f"{pm(r['acc_mean'], r['acc_std'], '.4f'):>20}"
        lines.append(line)
    return lines
