"""The Representation dimension page's views (not a page): a sweep's joint test of (A1), local
first order and κ against fit range first, then its candidate laws with their out-of-sample
errors and paired differences, each method predicted from the others, a slider for s read
through Paper A's relation beside the nearest measured point, the matched-budget chart, the
structured methods against parameters removed and against the dimension with the verdict of
which predicts ln PPL, and the relation before and after recovery fine-tuning."""

from __future__ import annotations

import math
from typing import Any

import pandas as pd
import streamlit as st

from core import figures
from core.analysis.after_recovery import (
    FIT_COLUMNS,
    POINT_COLUMNS,
    before_after_curves,
    recovered_groups,
    recovered_pairs,
    recovered_relation,
)
from core.analysis.budget import BUDGETS
from core.analysis.laws import PPL_TOL
from core.analysis.predictors import RULE, dimension_or_params, sentence
from core.analysis.protocol import EXTRAPOLATE_FROM, KAPPA_TOL, PRIMARY
from core.analysis.tables import structured_runs
from core.analysis.teaching import budget_points, matched_summary, slice_point
from core.analysis.verdicts import p_text
from core.api import sweep_view
from core.figures.laws import (
    ERROR_KINDS,
    difference_frame,
    kappa_range_chart,
    law_errors_chart,
    law_frame,
    laws_chart,
)
from core.figures.repdim import BUDGET_AXIS
from core.names import T_KAPPA_RANGE, T_LAW_DIFFERENCES
from core.store.run_store import Run, RunRecord, RunStore
from pages.common import number_table
from pages.links import linked

BASES = {"s_eff": "achieved s_eff = 1 − d′/d (primary)", "s": "nominal s (sensitivity)"}
SUFFIX = {"s_eff": "", "s": "_nominal"}  # the metrics' key suffix per s basis
TEACH_S = dict(min_value=0.0, max_value=0.9, value=0.25, step=0.01)  # the relation's slider
JOINT_HELP = (
    "(A1) is the nesting law ln PPL/ln PPL₀ = 1 + κ·s + κ₂·s²/(1 − s) at κ = κ₂ = 1: rejected "
    "when the Wald test's p < 0.05, with the covariance widened for few seeds "
    "(core.analysis.first_order)"
)


def _num(v: Any) -> bool:
    return isinstance(v, int | float) and math.isfinite(v)


def joint_caption(m: dict[str, Any], sfx: str = "") -> str:
    """W and p of the joint test, or why there are none."""
    p = m.get(f"joint_p{sfx}")
    if not _num(p):
        return "not computable: too few points with s > 0"
    text = f"W = {m[f'joint_w{sfx}']:.4g}, {p_text(p)} ({m[f'joint_points{sfx}']} points, s > 0)"
    if not m.get(f"joint_rejected{sfx}"):
        text += (
            f"; detects κ ± {m[f'detect_kappa{sfx}']:.3g} or κ₂ ± {m[f'detect_kappa2{sfx}']:.3g} "
            "with 80% power"
        )
    return text


def local_caption(m: dict[str, Any], sfx: str = "") -> str:
    """The local κ's interval, range and reading: shown under the metric, never cut off."""
    where = f"nominal 0 < s ≤ {m[f'local_smax{sfx}']:g}, {m[f'local_points{sfx}']} points"
    lo, hi = m.get(f"kappa_local_lo{sfx}"), m.get(f"kappa_local_hi{sfx}")
    if not (_num(lo) and _num(hi)):
        return f"not computable ({where}; the fit needs two)"
    return f"95% [{lo:.3f}, {hi:.3f}] on {where}: {m[f'first_order{sfx}']} (1 ± {KAPPA_TOL:g})"


def show_headline(run: Run, ppl0: float | None, d: int | None) -> None:
    """What tests (A1), first: the joint test and the local first order on the achieved
    s_eff, the verdict sentence, and κ against fit range (core.analysis.first_order)."""
    m = run.metrics
    if (m.get("protocol") or {}).get("name") != PRIMARY:
        st.warning(
            "This sweep was not measured under the primary protocol (docs/statistics.md): read "
            "it as a sensitivity analysis, never as the headline."
        )
    c = st.columns(4)
    c[0].metric("joint test of (A1)", m["joint"], help=JOINT_HELP)
    c[0].caption(joint_caption(m))
    kappa = m.get("kappa_local")
    c[1].metric(
        "local first-order κ",
        f"{kappa:.3f}" if _num(kappa) else "–",
        help=f"(A1) predicts κ = 1; the first order agrees when κ's 95% interval lies inside "
        f"1 ± {KAPPA_TOL:g}, departs when wholly outside (core.analysis.verdicts)",
    )
    c[1].caption(local_caption(m))
    c[2].metric("dense PPL₀", f"{ppl0:.3f}" if ppl0 else "–")
    c[3].metric("width d", d or "–")
    st.info(f"**Verdict ({BASES['s_eff']}).** {m['sentence']}")
    if T_KAPPA_RANGE in run.tables():
        st.plotly_chart(kappa_range_chart(run.table(T_KAPPA_RANGE)), key="kappa_range")
        st.caption(
            "κ of the nesting law fitted on nominal 0 < s ≤ s_max, with 95% intervals: where the "
            "law does not fit every s, κ moves with the range. A sensitivity display, not a "
            "verdict; the local first order is the range s ≤ 0.15."
        )


