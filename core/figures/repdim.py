"""Paper A's charts: perplexity and accuracy against the representation dimension d′, the
relation (A1) and its fit, and the effective dimension of every run."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from core.figures.style import (
    ANALYTIC,
    EXTRA,
    FIT,
    LOG_AXIS,
    PALETTE,
    color_of,
    curve,
    empty_figure,
    layout,
)
from core.names import is_dim_key


# ---- Paper A: perplexity vs representation dimension -------------------------------------------
def analytic_ppl(ppl0: float, d: float, d_prime: np.ndarray) -> np.ndarray:
    """(A1): ln PPL0 / ln PPL = 1 − s with s = 1 − d′/d, i.e. PPL = PPL0^(d/d′)."""
    return np.exp(math.log(ppl0) * d / np.asarray(d_prime, dtype=float))


def fitted_ppl(ppl0: float, d: int, d_prime: np.ndarray, a: float, b: float) -> np.ndarray:
    """The per-model fit of (A1): ln PPL0 / ln PPL = a·(1 − s) + b = a·d′/d + b."""
    ratio = a * np.asarray(d_prime, dtype=float) / d + b
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(ratio > 0, np.exp(math.log(ppl0) / ratio), np.nan)


def ppl_vs_dprime(
    sweep: pd.DataFrame, ppl0: float, d: int, a: float | None = None, b: float | None = None
) -> go.Figure:
    """Measured PPL against the kept width d′, the analytic curve PPL0^(d/d′) (dashed) and
    the fitted relation (dotted), log-y.

    sweep columns: d_prime, ppl. ppl0: dense perplexity; d: full width.
    """
    if sweep.empty:
        return empty_figure("the sweep has no points")
    sweep = sweep.sort_values("d_prime")
    lo = max(1.0, float(sweep["d_prime"].min()) * 0.95)
    grid = np.linspace(lo, d, 200)
    fig = go.Figure()
    fig.add_trace(curve(grid, analytic_ppl(ppl0, d, grid), "analytic PPL₀^(d/d′)", ANALYTIC))
    if a is not None and b is not None and np.isfinite([a, b]).all():
        fig.add_trace(
            curve(
                grid,
                fitted_ppl(ppl0, d, grid, a, b),
                f"fit: ratio = {a:.3f}·d′/d {'+' if b >= 0 else '−'} {abs(b):.3f}",
                FIT,
            )
        )
    fig.add_trace(
        go.Scatter(
            x=sweep["d_prime"],
            y=sweep["ppl"],
            mode="lines+markers",
            name="measured (SliceGPT)",
            line=dict(color=color_of("slicegpt")),
            marker=dict(size=9),
        )
    )
    fig.add_trace(
        go.Scatter(
            x=[d],
            y=[ppl0],
            mode="markers",
            name=f"dense (d = {d})",
            marker=dict(symbol="star", size=13, color=color_of("dense")),
        )
    )
    fig.update_yaxes(**LOG_AXIS, title="perplexity (log)")
    fig.update_xaxes(title="representation dimension d′ (kept residual width)")
    return layout(fig, "Perplexity vs representation dimension")


def accuracy_vs_dprime(acc: pd.DataFrame, fits: pd.DataFrame | None = None) -> go.Figure:
    """Zero-shot accuracy per task against the kept width d′ (markers, dense point at d′ = d),
    with the fitted (A2) curve acc_dense·exp(κ(1 − s) + c) dotted, and each task's chance level.

    acc columns: s, d_prime, task, label, acc[, acc_stderr, chance]; fits (optional): task,
    kappa, intercept (the accuracy_fit table of a sweep).
    """
    if acc.empty:
        return empty_figure("no accuracy measured in this sweep")
    fig = go.Figure()
    d = float(acc["d_prime"].max())
    fit_of = {} if fits is None else {r.task: r for r in fits.itertuples()}
    tasks = list(dict.fromkeys(acc["task"]))
    for i, task in enumerate(tasks):
        part = acc[acc["task"] == task].sort_values("d_prime")
        color = EXTRA[i % len(EXTRA)]
        label = str(part["label"].iloc[0])
        err = part.get("acc_stderr")
        fig.add_trace(
            go.Scatter(
                x=part["d_prime"],
                y=part["acc"],
                mode="lines+markers",
                name=label,
                line=dict(color=color),
                error_y=None if err is None else dict(array=err, width=3),
            )
        )
        fit = fit_of.get(task)
        if fit is not None and np.isfinite([fit.kappa, fit.intercept]).all():
            acc0 = float(part.loc[part["s"] == 0, "acc"].iloc[0])
            grid = np.linspace(float(part["d_prime"].min()), d, 50)
            y = acc0 * np.exp(fit.kappa * grid / d + fit.intercept)  # 1 − s = d′/d
            fig.add_trace(
                go.Scatter(
                    x=grid,
                    y=y,
                    mode="lines",
                    showlegend=False,
                    line=dict(color=color, dash="dot"),
                    hoverinfo="skip",
                )
            )
    fig.update_xaxes(title="kept width d′")
    fig.update_yaxes(title="accuracy", rangemode="tozero")
    return layout(fig, "Zero-shot accuracy vs d′ (dotted: ln(acc/acc_dense) = κ(1−s) + c)")


def ratio_vs_keep(
    sweep: pd.DataFrame,
    ppl0: float,
    a: float | None = None,
    b: float | None = None,
    s_col: str = "s_eff",
) -> go.Figure:
    """ln PPL0 / ln PPL against 1 − s: (A1) is the identity line; the fit a(1−s)+b.

    sweep columns: ppl and ``s_col`` (s or s_eff).
    """
    if sweep.empty or s_col not in sweep:
        return empty_figure(f"the sweep has no {s_col} column")
    keep = 1.0 - sweep[s_col].to_numpy(float)
    ratio = math.log(ppl0) / np.log(sweep["ppl"].to_numpy(float))
    grid = np.linspace(min(keep.min(), 1.0), 1.0, 50)
    fig = go.Figure()
    fig.add_trace(curve(grid, grid, "(A1): ratio = 1 − s", ANALYTIC))
    if a is not None and b is not None and np.isfinite([a, b]).all():
        fig.add_trace(curve(grid, a * grid + b, "fit a(1−s)+b", FIT))
    fig.add_trace(
        go.Scatter(
            x=keep,
            y=ratio,
            mode="markers",
            name="measured",
            marker=dict(size=9, color=color_of("slicegpt")),
        )
    )
    fig.update_xaxes(title=f"1 − {s_col}  (= d′/d)")
    fig.update_yaxes(title="ln PPL₀ / ln PPL")
    return layout(fig, "Paper A relation (A1)")


def effdim_scatter(
    points: pd.DataFrame,
    x: str = "eff_dim",
    ppl0: float | None = None,
    d_ref: float | None = None,
) -> go.Figure:
    """Perplexity against a representation dimension, one colour per method, log-y; with the
    dense point (ppl0, d_ref) the relation PPL = PPL0^(d_ref/x) is drawn dashed.

    points columns: method, ``x``, ppl; optional sparsity (hover). SliceGPT's points are
    diamonds joined by a line.
    """
    points = points.dropna(subset=[x, "ppl"]) if not points.empty else points
    if points.empty:
        return empty_figure("no runs with an effective dimension yet")
    fig = go.Figure()
    if ppl0 and d_ref:
        lo = min(float(points[x].min()), d_ref) * 0.9
        grid = np.linspace(lo, max(float(points[x].max()), d_ref) * 1.05, 200)
        fig.add_trace(curve(grid, analytic_ppl(ppl0, d_ref, grid), "PPL₀^(d_dense/d)", ANALYTIC))
    for i, (method, g) in enumerate(points.groupby("method", sort=True)):
        g = g.sort_values(x)
        sliced = str(method).startswith("slicegpt")
        sparsity = g["sparsity"] if "sparsity" in g else pd.Series(np.nan, index=g.index)
        hover = [f"{method}<br>s={s:.3f}" if pd.notna(s) else str(method) for s in sparsity]
        symbol = "diamond" if sliced else ("star" if method == "dense" else "circle")
        fig.add_trace(
            go.Scatter(
                x=g[x],
                y=g["ppl"],
                name=str(method),
                mode="lines+markers" if sliced else "markers",
                marker=dict(size=11, symbol=symbol, color=color_of(method, i)),
                text=hover,
                hovertemplate="%{text}<br>" + x + " %{x:.1f}<br>ppl %{y:.3f}<extra></extra>",
            )
        )
    fig.update_yaxes(**LOG_AXIS, title="perplexity (log)")
    fig.update_xaxes(title=x)
    return layout(fig, "Perplexity vs effective dimension, all methods")


def effdim_layers(effdim: pd.DataFrame, columns: Sequence[str] | None = None) -> go.Figure:
    """Per-layer effective dimension curves, one per column (default: every dimension column
    of a run's "effdim" table) plus the stream's width when recorded."""
    columns = [c for c in effdim.columns if is_dim_key(c)] if columns is None else columns
    if "width" in effdim and "width" not in columns:
        columns = [*columns, "width"]
    if effdim.empty or not columns:
        return empty_figure("no per-layer effective dimension recorded")
    xcol = "layer" if "layer" in effdim else effdim.columns[0]
    fig = go.Figure()
    for i, col in enumerate(columns):
        fig.add_trace(
            go.Scatter(
                x=effdim[xcol],
                y=effdim[col],
                mode="lines+markers",
                name=col,
                line=dict(color=PALETTE[i % len(PALETTE)]),
            )
        )
    fig.update_xaxes(title=xcol)
    fig.update_yaxes(title="dimension")
    return layout(fig, "Effective dimension of the residual stream per layer", height=360)


BUDGET_AXIS = {
    "kept_params": "non-zero parameters kept (fraction of the dense model)",
    "latency": "forward latency (fraction of the dense model's, this machine)",
}


def budget_chart(points: pd.DataFrame, budget: str = "kept_params") -> go.Figure:
    """Perplexity against what a run keeps (core.analysis.budget), one line per series, log-y, with
    95% error bars where ppl_lo / ppl_hi are given; the x axis runs from dense (1) down.

    points columns: series, ``budget``, ppl[, ppl_lo, ppl_hi].
    """
    points = points.dropna(subset=[budget, "ppl"]) if budget in points else points.iloc[0:0]
    if points.empty:
        return empty_figure(f"no runs with a measured {budget} yet")
    fig = go.Figure()
    for i, (series, g) in enumerate(points.groupby("series", sort=True)):
        g = g.sort_values(budget)
        err = None
        if {"ppl_lo", "ppl_hi"} <= set(g.columns) and g["ppl_lo"].notna().all():
            err = dict(array=g["ppl_hi"] - g["ppl"], arrayminus=g["ppl"] - g["ppl_lo"], width=3)
        fig.add_trace(
            go.Scatter(
                x=g[budget],
                y=g["ppl"],
                mode="lines+markers",
                name=str(series),
                error_y=err,
                line=dict(color=color_of(str(series), i)),
            )
        )
    fig.update_yaxes(**LOG_AXIS, title="perplexity (log)")
    fig.update_xaxes(title=BUDGET_AXIS.get(budget, budget), autorange="reversed")
    return layout(fig, "Quality at matched budgets")


DIM_OR_PARAMS_AXES = (
    ("params_removed", "fraction of decoder parameters removed"),
    ("dim_ratio", "kept representation dimension (d′/d; d_eff/d_eff,dense)"),
)


def dimension_or_params_chart(points: pd.DataFrame) -> go.Figure:
    """ln PPL of every structured method's points against the parameters removed (left) and
    against the kept representation dimension (right, reversed: pruning grows rightwards),
    one trace per method, 95% error bars (core.analysis.predictors' points).

    points columns: method, params_removed, dim_ratio, ln_ppl[, ln_ppl_lo, ln_ppl_hi].
    """
    if points.empty:
        return empty_figure("no structured runs at matched budgets yet")
    fig = make_subplots(
        rows=1,
        cols=2,
        shared_yaxes=True,
        subplot_titles=("against parameters removed", "against the representation dimension"),
        horizontal_spacing=0.08,
    )
    for i, (method, g) in enumerate(points.groupby("method", sort=True)):
        g = g.sort_values("params_removed")
        err = None
        if {"ln_ppl_lo", "ln_ppl_hi"} <= set(g) and g["ln_ppl_lo"].notna().all():
            err = dict(array=g["ln_ppl_hi"] - g["ln_ppl"], arrayminus=g["ln_ppl"] - g["ln_ppl_lo"])
        for col, (x, _) in enumerate(DIM_OR_PARAMS_AXES, start=1):
            fig.add_trace(
                go.Scatter(
                    x=g[x],
                    y=g["ln_ppl"],
                    error_y=err,
                    mode="lines+markers",
                    name=str(method),
                    legendgroup=str(method),
                    showlegend=col == 1,
                    marker=dict(size=9, color=color_of(str(method), i)),
                    line=dict(color=color_of(str(method), i)),
                ),
                row=1,
                col=col,
            )
    for col, (_, title) in enumerate(DIM_OR_PARAMS_AXES, start=1):
        fig.update_xaxes(title=title, row=1, col=col, autorange="reversed" if col == 2 else True)
    fig.update_yaxes(title="ln PPL (nats)", row=1, col=1)
    return layout(fig, "Structured methods at matched budgets: which axis lines them up?")
