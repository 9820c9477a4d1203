"""Paper B's gradient-descent trajectories: loss, gradient norm, Lipschitz estimate and PL
ratio against the step."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from core.figures.style import LOG_AXIS, PALETTE, axis_suffix, empty_figure, layout, level

# ---- Paper B: GD trajectories --------------------------------------------------------------------
TRAJECTORY_PANELS = (
    ("loss", "loss L(M_t)"),
    ("grad_norm", "‖∇L(M_t)‖"),
    ("lipschitz_est", "Lipschitz estimate (secant)"),
    ("pl_ratio", "PL ratio ½‖∇L‖²/(L−L*)"),
)
# Paper fractions of the 2×2 grid, row-major (what make_subplots(2, 2) gives with spacings
# 0.1 across and 0.14 down): panel k sits in column k % 2 and row k // 2, the top row first.
COLUMNS = ((0.0, 0.45), (0.55, 1.0))
ROWS = ((0.57, 1.0), (0.0, 0.43))


def _panel_axes(k: int) -> dict:
    """Axes of panel k (``xaxis``/``yaxis`` for k = 0, then ``xaxis2``...): log y, and the
    step named under the bottom row."""
    n = axis_suffix(k)
    row, col = divmod(k, 2)
    x = dict(domain=list(COLUMNS[col]), anchor=f"y{n}")
    if row == 1:
        x["title"] = dict(text="step")
    return {f"xaxis{n}": x, f"yaxis{n}": dict(domain=list(ROWS[row]), anchor=f"x{n}", **LOG_AXIS)}


def _panel_title(k: int, text: str) -> dict:
    """A panel's title above its plot, as make_subplots places it."""
    row, col = divmod(k, 2)
    return dict(
        text=text,
        x=sum(COLUMNS[col]) / 2,
        y=ROWS[row][1],
        xref="paper",
        yref="paper",
        xanchor="center",
        yanchor="bottom",
        showarrow=False,
        font=dict(size=16),
    )


def gd_trajectories(
    traj: pd.DataFrame,
    theory: Mapping[str, Mapping[str, float]] | None = None,
    series: str = "block",
) -> go.Figure:
    """2×2 panels (loss, gradient norm, Lipschitz estimate, PL ratio) against the GD step,
    log-y, one line per ``series`` value; ``theory`` adds labelled horizontal lines per
    panel, e.g. {"lipschitz_est": {"upper bound": 3.1}, "pl_ratio": {"μ̂": 0.2}}.

    traj columns: step, ``series`` and the panel columns present. Built as one dict and
    validated once: make_subplots and a validated add_trace per line cost several times
    more, on every render of the Assumption checks page (docs/benchmarks.md, "Speed of the app").
    """
    if traj.empty:
        return empty_figure("no GD trajectory recorded")
    groups = list(traj.groupby(series, sort=False))
    steps = (float(traj["step"].min()), float(traj["step"].max()))
    data: list[dict] = []
    axes: dict[str, dict] = {}
    titles = []
    for k, (col, title) in enumerate(TRAJECTORY_PANELS):
        n = axis_suffix(k)
        axes |= _panel_axes(k)
        titles.append(_panel_title(k, title))
        if col not in traj:
            continue
        for i, (name, g) in enumerate(groups):
            y = g[col].where(g[col] > 0)  # log axis: drop zeros / NaN
            data.append(
                dict(
                    type="scatter",
                    x=g["step"].to_numpy(),
                    y=y.to_numpy(),
                    mode="lines",
                    name=str(name),
                    legendgroup=str(name),
                    showlegend=k == 0,
                    line=dict(color=PALETTE[i % len(PALETTE)], width=1.6),
                    xaxis=f"x{n}",
                    yaxis=f"y{n}",
                )
            )
        for j, (label, value) in enumerate((theory or {}).get(col, {}).items()):
            if value is not None and np.isfinite(value) and value > 0:
                line = level(value, *steps, f"{label} = {value:.3g}", ["black", "gray"][j % 2])
                data.append(line | dict(xaxis=f"x{n}", yaxis=f"y{n}"))
    fig = go.Figure(dict(data=data, layout=dict(annotations=titles, **axes)))
    return layout(fig, "Gradient descent on the attention-mask loss", height=620)
