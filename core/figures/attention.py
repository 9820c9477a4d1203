"""Paper B's pictures of W_Q/W_K: keep masks (block-averaged when large), dense / pruned /
difference attention of one head, and per-head attention error across methods."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from core.figures.style import (
    ATTN_SCALE,
    DIFF_SCALE,
    MASK_SCALE,
    axis_suffix,
    empty_figure,
    layout,
    series_colors,
)

# The dtype heatmap values travel in: plotly sends a NumPy array as base64 of its bytes, and
# float32 halves float64's (most of a new prompt's message) while keeping more digits than
# any hover shows.
WIRE = np.float32


# ---- masks --------------------------------------------------------------------------------------
def block_average(
    mask: np.ndarray, max_cells: int = 128 * 128
) -> tuple[np.ndarray, tuple[int, int]]:
    """Mean of a 2-D array over square tiles so the result has at most ``max_cells`` cells.

    Returns (density, (tile_rows, tile_cols)); edge tiles average what they cover, so a 0/1
    mask becomes the kept fraction per tile. A small array is returned unchanged (as float).
    """
    m = np.asarray(mask, dtype=np.float64)
    if m.ndim != 2:
        raise ValueError(f"block_average expects a 2-D array, got shape {m.shape}")
    if max_cells < 1:
        raise ValueError("max_cells must be >= 1")
    rows, cols = m.shape
    tile = 1
    while math.ceil(rows / tile) * math.ceil(cols / tile) > max_cells:
        tile += 1 if tile < 8 else tile // 4
    if tile == 1:
        return m, (1, 1)
    r_idx, c_idx = np.arange(0, rows, tile), np.arange(0, cols, tile)
    sums = np.add.reduceat(np.add.reduceat(m, r_idx, axis=0), c_idx, axis=1)
    counts = np.outer(np.diff(np.append(r_idx, rows)), np.diff(np.append(c_idx, cols)))
    return sums / counts, (tile, tile)


def mask_heatmap(
    mask: np.ndarray,
    title: str,
    max_cells: int = 128 * 128,
    row_label: str = "output row",
    col_label: str = "input column",
) -> go.Figure:
    """Kept fraction of a 0/1 keep mask (nn.Linear layout), block-averaged when large."""
    dens, (br, bc) = block_average(mask, max_cells)
    ys = np.arange(dens.shape[0]) * br
    xs = np.arange(dens.shape[1]) * bc
    tiled = f" (tiles of {br}×{bc})" if br > 1 else ""
    fig = go.Figure(
        go.Heatmap(
            z=dens.astype(WIRE),
            x=xs,
            y=ys,
            zmin=0,
            zmax=1,
            colorscale=MASK_SCALE,
            colorbar=dict(title="kept"),
            hovertemplate="row %{y}, col %{x}<br>kept %{z:.2f}<extra></extra>",
        )
    )
    fig.update_yaxes(autorange="reversed", title=row_label)
    fig.update_xaxes(title=col_label)
    kept = float(np.asarray(mask, dtype=np.float64).mean())
    return layout(fig, f"{title}: {kept:.1%} kept{tiled}", height=380)


# ---- attention -----------------------------------------------------------------------------------
def _token_axis(tokens: Sequence[str], max_ticks: int = 24) -> dict:
    """Tick values/labels at token positions (numeric axis, so repeated tokens stay apart).

    At most ``max_ticks`` labels: a panel of the side-by-side heatmaps is ~350 px wide and a
    rotated label needs ~14, so more would overlap (and each costs the browser a text
    measurement on every redraw); the hover names every cell anyway."""
    step = max(1, math.ceil(len(tokens) / max_ticks))
    idx = list(range(0, len(tokens), step))
    return dict(tickmode="array", tickvals=idx, ticktext=[tokens[i] for i in idx], tickangle=-60)


def _causal_nan(P: np.ndarray) -> np.ndarray:
    out = np.array(P, dtype=float)
    out[np.triu_indices_from(out, k=1)] = np.nan  # keys after the query: not attended
    return out


PANELS = ("dense", "pruned Q/K", "pruned − dense")
PANEL_GAP = 0.09  # paper fraction between the panels
CHAR_PX = 7.0  # width of a tick label's character at Plotly's 12 px default font, about
ROTATION = math.sin(math.radians(60))  # vertical share of a label at tickangle -60


def _label_margins(labels: Sequence[str]) -> dict:
    """Margins that fit the token labels (left: horizontal query labels; bottom: key labels
    at -60°), so the axes need no automargin: with it (the template's default) Plotly draws
    the figure, measures every label, pushes the margins and draws it again."""
    longest = max((len(t) for t in labels), default=1)
    return dict(
        l=round(min(30 + CHAR_PX * longest, 160)),
        b=round(min(30 + CHAR_PX * longest * ROTATION, 140)),
    )


def attention_heatmaps(
    dense: np.ndarray,
    pruned: np.ndarray,
    tokens: Sequence[str],
    title: str = "",
    causal: bool = True,
) -> go.Figure:
    """Dense, pruned and pruned − dense attention of one head side by side (L, L each).

    Rows are queries, columns keys; tokens label both axes. Entries above the diagonal are
    blank for causal attention. Built as one dict and validated once: make_subplots plus
    per-axis updates are slow (docs/benchmarks.md), and the page redraws this figure on every
    new prompt.
    """
    prep = _causal_nan if causal else (lambda p: np.asarray(p, dtype=float))
    d, p = prep(dense), prep(pruned)
    diff = p - d
    vmax = float(np.nanmax([np.nanmax(d), np.nanmax(p)]))
    dmax = float(np.nanmax(np.abs(diff))) or 1e-12
    pos = list(range(len(tokens)))
    ticks = _token_axis(tokens)
    width = (1 - 2 * PANEL_GAP) / 3
    data, axes, titles = [], {}, []
    for i, (z, scale, zmin, zmax, cbx) in enumerate(
        (
            (d, ATTN_SCALE, 0.0, vmax, 0.615),
            (p, ATTN_SCALE, 0.0, vmax, None),
            (diff, DIFF_SCALE, -dmax, dmax, 1.0),
        )
    ):
        n = axis_suffix(i)
        x0 = i * (width + PANEL_GAP)
        data.append(
            dict(
                type="heatmap",
                z=z.astype(WIRE),
                x=pos,
                y=pos,
                xaxis=f"x{n}",
                yaxis=f"y{n}",
                colorscale=scale,
                zmin=zmin,
                zmax=zmax,
                showscale=cbx is not None,
                hovertemplate="query %{y}<br>key %{x}<br>%{z:.4f}<extra></extra>",
                **({"colorbar": dict(x=cbx, len=0.9, thickness=12)} if cbx else {}),
            )
        )
        axes[f"xaxis{n}"] = dict(
            domain=[round(x0, 6), round(min(x0 + width, 1.0), 6)],
            anchor=f"y{n}",
            automargin=False,
            **ticks,
        )
        # the three panels share their query axis: its labels once, at the left
        axes[f"yaxis{n}"] = dict(
            domain=[0.0, 1.0],
            anchor=f"x{n}",
            autorange="reversed",
            showticklabels=i == 0,
            automargin=False,
            **{**ticks, "tickangle": 0},
        )
        titles.append(
            dict(
                text=PANELS[i],
                x=x0 + width / 2,
                y=1.0,
                xref="paper",
                yref="paper",
                xanchor="center",
                yanchor="bottom",
                showarrow=False,
            )
        )
    fig = go.Figure(dict(data=data, layout=dict(annotations=titles, **axes)))
    fig = layout(fig, title, height=460)
    fig.layout.margin.update(_label_margins(ticks["ticktext"]))
    return fig


def head_error_bars(errors: pd.DataFrame, value: str = "fro_rel") -> go.Figure:
    """Per-head attention approximation error, one bar group per head, one colour per method.

    errors columns: method (or series), head, ``value``.
    """
    if errors.empty:
        return empty_figure("no runs to compare")
    key = "series" if "series" in errors else "method"
    fig = go.Figure()
    colors = series_colors(sorted(errors[key].unique()))
    for name, g in errors.groupby(key, sort=True):
        fig.add_trace(go.Bar(x=g["head"], y=g[value], name=str(name), marker_color=colors[name]))
    fig.update_layout(barmode="group")
    fig.update_xaxes(title="query head", dtick=1)
    label = {"fro_rel": "‖P̃ − P‖_F / ‖P‖_F", "fro": "‖P̃ − P‖_F", "tv_max": "max row TV"}
    fig.update_yaxes(title=label.get(value, value))
    return layout(fig, "Attention approximation error per head", height=380)
