"""Pure figure builders: pandas / numpy in, ``plotly.graph_objects.Figure`` out.

No Streamlit and no torch here, so the app, the CLI and notebooks draw the same charts
(``fig.write_html(...)`` needs no browser). Every builder takes plain columns and states them.

    fig = ppl_vs_sparsity(df)            # df: method, sparsity, ppl[, series, dense_ppl]
    dens, (br, bc) = block_average(mask, max_cells=128 * 128)
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

# One colour per method, stable across charts (plotly's default qualitative palette).
METHOD_COLORS = {
    "dense": "#636efa",
    "magnitude": "#EF553B",
    "wanda": "#00cc96",
    "sparsegpt": "#ab63fa",
    "slicegpt": "#FFA15A",
    "attention-gd": "#19d3f3",
}
_PALETTE = ["#FF6692", "#B6E880", "#FF97FF", "#FECB52", "#636efa", "#EF553B"]
# Colours no method uses, for extra series (d3's category10 without its near-duplicates).
_EXTRA = ["#FF6692", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#1f77b4", "#FECB52", "#B6E880"]
MASK_SCALE = [[0.0, "#f7f7f7"], [1.0, "#08306b"]]  # pruned (0) -> kept (1)
DIFF_SCALE = "RdBu_r"
ATTN_SCALE = "Viridis"
# Log axes with full tick labels (plotly's default labels minor ticks by their digit only).
LOG_AXIS = dict(type="log", tickformat=".3~g")


def color_of(name: str, i: int = 0) -> str:
    """The colour of a method, or of the i-th other series."""
    base = str(name).split(" ")[0]
    return METHOD_COLORS.get(base, _PALETTE[i % len(_PALETTE)])


def series_colors(names: Sequence[str]) -> dict[str, str]:
    """A colour per series: the first series of a method gets the method's colour, further
    ones (other sparsities, patterns) and unknown names take the next free palette colour."""
    out: dict[str, str] = {}
    spare = iter(_EXTRA * (1 + len(names) // len(_EXTRA)))
    for name in names:
        color = METHOD_COLORS.get(str(name).split(" ")[0])
        out[name] = color if color and color not in out.values() else next(spare)
    return out


def _layout(fig: go.Figure, title: str, height: int = 420) -> go.Figure:
    fig.update_layout(
        title=title,
        height=height,
        margin=dict(l=60, r=20, t=60, b=50),
        template="plotly_white",
    )
    return fig


# Line styles of the relations drawn beside the data: the papers' analytic forms, and our fits.
ANALYTIC = dict(dash="dash", color="gray")
FIT = dict(dash="dot", color="#FFA15A")


def curve(x, y, name: str, style: dict) -> go.Scatter:
    """A relation drawn as a line (``style``: ANALYTIC or FIT)."""
    return go.Scatter(x=x, y=y, mode="lines", name=name, line=style)


def _level(y: float, x0: float, x1: float, name: str, color: str) -> go.Scatter:
    """A dashed horizontal reference line as a trace (add_hline misplaces labels on log axes)."""
    return go.Scatter(
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
    return _layout(fig, "", height=240)


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
            fig.add_trace(_level(value, 0.0, xmax, f"dense {value:.4g}", "gray"))
    fig.update_yaxes(**LOG_AXIS, title="perplexity (log)")
    fig.update_xaxes(title="sparsity (fraction of targeted weights removed)")
    return _layout(fig, title)


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
        name, color = str(role or value), _role_color(str(role), i)
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
    return _layout(fig, title)


_ROLE_COLORS = {
    "q": "#1f77b4",
    "k": "#aec7e8",
    "v": "#ff7f0e",
    "o": "#ffbb78",
    "gate": "#2ca02c",
    "up": "#98df8a",
    "down": "#d62728",
}


def _role_color(role: str, i: int) -> str:
    return _ROLE_COLORS.get(role, _PALETTE[i % len(_PALETTE)])


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
    return _layout(fig, "Perplexity vs representation dimension")


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
        color = _EXTRA[i % len(_EXTRA)]
        label = str(part["label"].iloc[0])
        err = part.get("acc_stderr")
        fig.add_trace(go.Scatter(
            x=part["d_prime"], y=part["acc"], mode="lines+markers", name=label,
            line=dict(color=color), error_y=None if err is None else dict(array=err, width=3),
        ))  # fmt: skip
        fit = fit_of.get(task)
        if fit is not None and np.isfinite([fit.kappa, fit.intercept]).all():
            acc0 = float(part.loc[part["s"] == 0, "acc"].iloc[0])
            grid = np.linspace(float(part["d_prime"].min()), d, 50)
            y = acc0 * np.exp(fit.kappa * grid / d + fit.intercept)  # 1 − s = d′/d
            fig.add_trace(go.Scatter(x=grid, y=y, mode="lines", showlegend=False,
                                     line=dict(color=color, dash="dot"), hoverinfo="skip"))  # fmt: skip
    fig.update_xaxes(title="kept width d′")
    fig.update_yaxes(title="accuracy", rangemode="tozero")
    return _layout(fig, "Zero-shot accuracy vs d′ (dotted: ln(acc/acc_dense) = κ(1−s) + c)")


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
    return _layout(fig, "Paper A relation (A1)")


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
    return _layout(fig, "Perplexity vs effective dimension, all methods")


DIM_KEY = re.compile(r"^(eff_?dim_)?(mean_|final_)?(pca\d+|erank|erank_sv)$")


def is_dim_key(name: str) -> bool:
    """Whether a metric / column names an effective dimension: core.repdim's pca99, pca90,
    erank, erank_sv, optionally prefixed mean_ / final_ and effdim_ (run metrics)."""
    return str(name).startswith("eff_dim") or bool(DIM_KEY.match(str(name)))


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
                line=dict(color=_PALETTE[i % len(_PALETTE)]),
            )
        )
    fig.update_xaxes(title=xcol)
    fig.update_yaxes(title="dimension")
    return _layout(fig, "Effective dimension of the residual stream per layer", height=360)


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
            z=dens,
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
    return _layout(fig, f"{title}: {kept:.1%} kept{tiled}", height=380)


# ---- attention ------------------------------------------------------------------------------------
def _token_axis(tokens: Sequence[str], max_ticks: int = 48) -> dict:
    """Tick values/labels at token positions (numeric axis, so repeated tokens stay apart)."""
    step = max(1, math.ceil(len(tokens) / max_ticks))
    idx = list(range(0, len(tokens), step))
    return dict(tickmode="array", tickvals=idx, ticktext=[tokens[i] for i in idx], tickangle=-60)


def _causal_nan(P: np.ndarray) -> np.ndarray:
    out = np.array(P, dtype=float)
    out[np.triu_indices_from(out, k=1)] = np.nan  # keys after the query: not attended
    return out


def attention_heatmaps(
    dense: np.ndarray,
    pruned: np.ndarray,
    tokens: Sequence[str],
    title: str = "",
    causal: bool = True,
) -> go.Figure:
    """Dense, pruned and pruned − dense attention of one head side by side (L, L each).

    Rows are queries, columns keys; tokens label both axes. Entries above the diagonal are
    blank for causal attention.
    """
    prep = _causal_nan if causal else (lambda p: np.asarray(p, dtype=float))
    d, p = prep(dense), prep(pruned)
    diff = p - d
    vmax = float(np.nanmax([np.nanmax(d), np.nanmax(p)]))
    dmax = float(np.nanmax(np.abs(diff))) or 1e-12
    fig = make_subplots(
        rows=1,
        cols=3,
        horizontal_spacing=0.09,
        subplot_titles=("dense", "pruned Q/K", "pruned − dense"),
    )
    pos = list(range(len(tokens)))
    hover = "query %{y}<br>key %{x}<br>%{z:.4f}<extra></extra>"
    for col, z, scale, zmin, zmax, cbx in (
        (1, d, ATTN_SCALE, 0.0, vmax, 0.615),
        (2, p, ATTN_SCALE, 0.0, vmax, None),
        (3, diff, DIFF_SCALE, -dmax, dmax, 1.0),
    ):
        fig.add_trace(
            go.Heatmap(
                z=z,
                x=pos,
                y=pos,
                colorscale=scale,
                zmin=zmin,
                zmax=zmax,
                hovertemplate=hover,
                showscale=cbx is not None,
                colorbar=dict(x=cbx, len=0.9, thickness=12) if cbx else None,
            ),
            row=1,
            col=col,
        )
        fig.update_xaxes(**_token_axis(tokens), row=1, col=col)
        fig.update_yaxes(**_token_axis(tokens), autorange="reversed", row=1, col=col)
    fig.update_yaxes(tickangle=0)
    return _layout(fig, title, height=460)


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
    return _layout(fig, "Attention approximation error per head", height=380)


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
                    line=dict(color=_PALETTE[i % len(_PALETTE)], width=1.6),
                ),
                row=r + 1,
                col=c + 1,
            )
        steps = (float(traj["step"].min()), float(traj["step"].max()))
        for j, (label, value) in enumerate((theory or {}).get(col, {}).items()):
            if value is not None and np.isfinite(value) and value > 0:
                line = _level(value, *steps, f"{label} = {value:.3g}", ["black", "gray"][j % 2])
                fig.add_trace(line, row=r + 1, col=c + 1)
        fig.update_yaxes(**LOG_AXIS, row=r + 1, col=c + 1)
        fig.update_xaxes(title="step" if r == 1 else None, row=r + 1, col=c + 1)
    return _layout(fig, "Gradient descent on the attention-mask loss", height=620)


# ---- tables shaped for the charts -------------------------------------------------------------------
def series_name(
    method: str,
    pattern: str | None,
    model: str | None,
    many_models: bool,
    targets: str | None = None,
) -> str:
    """Legend name of a run: the method, its N:M pattern when structured, the linears it
    pruned when not all of them, and the model when several are mixed."""
    name = method or "?"
    if isinstance(pattern, str) and pattern != "unstructured":
        name += f" {pattern}"
    if isinstance(targets, str) and targets != "all":
        name += f" [{targets}]"
    if many_models and model:
        name += f" ({model})"
    return name


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
