"""Representation dimension (Paper A): SliceGPT sweeps, PPL vs d′ against PPL0^(d/d′), and
every stored prune run placed by its effective dimension beside SliceGPT's points."""

from __future__ import annotations

import math
from typing import Any

import pandas as pd
import streamlit as st

from core import figures, jobs
from core.data import default_data_dir
from core.demo import PAGE_ATTENTION, PAGE_REPDIM
from core.errors import PruneScopeError
from core.fields import (
    CHOICE,
    FLAG,
    LIST,
    PRESETS,
    Field,
    app_preset,
    command_fields,
    defaults,
)
from core.names import DEFAULT_DIM
from core.store import Run
from core.tables import effdim_points
from pages.common import (
    cli_hint,
    current_job,
    device_info,
    get_store,
    list_runs,
    open_section,
    pick_run,
    require_frame,
    show_error,
    show_job,
    start_and_follow,
)
from pages.repdim_views import matched_budgets, relation_slider
from pages.starters import offer_run

require_frame(__file__)

SWEEP_HINT = "python -m core sweep --model smollm2-135m --sparsities 0.1,0.2,0.3,0.4,0.5"
PRIMARY_GROUPS = ("model", "sweep")
SWEEP_COLUMNS = ["s", "s_eff", "d_prime", "params", "ppl", "predicted_ppl", "rel_error", "fit_ppl"]

store = get_store()
st.title("Representation dimension")
st.caption(
    "Paper A claims ln PPL₀ / ln PPL = 1 − s for SliceGPT, where d′ = (1 − s)·d is the kept "
    "width of the residual stream: perplexity would be set by d′ alone, PPL = PPL₀^(d/d′). "
    "A sweep slices the model at several s, measures PPL and fits ratio = a(1 − s) + b."
)


# ---- starting a sweep ------------------------------------------------------------------------------
def field_widget(f: Field, default: Any) -> Any:
    """A widget for one field of the sweep command, starting at ``default``; text is typed
    by core.requests, which reports a malformed number."""
    label, key = f.label, f"sweep_{f.name}"
    if f.name in ("calib", "eval") and not default_data_dir():
        default = "pydoc"
    if f.kind == FLAG:
        return st.checkbox(label, bool(default), key=key, help=f.help)
    if f.kind == CHOICE:
        choices = list(f.choices or ())
        index = choices.index(default) if default in choices else 0
        return st.selectbox(label, choices, index=index, key=key, help=f.help)
    if f.kind == LIST:
        text = st.text_area(label, "\n".join(map(str, default or [])), key=key, help=f.help)
        return [ln.strip() for ln in text.splitlines() if ln.strip()]
    text = st.text_input(label, "" if default is None else str(default), key=key, help=f.help)
    return text.strip() or None


def sweep_form() -> dict[str, Any] | None:
    """A form drawn from the sweep command's fields (core.fields); returns values on submit."""
    names = list(PRESETS)
    preset = st.selectbox(
        "Preset",
        names,
        names.index(app_preset(device_info().get("type"))),
        key="sweep_preset",
        help="named sets of ordinary values (core.fields)",
    )
    start = defaults("sweep", preset)
    fields = [f for f in command_fields("sweep") if f.config]
    main = [f for f in fields if f.group in PRIMARY_GROUPS]
    rest = [f for f in fields if f not in main]
    with st.form("sweep_form"):
        cols = st.columns(3)
        values = {}
        for i, f in enumerate(main):
            with cols[i % 3]:
                values[f.name] = field_widget(f, start[f.name])
        with st.expander("Calibration, evaluation and other options"):
            cols = st.columns(3)
            for i, f in enumerate(rest):
                with cols[i % 3]:
                    values[f.name] = field_widget(f, start[f.name])
        submitted = st.form_submit_button("Start the sweep", type="primary")
    return {k: v for k, v in values.items() if v is not None} if submitted else None


def sweep_launcher() -> None:
    job_id = current_job("sweep_job_id")
    status = jobs.job_status(store, job_id) if job_id else None
    if status is None or status.finished:
        first = status is None and not list_runs(store, kind="sweep")
        with st.expander("Start a SliceGPT sweep", expanded=first):
            try:
                params = sweep_form()
                if params is not None:
                    status = start_and_follow(store, "sweep_job_id", "sweep", params)
            except PruneScopeError as exc:
                show_error(exc)
    show_job(store, status, "sweep_run")


# ---- a stored sweep ------------------------------------------------------------------------------
def full_width(run: Run, sweep: pd.DataFrame) -> int | None:
    """d of the sliced model: from the run's model record, else d′/(1 − s_eff)."""
    d = run.metrics.get("d") or (run.metrics.get("model") or {}).get("hidden_size")
    if d:
        return int(d)
    if {"s_eff", "d_prime"} <= set(sweep.columns):
        ok = sweep[(sweep["s_eff"] < 1) & sweep["d_prime"].notna()]
        if len(ok):
            return round(float(ok["d_prime"].iloc[0]) / (1 - float(ok["s_eff"].iloc[0])))
    return None


