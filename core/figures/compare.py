"""Charts of a dense/pruned comparison on one text (the Compare page and the run report).

fig = token_nll_map(tokens, {"wanda 50%": diff})      # diff (L−1,): pruned − dense NLL
fig = layer_curves(frame)    # frame: series, layer, kl, rel_error (``layer_frame``)
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from core.figures.style import DIFF_SCALE, empty_figure, layout, series_colors

MAX_TOKEN_COLUMNS = 96  # beyond this many tokens the strip keeps the first ones


def token_nll_map(tokens: list[str], diffs: Mapping[str, np.ndarray], title: str = "") -> go.Figure:
    """The text's predicted tokens (``tokens[1:]``, one column each) coloured per run (one row
    each) by NLL_pruned − NLL_dense in nats: red where the run finds the token harder, blue where
    easier, white where both agree. ``diffs``: series name -> (L−1,) array."""
    if not diffs:
        return empty_figure("no run chosen")
    cols = tokens[1 : 1 + MAX_TOKEN_COLUMNS]
    names = list(diffs)
    z = np.stack([np.asarray(diffs[n], dtype=float)[: len(cols)] for n in names])
    bound = float(np.nanmax(np.abs(z))) or 1.0
    fig = go.Figure(
        go.Heatmap(
            z=z,
            x=list(range(1, len(cols) + 1)),
            y=names,
            text=[cols] * len(names),
            texttemplate="%{text}",
            colorscale=DIFF_SCALE,
            zmin=-bound,
            zmax=bound,
            colorbar=dict(title="Δ NLL (nats)"),
            hovertemplate="%{y}<br>token %{x}: %{text}<br>Δ NLL %{z:.3f} nats<extra></extra>",
        )
    )
    fig.update_xaxes(title="predicted token (position in the text)", showticklabels=False)
    fig.update_yaxes(automargin=True)
    return layout(fig, title or "Per-token NLL, pruned − dense", height=150 + 60 * len(names))


def layer_curves(frame: pd.DataFrame, title: str = "") -> go.Figure:
    """KL(dense ‖ pruned) of the logit lens and the relative error of each layer's output, over
    depth, one line per series. frame: series, layer, kl, rel_error."""
    if frame.empty:
        return empty_figure("no run chosen")
    fig = make_subplots(
        rows=1,
        cols=2,
        subplot_titles=("KL(dense ‖ pruned) of the logit lens", "‖H̃ − H‖ / ‖H‖ of the output"),
        horizontal_spacing=0.12,
    )
    colors = series_colors(list(dict.fromkeys(frame["series"])))
    for name, part in frame.groupby("series", sort=False):
        part = part.sort_values("layer")
        for col, value in ((1, "kl"), (2, "rel_error")):
            fig.add_trace(
                go.Scatter(
                    x=part["layer"],
                    y=part[value],
                    mode="lines+markers",
                    name=str(name),
                    legendgroup=str(name),
                    showlegend=col == 1,
                    line=dict(color=colors[name]),
                ),
                row=1,
                col=col,
            )
    fig.update_xaxes(title="layer", dtick=max(1, int(frame["layer"].max()) // 8 or 1))
    fig.update_yaxes(title="nats", row=1, col=1, rangemode="tozero")
    fig.update_yaxes(title="relative error", row=1, col=2, rangemode="tozero")
    return layout(fig, title or "Where the pruned model parts from the dense one", height=420)


def run_series(method: str | None, sparsity: float | None, pattern: str | None, run_id: str) -> str:
    """A run's short series name: 'wanda 0.5 2:4 [ab12]'."""
    s = f" {sparsity:g}" if sparsity is not None else ""
    p = f" {pattern}" if pattern and pattern != "unstructured" else ""
    return f"{method}{s}{p} [{run_id[:4]}]"


def layer_frame(results: Mapping[str, object]) -> pd.DataFrame:
    """``layer_curves``' frame from comparisons by series name (each with ``layers.kl`` and
    ``layers.rel_error`` per layer: ``core.runs.comparison.RunComparison``)."""
    rows = [
        {"series": name, "layer": i, "kl": kl, "rel_error": err}
        for name, r in results.items()
        for i, (kl, err) in enumerate(zip(r.layers.kl, r.layers.rel_error, strict=True))  # type: ignore[attr-defined]
    ]
    return pd.DataFrame(rows, columns=["series", "layer", "kl", "rel_error"])


def lens_frame(
    layers: int, dense_top: list[tuple[str, float]], runs: Mapping[str, list[tuple[str, float]]]
) -> pd.DataFrame:
    """The logit lens at the text's last position as a table: per layer, the token each model
    would predict next if it stopped there, with its probability."""
    rows = []
    for i in range(layers):
        row = {"layer": i, "dense": f"{dense_top[i][0]} ({dense_top[i][1]:.0%})"}
        for name, tops in runs.items():
            row[name] = f"{tops[i][0]} ({tops[i][1]:.0%})"
        rows.append(row)
    return pd.DataFrame(rows)
