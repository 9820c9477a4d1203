"""A sweep's curves: perplexity (and zero-shot accuracy) against sparsity per method, with
the spread over calibration seeds, from ``core.sweeps.orchestrate.sweep_table`` rows."""

from __future__ import annotations

import pandas as pd
import plotly.graph_objects as go

from core.figures.style import LOG_AXIS, empty_figure, layout, level, series_colors

DENSE = (
    "dense"  # core.sweeps.orchestrate.DENSE, the dense baseline's row (figures stay free of torch)
)


def series_label(row: pd.Series) -> str:
    """'wanda', 'sparsegpt 2:4', 'wanda owl': the method and what differs from the default."""
    parts = [str(row["method"])]
    if row["pattern"] not in ("unstructured", "-"):
        parts.append(str(row["pattern"]))
    if row["allocation"] not in ("uniform", "-"):
        parts.append(str(row["allocation"]))
    return " ".join(parts)


def _curves(table: pd.DataFrame, mean: str, std: str, ytitle: str, title: str) -> go.Figure:
    rows = table.dropna(subset=[mean])
    points = rows[rows["method"] != DENSE]
    if points.empty:
        return empty_figure("no finished point of the sweep yet")
    points = points.assign(series=points.apply(series_label, axis=1))
    # N:M points share one sparsity per pattern: a pattern is its own series, a marker
    colors = series_colors(sorted(points["series"].unique()))
    fig = go.Figure()
    for name, g in points.sort_values("sparsity").groupby("series", sort=True):
        spread = g[std].fillna(0.0) if std in g else None
        seeds = g["n_seeds"].astype(int).astype(str)
        fig.add_trace(
            go.Scatter(
                x=g["sparsity"],
                y=g[mean],
                mode="lines+markers",
                name=str(name),
                line=dict(color=colors[name]),
                error_y=dict(type="data", array=spread, visible=True)
                if spread is not None
                else None,
                customdata=seeds,
                hovertemplate="s %{x:.3f}<br>%{y:.4g} (n seeds %{customdata})<extra>"
                + str(name)
                + "</extra>",
            )
        )
    dense = rows[rows["method"] == DENSE][mean]
    if not dense.empty:
        xmax = max(float(points["sparsity"].max()), 0.05)
        fig.add_trace(level(float(dense.iloc[0]), 0.0, xmax, f"dense {dense.iloc[0]:.4g}", "gray"))
    fig.update_xaxes(title="sparsity s (fraction of targeted weights removed)")
    fig.update_yaxes(title=ytitle)
    return layout(fig, title)


def sweep_curves(table: pd.DataFrame) -> go.Figure:
    """Perplexity (log) against sparsity per (method, pattern, allocation): mean over the
    calibration seeds, error bars one sample standard deviation (none for one seed)."""
    fig = _curves(table, "ppl_mean", "ppl_std", "perplexity (log)", "Perplexity vs sparsity")
    return fig.update_yaxes(**LOG_AXIS) if fig.data else fig


def accuracy_curves(table: pd.DataFrame) -> go.Figure:
    """Mean zero-shot accuracy against sparsity, as ``sweep_curves`` draws perplexity."""
    return _curves(table, "acc_mean", "acc_std", "mean zero-shot accuracy", "Accuracy vs sparsity")
