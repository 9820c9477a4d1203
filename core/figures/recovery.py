"""Charts of a recovery fine-tune (the 'recover' run kind): its curve, and the perplexity
before and after recovery beside the dense model's."""

from __future__ import annotations

import math

import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from core.figures.style import LOG_AXIS, empty_figure, layout, level

LOSS_COLOR, PPL_COLOR = "#636efa", "#00cc96"


def recovery_curve(curve: pd.DataFrame, parent_ppl: float | None = None) -> go.Figure:
    """Training loss (left axis) and held-out perplexity (right, log) against the step.

    curve columns: step, train_loss (mean over the interval; NaN at step 0), heldout_ppl.
    parent_ppl: the parent's held-out perplexity, drawn as a dashed level."""
    if curve.empty:
        return empty_figure("no curve recorded")
    fig = make_subplots(specs=[[{"secondary_y": True}]])
    trained = curve[curve["train_loss"].notna()]
    series = (
        (trained, "train_loss", "training loss", LOSS_COLOR, "loss %{y:.4f}", False),
        (curve, "heldout_ppl", "held-out perplexity", PPL_COLOR, "ppl %{y:.3f}", True),
    )
    for rows, column, name, color, hover, right in series:
        fig.add_trace(
            go.Scatter(
                x=rows["step"],
                y=rows[column],
                mode="lines+markers",
                name=name,
                line=dict(color=color),
                hovertemplate=f"step %{{x}}<br>{hover}<extra></extra>",
            ),
            secondary_y=right,
        )
    if parent_ppl is not None and math.isfinite(parent_ppl):
        fig.add_trace(
            level(parent_ppl, 0, float(curve["step"].max()), "before recovery", "gray"),
            secondary_y=True,
        )
    fig.update_xaxes(title="step")
    fig.update_yaxes(title="training loss (nats)", secondary_y=False)
    fig.update_yaxes(**LOG_AXIS, title="held-out perplexity (log)", secondary_y=True)
    return layout(fig, "Recovery: training loss and held-out perplexity")


def before_after(metrics: dict) -> go.Figure:
    """Perplexity of the dense model, the pruned parent and the recovered model on the same
    evaluation windows, with their 95% intervals where stored."""
    names = [("dense", "dense_ppl"), ("before recovery", "parent_ppl"), ("after", "ppl")]
    rows = [(label, key) for label, key in names if metrics.get(key) is not None]
    if not rows:
        return empty_figure("no perplexities stored")
    y = [metrics[k] for _, k in rows]
    hi = [metrics.get(f"{k}_hi", v) - v for (_, k), v in zip(rows, y, strict=True)]
    lo = [v - metrics.get(f"{k}_lo", v) for (_, k), v in zip(rows, y, strict=True)]
    fig = go.Figure(
        go.Bar(
            x=[label for label, _ in rows],
            y=y,
            error_y=dict(type="data", array=hi, arrayminus=lo),
            marker_color=["#636efa", "#EF553B", "#00cc96"][: len(rows)],
            text=[f"{v:.3f}" for v in y],
            textposition="outside",
            hovertemplate="%{x}<br>ppl %{y:.3f}<extra></extra>",
        )
    )
    fig.update_yaxes(title="perplexity")
    return layout(fig, "Perplexity before and after recovery", height=360)
