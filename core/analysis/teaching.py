"""The numbers behind the app's teaching views: one slicing fraction s read through Paper A's
relation beside the nearest measured point, and every stored run placed by what it keeps
(core.analysis.budget) for the matched-budget chart.

    point = slice_point(sweep, ppl0=52.7, d=576, s=0.3)
    # {'s', 'd_prime', 'kept_params', 'predicted_ppl', 'measured_s', 'measured_ppl', ...}
    pts = budget_points(store.list(status="done"))   # series, kept_params, latency, ppl, group
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd

from core.analysis.budget import BUDGETS, matched_table, winner
from core.analysis.relation import predicted_ppl
from core.methods.slicegpt.rotation import sliced_width
from core.names import PRUNED_KINDS, series_name
from core.store.run_store import RunRecord


def _interp(sweep: pd.DataFrame, col: str, s: float) -> float | None:
    """``col`` at s, linear between the two nearest sweep points (None outside their range)."""
    if col not in sweep or "s" not in sweep:
        return None
    ok = sweep[["s", col]].dropna().sort_values("s")
    if ok.empty or not ok["s"].iloc[0] <= s <= ok["s"].iloc[-1]:
        return None
    return float(np.interp(s, ok["s"].to_numpy(float), ok[col].to_numpy(float)))


def slice_point(
    sweep: pd.DataFrame, ppl0: float, d: int, s: float, round_to: int = 8
) -> dict[str, Any]:
    """What Paper A says at slicing fraction s and what the sweep measured nearest to it.

    d′ = ⌊(1 − s)·d⌋ rounded down to a multiple of ``round_to`` (SliceGPT's rule); the
    predicted perplexity solves ln PPL₀ / ln PPL = 1 − s (relation A1): PPL = PPL₀^{1/(1−s)}.
    ``kept_params`` (fraction of the dense model) and ``params`` are interpolated between
    measured sweep points (None outside them). The measured point is the sweep row whose s
    is nearest, with its 95% interval when the sweep has one.
    """
    out: dict[str, Any] = {
        "s": s,
        "d_prime": sliced_width(d, s, round_to) if s > 0 else d,
        "predicted_ppl": predicted_ppl(ppl0, s),
        "kept_params": 1.0 if s == 0 else _interp(sweep, "kept_params", s),
        "params": _interp(sweep, "params", s),
    }
    if "s" in sweep and "ppl" in sweep and len(sweep.dropna(subset=["s", "ppl"])):
        ok = sweep.dropna(subset=["s", "ppl"])
        row = ok.iloc[int((ok["s"] - s).abs().to_numpy().argmin())]
        out.update(
            measured_s=float(row["s"]),
            measured_ppl=float(row["ppl"]),
            measured_lo=_float(row.get("ppl_lo")),
            measured_hi=_float(row.get("ppl_hi")),
        )
        out["measured_predicted_ppl"] = predicted_ppl(ppl0, float(row["s"]))
    return out


def _float(v: Any) -> float | None:
    return float(v) if isinstance(v, int | float) and math.isfinite(v) else None


def budget_points(records: list[RunRecord]) -> pd.DataFrame:
    """Finished prune / slice runs placed by what they keep, from the index alone.

    Columns: series (method, N:M pattern, targets), group (the dense run compared with),
    model, sparsity, kept_params, latency, ppl. Runs stored before these metrics existed
    are left out."""
    rows = []
    for r in records:
        m = r.summary
        if r.kind not in PRUNED_KINDS or r.status != "done" or not _float(m.get("ppl")):
            continue
        if _float(m.get("kept_params")) is None and _float(m.get("latency")) is None:
            continue
        targets = (r.config.get("prune") or {}).get("targets")
        rows.append(
            {
                "series": series_name(r.method or r.kind, r.pattern, None, False, targets),
                "group": m.get("dense_run"),
                "model": r.model,
                "sparsity": r.sparsity,
                "kept_params": _float(m.get("kept_params")),
                "latency": _float(m.get("latency")),
                "ppl": float(m["ppl"]),
                "run_id": r.id,
            }
        )
    cols = ["series", "group", "model", "sparsity", *BUDGETS, "ppl", "run_id"]
    return pd.DataFrame(rows, columns=cols)


def matched_summary(points: pd.DataFrame, budget: str) -> tuple[pd.DataFrame, dict[float, str]]:
    """(perplexity of each series at the common budget levels, one row per level; the winner
    per level). A winner is named only when every point carries a 95% interval (ppl_lo,
    ppl_hi) and the best interval clears all others (core.analysis.budget.winner); single-seed runs
    have none, so no level is decided from point estimates."""
    table = matched_table(points, budget)
    if table.empty:
        return pd.DataFrame(), {}
    wide = table.pivot_table(index="level", columns="series", values="ppl").sort_index(
        ascending=False
    )
    with_ci = {"ppl_lo", "ppl_hi"} <= set(points) and points[["ppl_lo", "ppl_hi"]].notna().all(
        axis=None
    )
    wins = {}
    if with_ci:
        for level in wide.index:
            best = winner(table, level)
            if best is not None:
                wins[float(level)] = best
    return wide, wins
