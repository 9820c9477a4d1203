"""Charts of a calibration-sensitivity run (core.runs.sensitivity): how much each layer's kept
weights agree across calibration draws, beside what two random masks would share.

    fig = agreement_chart(layers)    # layers: layer, jaccard, jaccard_min, jaccard_floor,
                                     #         kept_again, kept_again_floor (metrics["layers"])
"""

from __future__ import annotations

import pandas as pd
import plotly.graph_objects as go

from core.figures.style import ANALYTIC, empty_figure, layout

MEASURES = {  # column -> (legend name, colour)
    "jaccard": ("Jaccard of the kept sets", "#1f77b4"),
    "kept_again": ("run's kept weights kept again", "#2ca02c"),
}


def agreement_chart(layers: pd.DataFrame, title: str = "") -> go.Figure:
    """Per decoder layer, the mean over draws of the Jaccard of the kept sets (with the
    lowest draw's as a marker) and of the fraction of the run's kept weights kept again,
    each beside its random-mask floor (dashed)."""
    if layers.empty:
        return empty_figure("no agreement recorded")
    layers = layers.sort_values("layer")
    fig = go.Figure()
    for col, (name, color) in MEASURES.items():
        fig.add_trace(
            go.Scatter(
                x=layers["layer"], y=layers[col], name=name, mode="lines+markers",
                line=dict(color=color),
            )
        )  # fmt: skip
        fig.add_trace(
            go.Scatter(
                x=layers["layer"], y=layers[f"{col}_floor"], name=f"{name}: two random masks",
                mode="lines", line=dict(**{**ANALYTIC, "color": color}),
            )
        )  # fmt: skip
    if "jaccard_min" in layers:
        fig.add_trace(
            go.Scatter(
                x=layers["layer"], y=layers["jaccard_min"], name="Jaccard, lowest draw",
                mode="markers", marker=dict(symbol="triangle-down", color=MEASURES["jaccard"][1]),
            )
        )  # fmt: skip
    fig.update_xaxes(title="decoder layer", dtick=1 if len(layers) <= 32 else None)
    fig.update_yaxes(title="agreement (1 = the same weights kept)", range=[0, 1.02])
    return layout(fig, title or "How much the kept weights depend on the calibration draw")