def show_sweep(run: Run) -> None:
    if "sweep" not in run.tables():
        cli_hint(f"Run {run.id} has no sweep table.", SWEEP_HINT)
        return
    sweep, m = run.table("sweep"), run.metrics
    ppl0, d = m.get("ppl0"), full_width(run, sweep)
    a, b, r2 = m.get("a"), m.get("b"), m.get("r2")
    c = st.columns(4)
    c[0].metric("dense PPL₀", f"{ppl0:.3f}" if ppl0 else "–")
    c[1].metric("width d", d or "–")
    c[2].metric("fit a, b", f"{a:.3f}, {b:.3f}" if a is not None and b is not None else "–")
    c[3].metric("fit R²", f"{r2:.3f}" if r2 is not None and math.isfinite(r2) else "–")
    if not ppl0 or not d:
        st.warning("This sweep lacks PPL₀ or the model width; the analytic curve cannot be drawn.")
        st.dataframe(sweep, hide_index=True)
        return
    left, right = st.columns(2)
    left.plotly_chart(figures.ppl_vs_dprime(sweep, ppl0, d, a, b), key="ppl_dprime")
    s_col = "s" if "s" in sweep else "s_eff"  # the fit is made against the nominal s
    right.plotly_chart(figures.ratio_vs_keep(sweep, ppl0, a, b, s_col), key="ratio_keep")
    relation_slider(sweep, float(ppl0), int(d))
    st.markdown("**Measured vs predicted perplexity** (prediction PPL₀^(d/d′), error relative)")
    st.dataframe(
        sweep[[c for c in SWEEP_COLUMNS if c in sweep]],
        hide_index=True,
        column_config={
            "ppl": st.column_config.NumberColumn("measured ppl", format="%.3f"),
            "predicted_ppl": st.column_config.NumberColumn("predicted ppl", format="%.3f"),
            "rel_error": st.column_config.NumberColumn("rel. error", format="%.4f"),
            "fit_ppl": st.column_config.NumberColumn("fitted ppl", format="%.3f"),
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
    "intercept",
    "r2",
    "held",
    "kappa_chance",
    "r2_chance",
    "held_chance",
]


def show_accuracy(run: Run) -> None:
    """Accuracy per task against d′ and the fits of ln(acc/acc₀) ∝ (1 − s)."""
    acc = run.table("accuracy")
    fits = run.table("accuracy_fit") if "accuracy_fit" in run.tables() else None
    st.subheader("Zero-shot accuracy against d′")
    st.caption(
        "Paper A also states ln(acc/acc₀) ∝ (1 − s). With acc₀ the dense accuracy a line "
        "through the origin is impossible (at s = 0 both sides differ), so two readings are "
        "fitted: ln(acc/acc_dense) = κ(1 − s) + c, and ln(acc/chance) = κ′(1 − s) through the "
        "origin. 'held' means R² ≥ 0.9 with κ > 0. Error bars: one standard error."
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
                "intercept": st.column_config.NumberColumn("c", format="%.3f"),
                "r2": st.column_config.NumberColumn("R²", format="%.3f"),
                "kappa_chance": st.column_config.NumberColumn("κ′ (chance)", format="%.3f"),
                "r2_chance": st.column_config.NumberColumn("R² (chance)", format="%.3f"),
            },
            key="acc_fit_table",
        )


# ---- effective dimension across methods --------------------------------------------------------------
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
        chosen = st.selectbox("Model and evaluation data", groups, format_func=label.get, key="grp")
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
    x = st.selectbox("Dimension measure", dims, index=default, key="effdim_measure")
    dense = group[group["method"] == "dense"]
    others = group[(group["method"] != "dense") & group[x].notna()]
    ppl0 = float(dense["ppl"].iloc[0]) if len(dense) else None
    d_ref = float(dense[x].iloc[0]) if len(dense) and _num(dense[x].iloc[0]) else None
    st.plotly_chart(figures.effdim_scatter(group, x, ppl0, d_ref), key="effdim_scatter")
    if ppl0 and d_ref and len(others):
        from core.repdim import effective_relation

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
    st.caption(
        "Unstructured methods keep the width d but can shrink the dimension the residual stream "
        "actually uses; SliceGPT sets it directly. The dashed curve is Paper A's relation with "
        "the effective dimension in place of d′: PPL = PPL₀^(d_dense/d_eff)."
    )


@st.cache_data(show_spinner=False, max_entries=8)
def cached_effdim_points(version: tuple, _done: list) -> pd.DataFrame:
    """effdim_points once per version of the store (RunStore.version)."""
    return effdim_points(store, _done)


# ---- page ------------------------------------------------------------------------------------------------
SWEEP, BUDGETS, EFFDIM = "SliceGPT sweep", "Matched budgets", "Effective dimension"
sweep_launcher()
section, pane = open_section([SWEEP, BUDGETS, EFFDIM], key="repdim_section")
version = (str(store.root), *store.version())  # keys the cached tables below
with pane:
    if section == SWEEP:
        sweeps = list_runs(store, kind="sweep", status="done")
        if sweeps:
            show_sweep(store.load(pick_run("Sweep", sweeps, key="sweep_run").id))
        else:
            offer_run(store, PAGE_REPDIM, "No finished SliceGPT sweep in the store yet.")
    elif section == BUDGETS:
        matched_budgets(list_runs(store, status="done"), version)
    else:
        st.subheader("Effective dimension of every stored run")
        show_effdim(cached_effdim_points(version, list_runs(store, status="done")))
