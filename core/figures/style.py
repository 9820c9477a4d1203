"""Shared look of every chart: method colours, axes, layout, reference lines."""

from __future__ import annotations

from collections.abc import Sequence

import plotly.graph_objects as go
import plotly.io as pio

# One colour per method, stable across charts (plotly's default qualitative palette).
METHOD_COLORS = {
    "dense": "#636efa",
    "magnitude": "#EF553B",
    "wanda": "#00cc96",
    "sparsegpt": "#ab63fa",
    "slicegpt": "#FFA15A",
    "attention-gd": "#19d3f3",
    "shortgpt": "#2ca02c",
    "flap": "#d62728",
    "wanda-sp": "#9467bd",
}
PALETTE = ["#FF6692", "#B6E880", "#FF97FF", "#FECB52", "#636efa", "#EF553B"]
# Colours no method uses, for extra series (d3's category10 without its near-duplicates).
EXTRA = ["#FF6692", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#1f77b4", "#FECB52", "#B6E880"]
MASK_SCALE = [[0.0, "#f7f7f7"], [1.0, "#08306b"]]  # pruned (0) -> kept (1)
DIFF_SCALE = "RdBu_r"
ATTN_SCALE = "Viridis"
# Log axes with full tick labels (plotly's default labels minor ticks by their digit only).
LOG_AXIS = dict(type="log", tickformat=".3~g")


def color_of(name: str, i: int = 0) -> str:
    """The colour of a method, or of the i-th other series."""
    base = str(name).split(" ")[0]
    return METHOD_COLORS.get(base, PALETTE[i % len(PALETTE)])


def series_colors(names: Sequence[str]) -> dict[str, str]:
    """A colour per series: the first series of a method gets the method's colour, further
    ones (other sparsities, patterns) and unknown names take the next free palette colour."""
    out: dict[str, str] = {}
    spare = iter(EXTRA * (1 + len(names) // len(EXTRA)))
    for name in names:
        color = METHOD_COLORS.get(str(name).split(" ")[0])
        out[name] = color if color and color not in out.values() else next(spare)
    return out


TEMPLATE = pio.templates["plotly_white"]  # validated once, when plotly registers it


def layout(fig: go.Figure, title: str, height: int = 420) -> go.Figure:
    """Title, height, margins and the plotly_white template. The template is attached the
    way plotly attaches its default one (validation off): validating its ~100 properties
    again on every figure is a visible share of a page's time (docs/benchmarks.md).

    The margins leave room for tick labels and an axis title on the left and at the bottom:
    the template's automargin stays on as a safety net, but when it has to push a margin
    Plotly draws the chart twice."""
    fig.update_layout(title=title, height=height, margin=dict(l=80, r=20, t=60, b=70))
    fig.layout._validate = False
    try:
        fig.layout.template = TEMPLATE
    finally:
        fig.layout._validate = fig._validate
    return fig


def axis_suffix(k: int) -> str:
    """Plotly's name suffix of the k-th subplot's axes: "" (xaxis, x), then "2", "3"..."""
    return "" if k == 0 else str(k + 1)


# Line styles of the relations drawn beside the data: the papers' analytic forms, and our fits.
ANALYTIC = dict(dash="dash", color="gray")
FIT = dict(dash="dot", color="#FFA15A")


def curve(x, y, name: str, style: dict) -> go.Scatter:
    """A relation drawn as a line (``style``: ANALYTIC or FIT)."""
    return go.Scatter(x=x, y=y, mode="lines", name=name, line=style)


def level(y: float, x0: float, x1: float, name: str, color: str) -> dict:
    """A dashed horizontal reference line as a trace (add_hline misplaces labels on log axes);
    a plain trace dict, so a figure built as one dict validates it once with the rest."""
    return dict(
        type="scatter",
        x=[x0, x1],
        y=[y, y],
        mode="lines",
        name=name,
        line=dict(dash="dash", color=color),
        hovertemplate=f"{name}<extra></extra>",
    )


def empty_figure(message: str) -> go.Figure:
    """A blank chart carrying a message (for a builder given no rows)."""
    fig = go.Figure()
    fig.add_annotation(text=message, showarrow=False, x=0.5, y=0.5, xref="paper", yref="paper")
    fig.update_xaxes(visible=False)
    fig.update_yaxes(visible=False)
    return layout(fig, "", height=240)


ROLE_COLORS = {
    "q": "#1f77b4",
    "k": "#aec7e8",
    "v": "#ff7f0e",
    "o": "#ffbb78",
    "gate": "#2ca02c",
    "up": "#98df8a",
    "down": "#d62728",
}


def role_color(role: str, i: int) -> str:
    return ROLE_COLORS.get(role, PALETTE[i % len(PALETTE)])
