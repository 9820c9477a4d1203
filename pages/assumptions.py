"""Assumption checks (Paper B): do smoothness and PL hold for the attention-GD objective, by a
rule that can say no, with its controls, per-group estimates and the mask audit."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import streamlit as st

from core import figures
from core.analysis.gd_standing import run_budget
from core.demo import PAGE_ASSUMPTIONS
from core.errors import DamagedRunError
from core.methods.attention_gd import RULE
from core.methods.attention_gd.audit import (
    TABLE_AGREEMENT,
    TABLE_GROUPS,
    TABLE_HEADS,
    TABLE_TRAJECTORY,
    checks_option,
    verdict_tally,
)
from core.methods.attention_gd.controls import control_trajectories, controls
from core.methods.attention_gd.power import (
    OPTIMIZER_NAMES,
    PRODUCTION_OPTIMIZER,
    PRODUCTION_STEPS,
    STARTS,
    power_table,
)
from core.methods.attention_gd.verdict_notes import budget_words, power_note, rate_note
from core.store.run_store import Run, RunRecord
from pages.common import (
    get_store,
    list_runs,
    number_table,
    open_section,
    pick_run,
    require_frame,
    store_reads,
)
from pages.gd_views import show_standing
from pages.links import linked
from pages.starters import offer_run

require_frame(__file__)
ESTIMATES = [
    "mu_hat",
    "lipschitz_hessian",
    "lipschitz_secant",
    "lipschitz_bound",
    "L_star_lo",
    "L_star_hi",
]

# What each trajectory panel (core.figures.TRAJECTORY_PANELS) shows when the assumption holds
# or fails; the controls below draw one example of each.
CURVE_ROWS = (
    (
        "**loss L(M_t)** (log)",
        "a straight line down to L*: linear convergence at rate ≤ 1 − μ/L",
        "bends into a slow power law (no PL), or stalls / jumps (step too long for the curvature)",
    ),
    (
        "**‖∇L(M_t)‖**",
        "falls geometrically, in step with the loss",
        "decays slowly while the loss is still above L* (no PL), or spikes (non-Lipschitz "
        "gradient)",
    ),
    (
        "**Lipschitz estimate** (secant)",
        "flat, below one constant L (and below the analytical bound)",
        "climbs without bound as GD nears a point of unbounded curvature",
    ),
    (
        "**PL ratio** ½‖∇L‖²/(L − L*)",
        "stays above a constant μ > 0 (flat or rising)",
        "sinks toward 0 as L → L*: no μ > 0 exists there",
    ),
)
CURVES = "| curve | the assumption holds | it fails |\n|---|---|---|\n" + "\n".join(
    f"| {curve} | {holds} | {fails} |" for curve, holds, fails in CURVE_ROWS
)

store = get_store()
st.title("Assumption checks (Paper B)")
st.caption(
    "Gradient descent on L(M) = ½‖f(M) − Y‖²_F + ½λ‖M‖²_F converges linearly if ∇L is "
    "L-Lipschitz and a PL inequality ½‖∇L‖² ≥ μ(L − L*) holds with μ > 0. Each attention-gd "
    "run judges both per GQA group with estimates taken off the trajectory: L* from an "
    "independent run, PL ratios at random and perturbed points, L̂ from the Hessian's top "
    "eigenvalue (power iteration) beside the secants and the analytical bound."
)

with st.expander("The verdict rule", expanded=False):
    st.code(RULE, language="text")


# On disk: the controls are deterministic and take seconds, so only a new install pays them.
@st.cache_data(show_spinner="Running the controls…", persist="disk")
def control_rows() -> pd.DataFrame:
    return pd.DataFrame(controls())


@st.cache_data(show_spinner=False, persist="disk")
def control_paths() -> pd.DataFrame:
    return pd.DataFrame(control_trajectories())


@st.cache_data(show_spinner="Measuring the rule's power…", persist="disk")
def power_rows(budgets: tuple[int, ...], optimizers: tuple[str, ...]) -> pd.DataFrame:
    return pd.DataFrame(power_table(budgets, optimizers))


@st.cache_data(show_spinner="Measuring the rule's power…", persist="disk")
def verdict_power(verdict: str, steps: int, optimizer: str) -> str:
    return power_note(verdict, steps, optimizer)


def group_steps(row: pd.Series) -> int:
    """The steps the group's judged run took (the production budget where not stored)."""
    steps = row.get("steps_taken", row.get("steps"))
    return int(steps) if steps is not None and math.isfinite(float(steps)) else PRODUCTION_STEPS


VERDICTS, ESTIMATES, AUDIT, STANDING, CONTROLS = (
    "Verdicts and trajectories",
    "Estimates per group",
    "How far GD moved",
    "Against Wanda (headroom)",
    "Controls: how to read the curves",
)