def show_laws(store: RunStore, run: Run, sweep: pd.DataFrame, ppl0: float, d: int) -> str:
    """The laws as descriptions of the curve: each law's fit, its parameters with intervals,
    its out-of-sample errors and their paired differences (core.analysis.law_compare), on the
    primary basis or the nominal sensitivity analysis, read through ``core.api.sweep_view`` as
    an exported notebook reads them; returns the basis shown."""
    m = run.metrics
    st.subheader("The candidate laws describe the curve (they do not test (A1))")
    basis = linked(
        st.radio, "Fit against", list(BASES), format_func=BASES.get, horizontal=True,
        key="law_basis",
    )  # fmt: skip
    if basis == "s":
        st.info(
            f"**Sensitivity ({BASES['s']}).** {m.get('sentence' + SUFFIX[basis], '–')} "
            f"Joint test: {joint_caption(m, SUFFIX[basis])}."
        )
    view = sweep_view(run.id, basis=basis, store=store)
    laws, points = view.laws, view.points
    left, right = st.columns(2)
    left.plotly_chart(figures.ppl_vs_dprime(sweep, ppl0, d), key="ppl_dprime")
    right.plotly_chart(laws_chart(laws, view.measured, ppl0), key="laws_chart")
    st.markdown("**Candidate laws** (mean |PPL_pred/PPL − 1| with 95% intervals)")
    st.dataframe(law_frame(laws), hide_index=True, key="law_table")
    if T_LAW_DIFFERENCES in run.tables():
        diffs = run.table(T_LAW_DIFFERENCES)
        st.markdown("**Paired differences of out-of-sample error** (law − other)")
        st.dataframe(
            difference_frame(diffs[diffs["basis"] == basis]), hide_index=True, key="law_diffs"
        )
    kind = linked(
        st.radio,
        "Held-out predictions",
        list(ERROR_KINDS),
        format_func=ERROR_KINDS.get,
        horizontal=True,
        key="law_error_kind",
    )
    st.plotly_chart(law_errors_chart(points, kind), key="law_errors")
    p = m.get("protocol") or {}
    st.caption(
        f"Out of sample: each s > 0 predicted by the law fitted on the others (leave one s "
        f"out), and every nominal s > {EXTRAPOLATE_FROM:g} predicted by the law fitted on "
        f"s ≤ {EXTRAPOLATE_FROM:g} (extrapolated). A law is supported when both mean errors' "
        f"95% upper bounds are at most {PPL_TOL:.0%}, contradicted when either lower bound "
        "exceeds it; it is best on a score only when its difference from every other law "
        f"excludes 0. The reach is how far (A1)'s own prediction agrees within ±{PPL_TOL:.0%} "
        "(core.analysis.verdicts). Intervals resample calibration seeds and evaluation "
        "windows, widened for few seeds (core.analysis.uncertainty)."
        + (
            f" Protocol: {p.get('n_windows')} windows of {p.get('eval_seqlen')} tokens, "
            f"calibration {p.get('calib_nsamples')} × {p.get('calib_seqlen')} tokens, "
            f"{p.get('n_seeds')} seed(s) per point; κ depends on it."
            if p
            else ""
        )
    )
    return basis


def show_held_out(held: dict[str, Any]) -> None:
    """Leave-one-method-out: each method's runs predicted from the others' (core.analysis.
    relation.method_out_of_sample)."""
    st.markdown(
        "**Each method predicted from the others** (mean |PPL_pred/PPL − 1|, 95% interval "
        f"over its runs): PPL₀^(d/d_eff) {held['exact_verdict']}, line fitted on the other "
        f"methods {held['line_verdict']} (tolerance {PPL_TOL:.0%})"
    )
    frame = pd.DataFrame(held["methods"])
    config = {c: st.column_config.NumberColumn(c, format="%.3f") for c in frame if "error" in c}
    st.dataframe(frame, hide_index=True, key="effdim_held_out", column_config=config)


