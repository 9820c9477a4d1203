"""Representation dimension (Paper A): SliceGPT sweeps led by the joint test of (A1) and its
local first order with κ against fit range, then PPL vs d′ against PPL0^(d/d′) and the
candidate laws describing the curve with their out-of-sample errors, and every stored prune
run placed by its effective dimension beside SliceGPT's points."""

from __future__ import annotations

import math
from typing import Any

import pandas as pd
import streamlit as st

from core import figures, jobs
from core.analysis.relation import effective_relation
from core.analysis.tables import effdim_points
from core.analysis.verdicts import ACCURACY_RULE
from core.api.views import full_width
from core.demo import PAGE_ATTENTION, PAGE_REPDIM
from core.errors import PruneScopeError
from core.names import DEFAULT_DIM, T_LAWS
from core.notebooks import sweep_notebook
from core.requests.commands import command_fields, defaults
from core.store.run_store import Run
from pages.common import (
    cli_hint,
    current_job,
    get_store,
    list_runs,
    open_section,
    pick_run,
    require_frame,
    show_error,
    show_job,
    start_and_follow,
    store_reads,
)
from pages.forms import (
    PRESET_FIELDS,
    corpus_name,
    draw,
    form_plan,
    method_options,
    planned_seconds,
    preset_picker,
    show_estimate,
    upload_widget,
)
from pages.links import linked
from pages.repdim_views import (
    dimension_or_params_view,
    matched_budgets,
    relation_slider,
    show_headline,
    show_held_out,
    show_laws,
    show_recovery,
)
from pages.starters import offer_run

require_frame(__file__)

SWEEP_HINT = "python -m core sweep --method slicegpt --protocol primary --model smollm2-135m"
SWEEP_COLUMNS = ["s", "s_eff", "d_prime", "params", "ppl", "predicted_ppl", "rel_error", "fit_ppl"]

store = get_store()
st.title("Representation dimension")
st.caption(
    "Paper A claims ln PPL₀ / ln PPL = 1 − s for SliceGPT, where d′ = (1 − s)·d is the kept "
    "width of the residual stream: perplexity would be set by d′ alone, PPL = PPL₀^(d/d′). "
    "A sweep slices the model at several s and tests (A1) whole (the joint test of κ = κ₂ = 1) "
    "and at first order where it lives (small s); the candidate laws then describe the curve "
    "by what they predict for points they were not fitted on."
)


# ---- starting a sweep ----------------------------------------------------------------------------
# The sweep command's fields drawn with the Prune page's widgets (pages.forms,
# core.requests.commands). The grid axes that SliceGPT has no use for (patterns, allocations,
# targets) are left out.
FIELDS = {f.name: f for f in command_fields("sweep")}
MAIN = ("model", "sparsities", "seeds", "device")
DATA = ("calib", "nsamples", "calib_seqlen", "eval", "max_windows", "seqlen", "tasks", "limit")


def key(name: str) -> str:
    return f"sweep_{name}"


def sweep_form() -> dict[str, Any] | None:
    """The SliceGPT sweep's settings; returns the field values when Start is pressed."""
    preset = preset_picker(key("preset"), [key(n) for n in PRESET_FIELDS])
    start = defaults("sweep", preset)
    values: dict[str, Any] = {"method": "slicegpt"}
    values.update(draw([FIELDS[n] for n in MAIN], start, key, cols=4))
    with st.expander("Calibration, evaluation and zero-shot data"):
        values.update(draw([FIELDS[n] for n in DATA], start, key))
        upload = upload_widget(key("upload"))
    with st.expander("Options of slicegpt"):
        values["option"] = method_options("slicegpt", key("opt"))
    with st.expander("Advanced: precision, Hub access, data split, seed"):
        advanced = [f for f in FIELDS.values() if f.advanced and f.config]
        values.update(draw(advanced, start, key))
    if not values.get("tasks"):
        values.pop("limit", None)
    show_estimate(lambda: planned_seconds(store, "sweep", values))
    if not st.button("Start the sweep", type="primary", key=key("start")):
        return None
    for corpus in ("calib", "eval"):
        values[corpus] = corpus_name(values[corpus], upload, store)
    return values


def sweep_launcher() -> None:
    job_id = current_job("sweep_job_id")
    status = jobs.job_status(store, job_id) if job_id else None
    if status is None or status.finished:
        first = status is None and not list_runs(store, kind="sweep")
        # lazy: the form (and its estimate) runs only while the expander is open
        box = st.expander("Start a SliceGPT sweep", first, key="sweep_box", on_change="rerun")
        with box:
            try:
                params = sweep_form() if box.open else None
                if params is not None:  # the estimate's plan, unless a corpus was uploaded
                    planned = form_plan(store, "sweep", params)
                    status = start_and_follow(store, "sweep_job_id", "sweep", params, plan=planned)
            except PruneScopeError as exc:
                show_error(exc)
    show_job(store, status, "sweep_run")


# ---- a stored sweep ------------------------------------------------------------------------------