def show_controls() -> None:
    """The rule on three known functions, and the four panels read on their GD paths."""
    st.subheader("Controls: the rule says no where the answer is no")
    st.dataframe(control_rows(), hide_index=True, key="controls")
    st.markdown(CURVES)
    st.plotly_chart(figures.gd_trajectories(control_paths(), series="control"), key="control_paths")
    st.subheader(f"The rule's power at the production budget ({budget_words(PRODUCTION_STEPS)})")
    power = power_rows((PRODUCTION_STEPS,), (PRODUCTION_OPTIMIZER, "gd"))
    number_table(power.set_index(["optimizer", "steps", "control", "truth"]), "power", "%.3g")
    st.caption(
        "Controls matched to a real layer (core/methods/attention_gd/synthetic_layer.py): "
        "dimension 10,000, separable in a rotated basis with exact μ and L; PL holds on a "
        "spectrum 1..10 and on the layer's spectral density (negative part included), and is "
        "violated by x⁴ (no PL) and |x|^{3/2} (gradient not Lipschitz); "
        f"{STARTS} seeded draws each, judged on "
        f"{OPTIMIZER_NAMES[PRODUCTION_OPTIMIZER]} trajectories as production runs them (the "
        "default options' learning rate, tolerance and cap; plain GD with backtracking beside "
        "it), with production's check settings. truth: the verdict the control calls for; "
        "each verdict's fraction with its 95 % Wilson interval (_lo, _hi)."
    )
    st.caption(
        "The three controls' GD paths in the same four panels (L* = 0, each one's known "
        "minimum). Quadratic: both assumptions hold, the loss falls on a straight line and "
        "the PL ratio stays flat. x⁴: no PL constant at the minimum, so the PL ratio sinks "
        "toward 0 and the loss bends into a slow power law. |x − ½|^{3/2}: the gradient is "
        "not Lipschitz at ½, so the secant estimate climbs by orders of magnitude."
    )


def show_verdicts(run: Run, groups: pd.DataFrame) -> None:
    """The run's verdict, the count per verdict, and one group's GD trajectory."""
    m = run.metrics
    cap, optimizer = run_budget(run.config)
    tally = verdict_tally(list(groups["verdict"]), checks_option(run.config))
    c = st.columns(1 + len(tally))
    c[0].metric("run verdict", str(m.get("gd_verdict", "–")).replace("_", " "))
    for col, (v, n, _) in zip(c[1:], tally, strict=True):
        col.metric(f"groups {v.replace('_', ' ')}", f"{n} / {len(groups)}")
    for v, n, why in tally:
        if n and why:
            st.caption(f"{n} of {len(groups)} groups {v.replace('_', ' ')}: {why}.")
    st.caption(f"The rule's controls, and what each curve looks like, are under '{CONTROLS}'.")
    traj = run.table(TABLE_TRAJECTORY)
    c1, c2 = st.columns(2)
    layer = linked(c1.selectbox, "Layer", sorted(traj["layer"].unique()), key="gd_layer")
    groups_here = sorted(traj.loc[traj["layer"] == layer, "group"].unique())
    group = linked(c2.selectbox, "GQA group", groups_here, key="gd_group")
    sel = traj[(traj["layer"] == layer) & (traj["group"] == group)].copy()
    heads = "q head " + sel["head"].fillna(-1).astype(int).astype(str)
    sel["block"] = np.select(
        [sel["matrix"] == "q", sel["matrix"] == "k"], [heads, "k (shared)"], "group total"
    )
    row = groups[(groups["layer"] == layer) & (groups["group"] == group)].iloc[0]
    st.markdown(f"**Layer {layer}, group {group}: {row['verdict']}** ({row.get('reason', '')})")
    if row["verdict"] in ("supported", "contradicted", "inconclusive"):
        st.caption(verdict_power(str(row["verdict"]), cap, optimizer))
    pred = row.get("steps_pred")
    if pred is not None and math.isfinite(float(pred)):
        st.caption(rate_note(float(pred), group_steps(row), optimizer))
    if bool(row.get("bound_uninformative", False)):
        st.caption(
            "The analytical Lipschitz bound sits over 10³ above the measured curvature: "
            "uninformative (it cannot fire), not counted as a check."
        )
    theory: dict[str, dict[str, float]] = {"lipschitz_est": {}, "pl_ratio": {}}
    for name, key, panel in (
        ("analytical bound", "lipschitz_bound", "lipschitz_est"),
        ("Hessian L̂", "lipschitz_hessian", "lipschitz_est"),
        ("μ̂", "mu_hat", "pl_ratio"),
    ):
        value = row.get(key)
        if value is not None and math.isfinite(value) and value > 0:
            theory[panel][name] = float(value)
    st.plotly_chart(figures.gd_trajectories(sel, theory, series="block"), key="gd_traj")
    st.caption(
        "PL ratios on the trajectory use the independent L* (lower end), not the run's own best."
    )
    if TABLE_HEADS in run.tables():
        heads = run.table(TABLE_HEADS)
        st.dataframe(heads[heads["layer"] == layer], hide_index=True, key="gd_heads")