def relation_slider(sweep: pd.DataFrame, ppl0: float, d: int) -> None:
    """Move s: d′, the parameters kept, Paper A's predicted perplexity and the measured one."""
    st.subheader("Read the relation at any s")
    s = linked(st.slider, "Slicing fraction s", key="teach_s", **TEACH_S)
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
        group = linked(
            st.selectbox, "Runs compared", list(sizes.index), format_func=labels.get,
            key="budget_group",
        )  # fmt: skip
        points = points[points["group"] == group]
    budget = linked(
        st.radio, "Budget", BUDGETS, horizontal=True, key="budget_axis",
        format_func=BUDGET_AXIS.get,
    )  # fmt: skip
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


@st.cache_data(show_spinner=False, max_entries=4)
def _structured(version: tuple, _store: RunStore, _records: list[RunRecord]) -> pd.DataFrame:
    return structured_runs(_store, _records)


@st.cache_data(show_spinner=False, max_entries=16)
def _verdict(version: tuple, group: object, _runs: pd.DataFrame) -> dict[str, Any]:
    return dimension_or_params(_runs)


MSE_COLUMNS = {"mse_dim": "MSE, dimension", "mse_params": "MSE, parameters"}


def dimension_or_params_view(store: RunStore, records: list[RunRecord], version: tuple) -> None:
    """SliceGPT and the structured methods at matched budgets: ln PPL against the fraction of
    parameters removed and against the representation dimension, one trace per method, and
    beside it the verdict of which predicts ln PPL across methods (core.analysis.predictors)."""
    st.subheader("Dimension or parameters, across structured methods")
    runs = _structured(version, store, records)
    if runs.empty:
        st.info(
            "No slice or structured run with an effective dimension yet: run ShortGPT, FLAP "
            "or structured Wanda (measure full) beside SliceGPT, e.g. `python -m core sweep "
            "--grid --method slicegpt,shortgpt,flap,wanda-sp --budgets 0.1,0.2,0.3 --seeds 0,1`."
        )
        return
    sizes = runs.groupby("group")["method"].nunique().sort_values(ascending=False)
    group = sizes.index[0]
    if len(sizes) > 1:
        label = {
            g: f"{runs.loc[runs['group'] == g, 'model'].iloc[0]} · {n} methods [{str(g)[:8]}]"
            for g, n in sizes.items()
        }
        group = st.selectbox("Runs compared", list(sizes.index), format_func=label.get, key="dp_g")
    res = _verdict(version, group, runs[runs["group"] == group])
    left, right = st.columns([3, 1])
    chart = figures.dimension_or_params_chart(pd.DataFrame(res["points"]))
    left.plotly_chart(chart, key="dim_or_params_chart")
    right.metric("Does the dimension predict ln PPL better?", res["verdict"])
    right.markdown(sentence(res))
    methods = pd.DataFrame(res["methods"]).rename(columns=MSE_COLUMNS)
    number_table(methods.set_index("method"), key="dim_or_params_methods", fmt="%.4g")
    st.caption(RULE)


def show_recovery(store: RunStore) -> None:
    """Perplexity against s before and after recovery of stored SliceGPT slice runs, and
    (A1)'s verdict on the recovered points beside the one-shot one
    (core.analysis.after_recovery)."""
    groups = recovered_groups(recovered_pairs(store))
    group = None
    if len(groups) > 1:
        group = st.selectbox(
            "Recovered slice runs", groups, format_func=lambda g: g.label, key="recovery_group"
        )
    rel = recovered_relation(store, group)
    if rel["group"] is None:
        st.info(rel["message"])
        return
    st.caption(
        f"{rel['group'].label}. Each point: the slice runs that were recovered (one-shot) and "
        "their recover runs, against the same dense model and evaluation windows."
    )
    frame = pd.DataFrame(before_after_curves(rel["points"]))
    st.plotly_chart(
        figures.ppl_vs_sparsity(frame, "Perplexity vs s, before and after recovery"),
        key="recovery_chart",
    )
    points = pd.DataFrame(rel["points"], columns=list(POINT_COLUMNS))
    number_table(points.set_index("s"), key="recovery_points", fmt="%.4g")
    if rel["message"]:
        st.info(rel["message"])
        return
    st.markdown(
        "**Paper A's (A1) read on each set of points** (the joint test of κ = κ₂ = 1, and the "
        "local first-order κ on nominal 0 < s ≤ 0.15 with its 95% interval against "
        f"1 ± {KAPPA_TOL:g}, core.analysis.verdicts)"
    )
    fits = pd.DataFrame(rel["fits"], columns=list(FIT_COLUMNS))
    st.dataframe(fits.drop(columns="sentence"), hide_index=True, key="recovery_fits")
    for fit in rel["fits"]:
        st.markdown(f"**{fit['fit']}**: {fit['sentence']}")