def show_sweep(run: Run) -> None:
    if "sweep" not in run.tables():
        cli_hint(f"Run {run.id} has no sweep table.", SWEEP_HINT)
        return
    sweep, m = run.table("sweep"), run.metrics
    ppl0, d = m.get("ppl0"), full_width(run, sweep)
    current = "joint" in m and T_LAWS in run.tables()  # stored with the primary estimands
    if current:
        show_headline(run, ppl0, d)
    else:
        c = st.columns(2)
        c[0].metric("dense PPL₀", f"{ppl0:.3f}" if ppl0 else "–")
        c[1].metric("width d", d or "–")
        st.info(
            "This sweep was stored before (A1)'s joint test and local first order were "
            "computed: run it again with --force to see them. Shown: the line a(1 − s) + b it "
            "was fitted with."
        )
    if not ppl0 or not d:
        st.warning("This sweep lacks PPL₀ or the model width; the analytic curve cannot be drawn.")
        st.dataframe(sweep, hide_index=True)
        return
    if current:
        basis = show_laws(store, run, sweep, float(ppl0), int(d))
        st.download_button(
            "Export notebook",
            lambda: sweep_notebook(store.root, run.id, basis),
            file_name=f"prunescope-sweep-{run.id[:8]}.ipynb",
            mime="application/x-ipynb+json",
            key="sweep_notebook",
            help="a Jupyter notebook whose cells rebuild these figures from the store (core.api)",
        )
    else:
        left, right = st.columns(2)
        left.plotly_chart(figures.ppl_vs_dprime(sweep, ppl0, d), key="ppl_dprime")
        s_col = "s" if "s" in sweep else "s_eff"
        right.plotly_chart(
            figures.ratio_vs_keep(sweep, ppl0, m.get("a"), m.get("b"), s_col), key="ratio_keep"
        )
    relation_slider(sweep, float(ppl0), int(d))
    st.markdown("**Measured vs predicted perplexity** (prediction PPL₀^(d/d′), error relative)")
    st.dataframe(
        sweep[[c for c in SWEEP_COLUMNS if c in sweep]],
        hide_index=True,
        column_config={
            "ppl": st.column_config.NumberColumn("measured ppl", format="%.3f"),
            "predicted_ppl": st.column_config.NumberColumn("predicted ppl", format="%.3f"),
            "rel_error": st.column_config.NumberColumn("rel. error", format="%.4f"),
        },
        key="sweep_table",
    )
    if "accuracy" in run.tables():
        show_accuracy(run)
    else:
        st.caption(
            "No zero-shot accuracy in this sweep: start one with tasks (e.g. `--tasks "
            "all --limit 200`) to see Paper A's accuracy relation beside perplexity."
        )


FIT_COLUMNS = [
    "label",
    "kappa",
    "kappa_lo",
    "kappa_hi",
    "intercept",
    "loo_error",
    "loo_error_lo",
    "loo_error_hi",
    "verdict",
    "r2",
    "kappa_chance",
    "r2_chance",
]


def show_accuracy(run: Run) -> None:
    """Accuracy per task against d′ and the fits of ln(acc/acc₀) ∝ (1 − s)."""
    acc = run.table("accuracy")
    fits = run.table("accuracy_fit") if "accuracy_fit" in run.tables() else None
    if fits is not None:  # the per-task verdict of the one (A2) rule
        fits = fits.rename(columns={"kappa_verdict": "verdict"})
    st.subheader("Zero-shot accuracy against d′")
    st.caption(
        "Paper A also states ln(acc/acc₀) ∝ (1 − s). With acc₀ the dense accuracy a line "
        "through the origin is impossible (at s = 0 both sides differ), so two readings are "
        "fitted: ln(acc/acc_dense) = κ(1 − s) + c, and ln(acc/chance) = κ′(1 − s) through the "
        "origin (point fits; R² describes them, it decides nothing). "
        + ACCURACY_RULE
        + " The mean of tasks has no items to resample and is not judged. Error bars: one "
        "standard error."
    )
    n = int(acc["n"].max()) if "n" in acc else None
    if n is not None and n < 500:
        st.info(
            f"{n} items per task: one standard error is about "
            f"{acc['acc_stderr'].mean():.3f}, so small accuracy changes are noise."
        )
    st.plotly_chart(figures.accuracy_vs_dprime(acc, fits), key="acc_dprime")
    if fits is not None:
        st.dataframe(
            fits[[c for c in FIT_COLUMNS if c in fits]],
            hide_index=True,
            column_config={
                "label": "task",
                "kappa": st.column_config.NumberColumn("κ", format="%.3f"),
                "kappa_lo": st.column_config.NumberColumn("κ 2.5%", format="%.3f"),
                "kappa_hi": st.column_config.NumberColumn("κ 97.5%", format="%.3f"),
                "intercept": st.column_config.NumberColumn("c", format="%.3f"),
                "loo_error": st.column_config.NumberColumn("held-out |error|", format="%.3f"),
                "loo_error_lo": st.column_config.NumberColumn("2.5%", format="%.3f"),
                "loo_error_hi": st.column_config.NumberColumn("97.5%", format="%.3f"),
                "r2": st.column_config.NumberColumn("R²", format="%.3f"),
                "kappa_chance": st.column_config.NumberColumn("κ′ (chance)", format="%.3f"),
                "r2_chance": st.column_config.NumberColumn("R² (chance)", format="%.3f"),
            },
            key="acc_fit_table",
        )


