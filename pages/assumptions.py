"""Assumption checks: Paper B's GD trajectories with the theory's reference lines, and which
heads converge as the Lipschitz + PL argument predicts."""

from __future__ import annotations

import math

import pandas as pd
import streamlit as st

from core import figures
from pages.common import cli_hint, get_store, pick_run, require_frame

require_frame(__file__)
VERDICTS = {
    "as_predicted": "linear rate at least as fast as the PL bound 1 − μ̂η",
    "slower_than_pl": "decreasing, but slower than the PL bound predicts",
    "step_too_large": "η·L̂ > 2: outside gradient descent's descent regime",
    "not_decreasing": "the loss did not go down",
    "too_few_points": "too few steps to fit a rate",
}
HEAD_COLUMNS = [
    "layer",
    "group",
    "matrix",
    "head",
    "verdict",
    "mu",
    "lipschitz_max",
    "lipschitz_bound",
    "step_size",
    "rate_obs",
    "rate_pred",
    "fit_r2",
    "data_loss_start",
    "data_loss_end",
    "attn_fro_rel",
]

store = get_store()
st.title("Assumption checks (Paper B)")
st.caption(
    "Gradient descent on L(M) = ½‖f(M) − Y‖²_F + ½λ‖M‖²_F converges linearly when ∇L is "
    "L-Lipschitz (so η ≤ 1/L descends) and a PL inequality ½‖∇L‖² ≥ μ(L − L*) holds. Each "
    "attention-gd run records, per GQA group and step, the loss, the gradient norm, a secant "
    "estimate of L and the empirical PL ratio; dashed lines are the reference values."
)


def block_name(row: pd.Series) -> str:
    if row["matrix"] == "q":
        return f"q head {int(row['head'])}"
    return "k (shared)" if row["matrix"] == "k" else "group total"


def theory_lines(heads: pd.DataFrame, with_bound: bool) -> dict[str, dict[str, float]]:
    """Reference lines of one group: the analytic Lipschitz bound (if asked), 1/η of the step
    rule, and μ̂ of the group."""
    group = heads[heads["matrix"] == "group"]
    row = group.iloc[0] if len(group) else heads.iloc[0]
    lines: dict[str, dict[str, float]] = {"lipschitz_est": {}, "pl_ratio": {}}
    bound = row.get("lipschitz_bound")
    if with_bound and bound is not None and math.isfinite(bound):
        lines["lipschitz_est"]["upper bound"] = float(bound)
    eta = row.get("step_size")
    if eta is not None and math.isfinite(eta) and eta > 0:
        lines["lipschitz_est"]["1/η"] = 1.0 / float(eta)
    mu = row.get("mu")
    if mu is not None and math.isfinite(mu):
        lines["pl_ratio"]["μ̂ (min PL ratio)"] = float(mu)
    return lines


gd_runs = [
    r
    for r in store.list(kind="prune", status="done")
    if r.method == "attention-gd" and "gd_trajectory" in store.load(r.id).tables()
]
if not gd_runs:
    cli_hint(
        "No attention-gd run with a GD trajectory yet.",
        "python -m core prune --model tiny-llama --method attention-gd --targets qk "
        "--calib pydoc --eval pydoc --nsamples 8 --seqlen 64",
    )
    st.stop()

run = store.load(pick_run("Run", gd_runs, key="gd_run").id)
traj = run.table("gd_trajectory")
heads = run.table("gd_heads") if "gd_heads" in run.tables() else pd.DataFrame()

st.subheader("Trajectories")
c1, c2 = st.columns(2)
layer = c1.selectbox("Layer", sorted(traj["layer"].unique()), key="gd_layer")
groups = sorted(traj.loc[traj["layer"] == layer, "group"].unique())
group = c2.selectbox("GQA group", groups, key="gd_group")
sel = traj[(traj["layer"] == layer) & (traj["group"] == group)].copy()
sel["block"] = sel.apply(block_name, axis=1)
blocks = list(dict.fromkeys(sel["block"]))
c1, c2 = st.columns([3, 1])
shown = c1.multiselect("Blocks", blocks, blocks, key="gd_blocks")
with_bound = c2.toggle(
    "analytic Lipschitz bound",
    True,
    key="gd_bound",
    help="the closed-form upper bound on L is often orders of magnitude above the secant "
    "estimates; hide it to zoom on the measured values",
)
group_heads = heads[(heads["layer"] == layer) & (heads["group"] == group)] if len(heads) else heads
theory = theory_lines(group_heads, with_bound) if len(group_heads) else None
st.plotly_chart(
    figures.gd_trajectories(sel[sel["block"].isin(shown)], theory, series="block"),
    key="gd_traj",
)

st.subheader("Which heads satisfy the assumptions")
if heads.empty:
    cli_hint(
        "This run has no per-head summary (gd_heads).",
        "python -m core prune --method attention-gd ...",
    )
    st.stop()
q = heads[heads["matrix"] == "q"]
ok = int((q["verdict"] == "as_predicted").sum())
descent = q["step_size"] * q["lipschitz_max"] <= 2.0
m1, m2, m3 = st.columns(3)
m1.metric("query heads converging as predicted", f"{ok} / {len(q)}")
m2.metric("heads in the descent regime (η·L̂ ≤ 2)", f"{int(descent.sum())} / {len(q)}")
m3.metric(
    "median attention error", f"{q['attn_fro_rel'].median():.3g}" if "attn_fro_rel" in q else "–"
)
counts = heads.pivot_table(
    index="layer", columns="verdict", values="head", aggfunc="count", fill_value=0
)
st.dataframe(counts, key="verdict_counts", width="content")
shown_cols = [c for c in HEAD_COLUMNS if c in heads]
st.dataframe(
    heads[shown_cols],
    hide_index=True,
    key="gd_heads",
    column_config={
        c: st.column_config.NumberColumn(
            c, format="scientific" if c == "lipschitz_bound" else "%.3g"
        )
        for c in shown_cols
        if heads[c].dtype.kind == "f"
    },
)
with st.expander("What the verdicts mean"):
    for name, text in VERDICTS.items():
        st.markdown(f"- **{name}**: {text}")
