"""The Representation dimension page's teaching views (not a page): a slider for s read through
Paper A's relation beside the nearest measured point, and the matched-budget chart."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from core import figures
from core.analysis.budget import BUDGETS
from core.analysis.teaching import budget_points, matched_summary, slice_point
from core.figures.repdim import BUDGET_AXIS
from core.store.run_store import RunRecord
from pages.common import number_table


def relation_slider(sweep: pd.DataFrame, ppl0: float, d: int) -> None:
    """Move s: d′, the parameters kept, Paper A's predicted perplexity and the measured one."""
    st.subheader("Read the relation at any s")
    s = st.slider("Slicing fraction s", 0.0, 0.9, 0.25, 0.01, key="teach_s")
    p = slice_point(sweep, ppl0, d, s)
    c = st.columns(4)
    c[0].metric("kept width d′", f"{p['d_prime']} of {d}")
    kept = p["kept_params"]
    c[1].metric(
        "parameters kept",
        f"{kept:.1%}" if kept is not None else "–",
        help="interpolated between measured sweep points (– outside them); slicing a model "
        "with tied embeddings keeps a separate head, so this can exceed 1 − s",
    )
    c[2].metric("predicted PPL", f"{p['predicted_ppl']:.2f}", help="PPL₀^{1/(1−s)}")
    if "measured_ppl" in p:
        ci = ""
        if p["measured_lo"] is not None and p["measured_hi"] is not None:
            ci = f" [{p['measured_lo']:.2f}, {p['measured_hi']:.2f}]"
        c[3].metric(
            f"measured PPL (nearest: s = {p['measured_s']:g})",
            f"{p['measured_ppl']:.2f}",
            delta=f"{p['measured_ppl'] / p['measured_predicted_ppl'] - 1:+.1%} vs predicted",
            delta_color="off",
        )
        if ci:
            st.caption(f"95% interval of the measured point{ci}.")
    st.latex(
        rf"\frac{{\ln \mathrm{{PPL}}_0}}{{\ln \mathrm{{PPL}}}} = 1 - s \;\Rightarrow\; "
        rf"\mathrm{{PPL}} = {ppl0:.2f}^{{1/(1-{s:.2f})}} = {p['predicted_ppl']:.2f}"
    )


@st.cache_data(show_spinner=False, max_entries=8)
def _points(version: tuple, _records: list[RunRecord]) -> pd.DataFrame:
    return budget_points(_records)


@st.cache_data(show_spinner=False, max_entries=32)
def _summary(version: tuple, group: object, budget: str, _df: pd.DataFrame) -> tuple:
    return matched_summary(_df, budget)


@st.cache_resource(show_spinner=False, max_entries=32)
def _chart(version: tuple, group: object, budget: str, _df: pd.DataFrame):
    """The chart, built once per store version, group and budget (shared, never mutated)."""
    return figures.budget_chart(_df, budget)


def matched_budgets(records: list[RunRecord], version: tuple) -> None:
    """Every method at equal remaining parameters (or latency), not at equal "sparsity".
    ``version``: the store's (RunStore.version), the key of the cached tables and chart."""
    st.subheader("Trade-offs at matched budgets")
    points = _points(version, records)
    if points.empty:
        st.info("No finished prune or slice run records what it keeps yet.")
        return
    sizes = points["group"].value_counts()
    if len(sizes) > 1:
        labels = {
            g: f"{points.loc[points['group'] == g, 'model'].iloc[0]} · {n} runs [{str(g)[:8]}]"
            for g, n in sizes.items()
        }
        group = st.selectbox("Runs compared", list(sizes.index), format_func=labels.get,
                             key="budget_group")  # fmt: skip
        points = points[points["group"] == group]
    budget = st.radio(
        "Budget", BUDGETS, horizontal=True, key="budget_axis", format_func=BUDGET_AXIS.get
    )
    group = points["group"].iloc[0] if len(sizes) > 1 else None  # the cache key of `points`
    st.plotly_chart(_chart(version, group, budget, points), key="budget_chart")
    wide, wins = _summary(version, group, budget, points)
    if not wide.empty:
        number_table(wide, "budget_table", "%.2f")
    st.caption(
        "Each run is placed by the non-zero parameters it keeps (embeddings and head "
        "included) or its measured forward latency, both relative to the dense model; the "
        "table reads every series at common levels by interpolating ln PPL between its two "
        "nearest runs, never beyond them. A method wins a level only when its 95% interval "
        "clears every other's; runs without intervals (one calibration seed) decide nothing."
        + (f" Winners: {wins}." if wins else "")
    )