# ---- effective dimension across methods ----------------------------------------------------------
def _num(v: Any) -> bool:
    return isinstance(v, int | float) and math.isfinite(v)


def pick_group(points: pd.DataFrame) -> pd.DataFrame:
    """The runs compared with one dense baseline (same model and evaluation windows)."""
    dense = points[points["method"] == "dense"].set_index("run_id")
    groups = [g for g in points["group"].dropna().unique() if g in dense.index]
    if len(groups) > 1:
        sizes = points["group"].value_counts()
        groups.sort(key=lambda g: -sizes.get(g, 0))
        label = {g: f"{dense.at[g, 'model']} · {dense.at[g, 'dataset']} [{g[:8]}]" for g in groups}
        chosen = linked(
            st.selectbox, "Model and evaluation data", groups, format_func=label.get, key="grp"
        )
    else:
        chosen = groups[0] if groups else None
    return points[points["group"] == chosen] if chosen else points


def show_effdim(points: pd.DataFrame) -> None:
    dims = sorted({c for c in points.columns if figures.is_dim_key(c)})
    if points.empty or not dims:
        offer_run(store, PAGE_ATTENTION, "No stored run records an effective dimension yet.")
        return
    group = pick_group(points)
    default = dims.index(DEFAULT_DIM) if DEFAULT_DIM in dims else 0
    x = linked(st.selectbox, "Dimension measure", dims, index=default, key="effdim_measure")
    dense = group[group["method"] == "dense"]
    others = group[(group["method"] != "dense") & group[x].notna()]
    ppl0 = float(dense["ppl"].iloc[0]) if len(dense) else None
    d_ref = float(dense[x].iloc[0]) if len(dense) and _num(dense[x].iloc[0]) else None
    st.plotly_chart(figures.effdim_scatter(group, x, ppl0, d_ref), key="effdim_scatter")
    if ppl0 and d_ref and len(others):
        rel = effective_relation(
            ppl0,
            d_ref,
            [
                {"method": m, "sparsity": s, "ppl": p, "d_eff": d}
                for m, s, p, d in others[["method", "sparsity", "ppl", x]].itertuples(index=False)
            ],
        )
        c = st.columns(3)
        c[0].metric("mean |prediction error|", f"{rel['mean_abs_rel_error']:.1%}")
        c[1].metric("fit a, b", f"{rel['a']:.3f}, {rel['b']:.3f}")
        c[2].metric("fit R²", f"{rel['r2']:.3f}" if _num(rel["r2"]) else "–")
        table = pd.DataFrame(rel["rows"])[
            ["method", "sparsity", "d_eff", "measured", "predicted", "rel_error"]
        ]
        st.dataframe(table, hide_index=True, key="effdim_table")
        show_held_out(rel["held_out"])
    st.caption(
        "Unstructured methods keep the width d but can shrink the dimension the residual stream "
        "actually uses; SliceGPT sets it directly. The dashed curve is Paper A's relation with "
        "the effective dimension in place of d′: PPL = PPL₀^(d_dense/d_eff)."
    )


@st.cache_data(show_spinner=False, max_entries=8)
def cached_effdim_points(version: tuple, _done: list) -> pd.DataFrame:
    """effdim_points once per version of the store (RunStore.version)."""
    return effdim_points(store, _done)


# ---- page ----------------------------------------------------------------------------------------
SWEEP, BUDGETS, EFFDIM = "SliceGPT sweep", "Matched budgets", "Effective dimension"
RECOVERY, DIM_OR_PARAMS = "After recovery", "Dimension or parameters"
sweep_launcher()
sections = [SWEEP, BUDGETS, DIM_OR_PARAMS, EFFDIM, RECOVERY]
section, pane = open_section(sections, key="repdim_section")
version = (str(store.root), *store.version())  # keys the cached tables below
with pane, store_reads():
    if section == SWEEP:
        sweeps = list_runs(store, kind="sweep", status="done")
        if sweeps:
            show_sweep(store.load(pick_run("Sweep", sweeps, key="sweep_run").id))
        else:
            offer_run(store, PAGE_REPDIM, "No finished SliceGPT sweep in the store yet.")
    elif section == BUDGETS:
        matched_budgets(list_runs(store, status="done"), version)
    elif section == DIM_OR_PARAMS:
        dimension_or_params_view(store, list_runs(store, status="done"), version)
    elif section == RECOVERY:
        st.subheader("Paper A's relation before and after recovery")
        show_recovery(store)
    else:
        st.subheader("Effective dimension of every stored run")
        show_effdim(cached_effdim_points(version, list_runs(store, status="done")))
