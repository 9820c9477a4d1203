"""Charts of stored runs: perplexity against sparsity, per-layer sparsity and error, and the
tables shaped for them."""

from __future__ import annotations

import pandas as pd
import plotly.graph_objects as go

from core.figures.style import LOG_AXIS, empty_figure, layout, level, role_color, series_colors
from core.names import series_name


# ---- perplexity vs sparsity ----------------------------------------------------------------------
def ppl_vs_sparsity(df: pd.DataFrame, title: str = "Perplexity vs sparsity") -> go.Figure:
    """One line per series over sparsity, log-y; the dense perplexity as a dashed line.

    df columns: method, sparsity, ppl; optional series (legend name; default method) and
    dense_ppl (one dashed line per distinct value, e.g. one per model/corpus).
    """
    if df.empty:
        return empty_figure("no finished runs to plot")
    df = df.assign(series=df["series"] if "series" in df else df["method"])
    fig = go.Figure()
    colors = series_colors(sorted(df["series"].unique()))
    for name, g in df.sort_values("sparsity").groupby("series", sort=True):
        fig.add_trace(
            go.Scatter(
                x=g["sparsity"],
                y=g["ppl"],
                mode="lines+markers",
                name=str(name),
                line=dict(color=colors[name]),
                hovertemplate="sparsity %{x:.3f}<br>ppl %{y:.3f}<extra>" + str(name) + "</extra>",
            )
        )
    if "dense_ppl" in df:
        xmax = max(float(df["sparsity"].max()), 0.05)
        for value in sorted(df["dense_ppl"].dropna().unique()):
            fig.add_trace(level(value, 0.0, xmax, f"dense {value:.4g}", "gray"))
    fig.update_yaxes(**LOG_AXIS, title="perplexity (log)")
    fig.update_xaxes(title="sparsity (fraction of targeted weights removed)")
    return layout(fig, title)


# ---- per-layer bars -----------------------------------------------------------------------------
MAX_BAR_LAYERS = 12  # beyond this, grouped bars get too thin: one line per role instead


def _layer_chart(layers: pd.DataFrame, value: str, title: str, ytitle: str) -> go.Figure:
    """``value`` per decoder layer and linear role: grouped bars for a few layers, lines for
    many."""
    if layers.empty or value not in layers:
        return empty_figure(f"no per-layer {value} recorded")
    bars = layers["layer"].nunique() <= MAX_BAR_LAYERS
    fig = go.Figure()
    roles = list(dict.fromkeys(layers["role"])) if "role" in layers else [None]
    for i, role in enumerate(roles):
        g = layers if role is None else layers[layers["role"] == role]
        name, color = str(role or value), role_color(str(role), i)
        if bars:
            fig.add_trace(go.Bar(x=g["layer"], y=g[value], name=name, marker_color=color))
        else:
            fig.add_trace(
                go.Scatter(
                    x=g["layer"],
                    y=g[value],
                    name=name,
                    mode="lines+markers",
                    line=dict(color=color),
                    marker=dict(size=5),
                )
            )
    fig.update_layout(barmode="group", bargap=0.15)
    fig.update_xaxes(title="decoder layer", dtick=1 if bars else None)
    fig.update_yaxes(title=ytitle)
    return layout(fig, title)


def layer_sparsity_chart(layers: pd.DataFrame) -> go.Figure:
    """Achieved sparsity per layer and linear role, on an axis from 0; the mean target as a
    dashed line.

    layers columns: layer, role, achieved_sparsity[, target_sparsity].
    """
    fig = _layer_chart(layers, "achieved_sparsity", "Sparsity per layer", "achieved sparsity")
    if layers.empty or "achieved_sparsity" not in layers:
        return fig
    top = float(layers["achieved_sparsity"].max())
    if "target_sparsity" in layers:
        target = float(layers["target_sparsity"].mean())
        top = max(top, target)
        fig.add_hline(
            y=target,
            line_dash="dash",
            line_color="gray",
            annotation_text=f"mean target {target:.2f}",
        )
    fig.update_yaxes(range=[0, min(1.0, top * 1.15 + 1e-3)])
    return fig


def layer_error_chart(layers: pd.DataFrame, log_y: bool = False) -> go.Figure:
    """Relative reconstruction error ‖(W−Ŵ)Xᵀ‖/‖WXᵀ‖ per layer and role.

    layers columns: layer, role, rel_error.
    """
    fig = _layer_chart(layers, "rel_error", "Reconstruction error per layer", "relative error")
    if log_y:
        fig.update_yaxes(**LOG_AXIS, title="relative error (log)")
    return fig


# ---- tables shaped for the charts ----------------------------------------------------------------
def compare_frame(runs: pd.DataFrame) -> pd.DataFrame:
    """Rows for ``ppl_vs_sparsity`` from a runs table (columns: id, kind, status, model,
    method, sparsity, pattern, ppl[, targets, achieved_sparsity, dense_ppl]); finished prunes only,
    achieved sparsity when recorded."""
    if runs.empty:
        return pd.DataFrame(columns=["run_id", "method", "sparsity", "ppl", "series"])
    done = runs[(runs["kind"] == "prune") & (runs["status"] == "done")].copy()
    many = done["model"].nunique() > 1
    if "achieved_sparsity" in done:
        done["sparsity"] = done["achieved_sparsity"].fillna(done["sparsity"])
    targets = done["targets"] if "targets" in done else [None] * len(done)
    done["series"] = [
        series_name(m, p, mo, many, t)
        for m, p, mo, t in zip(done["method"], done["pattern"], done["model"], targets, strict=True)
    ]
    cols = [c for c in ("id", "method", "sparsity", "ppl", "series", "dense_ppl") if c in done]
    return done[cols].rename(columns={"id": "run_id"}).dropna(subset=["ppl"])
