"""Paper B's gradient-descent trajectories: loss, gradient norm, Lipschitz estimate and PL
ratio against the step."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from core.figures.style import LOG_AXIS, PALETTE, empty_figure, layout, level

# ---- Paper B: GD trajectories ---------------------------------------------------------------------
TRAJECTORY_PANELS = (
    ("loss", "loss L(M_t)"),
    ("grad_norm", "‖∇L(M_t)‖"),
    ("lipschitz_est", "Lipschitz estimate (secant)"),
    ("pl_ratio", "PL ratio ½‖∇L‖²/(L−L*)"),
)


def gd_trajectories(
    traj: pd.DataFrame,
    theory: Mapping[str, Mapping[str, float]] | None = None,
    series: str = "block",
) -> go.Figure:
    """2×2 panels (loss, gradient norm, Lipschitz estimate, PL ratio) against the GD step,
    log-y, one line per ``series`` value; ``theory`` adds labelled horizontal lines per
    panel, e.g. {"lipschitz_est": {"upper bound": 3.1}, "pl_ratio": {"μ̂": 0.2}}.

    traj columns: step, ``series`` and the panel columns present.
    """
    if traj.empty:
        return empty_figure("no GD trajectory recorded")
    fig = make_subplots(
        rows=2,
        cols=2,
        subplot_titles=[t for _, t in TRAJECTORY_PANELS],
        vertical_spacing=0.14,
        horizontal_spacing=0.1,
    )
    groups = list(traj.groupby(series, sort=False))
    for k, (col, _) in enumerate(TRAJECTORY_PANELS):
        r, c = divmod(k, 2)
        if col not in traj:
            continue
        for i, (name, g) in enumerate(groups):
            y = g[col].where(g[col] > 0)  # log axis: drop zeros / NaN
            fig.add_trace(
                go.Scatter(
                    x=g["step"],
                    y=y,
                    mode="lines",
                    name=str(name),
                    legendgroup=str(name),
                    showlegend=k == 0,
                    line=dict(color=PALETTE[i % len(PALETTE)], width=1.6),
                ),
                row=r + 1,
                col=c + 1,
            )
        steps = (float(traj["step"].min()), float(traj["step"].max()))
        for j, (label, value) in enumerate((theory or {}).get(col, {}).items()):
            if value is not None and np.isfinite(value) and value > 0:
                line = level(value, *steps, f"{label} = {value:.3g}", ["black", "gray"][j % 2])
                fig.add_trace(line, row=r + 1, col=c + 1)
        fig.update_yaxes(**LOG_AXIS, row=r + 1, col=c + 1)
        fig.update_xaxes(title="step" if r == 1 else None, row=r + 1, col=c + 1)
    return layout(fig, "Gradient descent on the attention-mask loss", height=620)
