"""Paper A's (A1) on a sweep: the nesting law's κ against its fit range
(core.analysis.first_order), each candidate law's fitted curve beside the measured perplexity
(core.analysis.laws), what each predicts for points it was not fitted on, and the laws table
and their paired differences as the page shows them."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from core.analysis.laws import BY_NAME, PARAMS, law_curve
from core.analysis.protocol import KAPPA_TOL
from core.figures.style import EXTRA, LOG_AXIS, color_of, empty_figure, layout

LAW_COLORS = dict(zip(BY_NAME, EXTRA, strict=False))
PARAM_LABELS = {"a": "a", "b": "b", "kappa": "κ", "kappa2": "κ₂"}
ERROR_KINDS = {"loo": "leave-one-s-out", "extrap": "extrapolated"}
BASIS_NAMES = {"s_eff": "achieved s_eff (primary)", "s": "nominal s (sensitivity)"}


def kappa_range_chart(rows: pd.DataFrame, tol: float = KAPPA_TOL) -> go.Figure:
    """κ of the nesting law fitted on nominal 0 < s ≤ s_max against s_max, with 95% error
    bars, one series per s basis (the primary first, solid), beside (A1)'s κ = 1 and the band
    1 ± tol the local first order is read against.

    rows: the 'kappa_range' table (basis, s_max, n_points, kappa, kappa_lo, kappa_hi); ranges
    whose κ could not be fitted (fewer than two points) are left out."""
    shown = rows.dropna(subset=["kappa"]) if "kappa" in rows else rows.iloc[0:0]
    if shown.empty:
        return empty_figure("no fit range holds two points: κ cannot be fitted")
    fig = go.Figure()
    x_max = float(shown["s_max"].max())
    fig.add_hrect(y0=1 - tol, y1=1 + tol, fillcolor="gray", opacity=0.12, line_width=0)
    fig.add_hline(y=1.0, line=dict(color="gray", dash="dash"))
    bases = [b for b in BASIS_NAMES if b in set(shown.get("basis", ["s_eff"]))]
    for i, basis in enumerate(bases or [None]):
        g = shown if basis is None else shown[shown["basis"] == basis]
        g = g.sort_values("s_max")
        fig.add_trace(
            go.Scatter(
                x=g["s_max"],
                y=g["kappa"],
                mode="lines+markers",
                name=BASIS_NAMES.get(basis, "κ"),
                line=dict(color=EXTRA[i], dash="solid" if i == 0 else "dot"),
                error_y=dict(
                    array=g["kappa_hi"] - g["kappa"], arrayminus=g["kappa"] - g["kappa_lo"], width=3
                ),
                customdata=g["n_points"],
                hovertemplate="s ≤ %{x}: κ = %{y:.3f} (%{customdata} points)<extra></extra>",
            )
        )
    fig.update_xaxes(title="fit range: nominal 0 < s ≤ s_max", range=[0, x_max * 1.05])
    fig.update_yaxes(title="κ (first-order slope; (A1): 1)")
    return layout(fig, f"κ against fit range (band: 1 ± {tol:g})")


def laws_chart(laws: pd.DataFrame, points: pd.DataFrame, ppl0: float) -> go.Figure:
    """Measured perplexity against s (95% error bars where ppl_lo / ppl_hi are given) and
    every law's curve fitted on all points, log-y.

    laws: rows of one basis of the 'laws' table (law, formula and the parameter columns);
    points: s, ppl[, ppl_lo, ppl_hi] (the sweep table, or any law's rows of 'law_points')."""
    if laws.empty or points.empty:
        return empty_figure("no laws scored for this sweep")
    points = points.sort_values("s")
    grid = np.linspace(0.0, float(points["s"].max()), 100)
    log0 = math.log(ppl0)
    fig = go.Figure()
    for row in laws.itertuples(index=False):
        params = {p: getattr(row, p) for p in PARAMS if hasattr(row, p)}
        if any(not np.isfinite(params[p]) for p in BY_NAME[row.law].params):
            continue
        y = np.exp(log0 * law_curve(row.law, params, grid))
        fig.add_trace(
            go.Scatter(
                x=grid,
                y=y,
                mode="lines",
                name=f"{row.law}: {row.formula}",
                line=dict(color=LAW_COLORS.get(row.law), dash="dot"),
            )
        )
    err = None
    if {"ppl_lo", "ppl_hi"} <= set(points.columns) and points["ppl_lo"].notna().all():
        err = dict(
            array=points["ppl_hi"] - points["ppl"],
            arrayminus=points["ppl"] - points["ppl_lo"],
            width=3,
        )
    fig.add_trace(
        go.Scatter(
            x=points["s"],
            y=points["ppl"],
            mode="markers",
            name="measured",
            error_y=err,
            marker=dict(size=10, color=color_of("slicegpt")),
        )
    )
    # 1, 2 and 5 of each decade labelled: left to itself, Plotly labels every digit here
    fig.update_yaxes(**LOG_AXIS, dtick="D2", title="perplexity (log)")
    fig.update_xaxes(title="slicing fraction s")
    return layout(fig, "Candidate laws fitted on every point")


def law_errors_chart(points: pd.DataFrame, kind: str = "extrap") -> go.Figure:
    """Each law's held-out prediction over the measured perplexity, PPL_pred/PPL (log, 1 is
    exact), with 95% error bars, against s.

    points: the 'law_points' rows of one basis (law, s and ``{kind}_error[_lo, _hi]``);
    kind: "loo" (each s predicted from the others) or "extrap" (fitted on small s)."""
    col = f"{kind}_error"
    shown = points.dropna(subset=[col]) if col in points else points.iloc[0:0]
    if shown.empty:
        return empty_figure(f"no {ERROR_KINDS.get(kind, kind)} predictions in this sweep")
    fig = go.Figure()
    for law, g in shown.groupby("law", sort=False):
        g = g.sort_values("s")
        ratio = 1 + g[col]
        fig.add_trace(
            go.Scatter(
                x=g["s"],
                y=ratio,
                mode="lines+markers",
                name=str(law),
                line=dict(color=LAW_COLORS.get(str(law))),
                error_y=dict(
                    array=g[f"{col}_hi"] - g[col], arrayminus=g[col] - g[f"{col}_lo"], width=3
                ),
            )
        )
    fig.add_hline(y=1.0, line=dict(color="gray", dash="dash"))
    fig.update_yaxes(**LOG_AXIS, title="predicted / measured perplexity (log)")
    fig.update_xaxes(title="slicing fraction s")
    return layout(fig, f"Out of sample: {ERROR_KINDS.get(kind, kind)} predictions")


def _iv(v: float, lo: float, hi: float, fmt: str) -> str:
    if v is None or not np.isfinite(v):
        return "–"
    if not (np.isfinite(lo) and np.isfinite(hi)):
        return f"{v:{fmt}}"
    return f"{v:{fmt}} [{lo:{fmt}}, {hi:{fmt}}]"


def _best(row: dict) -> str:
    """ " (best leaving one s out, extrapolated)": the scores on which a law is separated from
    every other (core.analysis.law_compare)."""
    best = [ERROR_KINDS[k] for k in ERROR_KINDS if row.get(f"best_{k}")]
    return f" (best {', '.join(best)})" if best else ""


def law_frame(laws: pd.DataFrame) -> pd.DataFrame:
    """The laws table as text: formula, parameters with 95% intervals, mean |error| in sample,
    leaving one s out and extrapolating (with intervals), verdict, best."""
    rows = []
    for r in laws.to_dict("records"):
        params = ", ".join(
            f"{PARAM_LABELS[p]} = {_iv(r[p], r[f'{p}_lo'], r[f'{p}_hi'], '.3f')}"
            for p in BY_NAME[r["law"]].params
        )
        rows.append(
            {
                "law": r["formula"],
                "parameters [95%]": params or "none",
                "in sample": _iv(r["fit_error"], math.nan, math.nan, ".1%"),
                "leave one s out": _iv(r["loo_error"], r["loo_error_lo"], r["loo_error_hi"], ".1%"),
                "extrapolated": _iv(
                    r["extrap_error"], r["extrap_error_lo"], r["extrap_error_hi"], ".1%"
                ),
                "verdict": r["verdict"] + _best(r),
            }
        )
    return pd.DataFrame(rows)


def difference_frame(rows: pd.DataFrame) -> pd.DataFrame:
    """The laws' paired differences of out-of-sample error as text: score, the two laws,
    E_law − E_other with its 95% interval, and whether it excludes 0.

    rows: the 'law_differences' rows of one basis (kind, law, other, difference[_lo, _hi],
    excludes_zero)."""
    return pd.DataFrame(
        [
            {
                "score": ERROR_KINDS.get(r["kind"], r["kind"]),
                "law − other": f"{r['law']} − {r['other']}",
                "difference [95%]": _iv(
                    r["difference"], r["difference_lo"], r["difference_hi"], "+.1%"
                ),
                "excludes 0": "yes" if r["excludes_zero"] else "no",
            }
            for r in rows.to_dict("records")
        ],
        columns=["score", "law − other", "difference [95%]", "excludes 0"],
    )