def show_estimates(groups: pd.DataFrame, budget: tuple[int, str]) -> None:
    """The estimates behind the verdicts: their spread over groups, then every group."""
    st.dataframe(
        groups.pivot_table(
            index="layer", columns="verdict", values="group", aggfunc="count", fill_value=0
        ),
        key="verdict_counts",
        width="content",
    )
    present = [e for e in ESTIMATES if e in groups]
    spread = (
        groups[present].describe(percentiles=[0.1, 0.5, 0.9]).T[["min", "10%", "50%", "90%", "max"]]
    )
    number_table(spread, "spread", "%.3g")
    st.caption(
        "μ̂: smallest PL ratio with L* at its lower end; L̂: Hessian power iteration and secants "
        "(measured, lower estimates) beside the analytical upper bound (NaN where the model has "
        "q/k biases or norms the bound does not cover)."
    )
    shown = [
        "layer",
        "group",
        "verdict",
        "reason",
        *present,
        "pl_slope",
        "hessian_slope",
        "n_points",
        "gap_decades",
        "steps",
        "steps_pred",
        "bound_uninformative",
        "mask_delta",
        "attn_fro_rel",
    ]
    rows = groups[[col for col in shown if col in groups]].copy()
    rows["power"] = [
        verdict_power(str(r["verdict"]), *budget)
        if r["verdict"] in ("supported", "contradicted", "inconclusive")
        else ""
        for _, r in groups.iterrows()
    ]
    st.dataframe(rows, hide_index=True, key="gd_groups")


def show_audit(run: Run) -> None:
    """How much of GD's mask the magnitude and Wanda masks at the same sparsity also keep."""
    m = run.metrics
    a1, a2, a3 = st.columns(3)
    a1.metric(
        "kept entries shared with magnitude", f"{m.get('mask_agreement_magnitude', math.nan):.1%}"
    )
    a2.metric("kept entries shared with Wanda", f"{m.get('mask_agreement_wanda', math.nan):.1%}")
    a3.metric("mean ‖M_T − M₀‖ / ‖M₀‖", f"{m.get('mask_delta', math.nan):.3g}")
    if TABLE_AGREEMENT in run.tables():
        agree = run.table(TABLE_AGREEMENT)
        st.dataframe(
            agree.pivot_table(
                index="layer", columns="role", values=["agreement_magnitude", "agreement_wanda"]
            ),
            key="agreement",
        )


@st.cache_data(show_spinner=False, max_entries=4096)
def has_checks(run_id: str, stamp: float, _rec: RunRecord) -> bool:
    """Whether a finished attention-gd run stored its per-group checks (one listing of its
    tables per run and finish time, not one per render). A damaged run is listed: picking
    it says what is damaged."""
    try:
        return TABLE_GROUPS in Run(_rec, store.run_dir(run_id)).tables()
    except DamagedRunError:
        return True


# ---- page ----------------------------------------------------------------------------------------
gd_runs = [
    r
    for r in list_runs(store, kind="prune", status="done")
    if r.method == "attention-gd" and has_checks(r.id, r.finished or 0.0, r)
]
picked = pick_run("Run", gd_runs, key="gd_run") if gd_runs else None
run = None
if picked is None:  # the controls still teach how to read the curves meanwhile
    offer_run(store, PAGE_ASSUMPTIONS, "No attention-gd run with assumption checks yet.")
else:
    with store_reads():  # a damaged run: its message below the picker
        run = store.load(picked.id)
section, pane = open_section(
    [VERDICTS, ESTIMATES, AUDIT, STANDING, CONTROLS],
    key="gd_section",
    default=None if run else CONTROLS,
)
with pane, store_reads():
    if section == CONTROLS:
        show_controls()
    elif run is None:
        st.info("This section reads an attention-gd run: start one with the button above.")
    elif section == VERDICTS:
        show_verdicts(run, run.table(TABLE_GROUPS))
    elif section == STANDING:
        show_standing(run, "gd")
    elif section == ESTIMATES:
        show_estimates(run.table(TABLE_GROUPS), run_budget(run.config))
    else:
        show_audit(run)
