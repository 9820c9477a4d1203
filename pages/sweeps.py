"""Sweeps: a grid of any method × sparsities × patterns × allocations × seeds, started as a
background job, its grid filling in live, cancelable, and its curves drawn."""

from __future__ import annotations

from typing import Any

import streamlit as st

from core import jobs
from core.cli.reproduce import command_line
from core.errors import PruneScopeError
from core.figures import ppl_vs_sparsity
from core.figures.sweeps import accuracy_curves, sweep_curves
from core.jobs.grid_sweep import (
    GRID_STATES,
    GridStatus,
    cell_grid,
    grid_jobs,
    grid_status,
    grid_table,
    plan_grid_job,
    start_grid_job,
)
from core.names import PRUNED_KINDS
from core.notebooks import grid_notebook
from core.requests.commands import command_fields, defaults, sweep_defaults
from core.requests.sweep_axes import SWEEP_GRID
from core.sweeps.recovery import before_after_frame, recovered_table
from pages.common import (
    current_job,
    fmt_seconds,
    follow_job,
    get_store,
    list_runs,
    require_frame,
    show_error,
)
from pages.forms import (
    PRESET_FIELDS,
    UPLOAD,
    corpus_name,
    draw,
    field_value,
    method_options,
    preset_picker,
    show_estimate,
    speed_for,
    upload_widget,
    widget,
)
from pages.links import linked

require_frame(__file__)

JOB_KEY = "sweep_grid_job"
FIELDS = {f.name: f for f in command_fields("sweep")}
GRID = [*(f.name for f in SWEEP_GRID if f.name != "method"), "targets"]
DATA = ("calib", "nsamples", "calib_seqlen", "eval", "max_windows", "seqlen")
ICONS = {
    "cached": "✔ stored",
    "done": "✅ done",
    "running": "⏳ running",
    "queued": "· queued",
    "failed": "❌ failed",
    "cancelled": "⊘ cancelled",
}


def key(name: str) -> str:
    return f"sw_{name}"


store = get_store()
st.title("Sweeps")
st.caption(
    "A sweep prunes the model at every point of a grid (methods × sparsities × patterns × "
    "allocations × calibration seeds), reuses every point already stored, and draws "
    "perplexity, and accuracy where tasks are asked, against sparsity per method. Fields "
    "and defaults are the Prune page's: the same choice is the same stored run."
)


# ---- form ----------------------------------------------------------------------------------------
def sweep_form(running: bool) -> dict[str, Any] | None:
    """The sweep's settings, drawn from the sweep command's fields; values when Start is
    pressed."""
    preset = preset_picker(key("preset"), [key(n) for n in PRESET_FIELDS])
    # the Prune page's method to start with: the same choice there and here is one run
    methods = widget(FIELDS["method"], defaults("prune")["method"], key("method"))
    start = sweep_defaults(methods or ["wanda"], preset)
    values: dict[str, Any] = {"method": methods}
    c1, c2 = st.columns([1, 2])
    with c1:
        values["model"] = field_value(FIELDS["model"], start["model"], key("model"))
        values["device"] = field_value(FIELDS["device"], start["device"], key("device"))
    with c2:
        values.update(draw([FIELDS[n] for n in GRID], start, key, cols=2))
    with st.expander("Calibration and evaluation data"):
        values.update(draw([FIELDS[n] for n in DATA], start, key, cols=2))
        upload = upload_widget(key("upload"))
        values.update(draw([FIELDS["tasks"], FIELDS["limit"]], start, key, cols=2))
    pairs: list[str] = []
    for method in methods:
        with st.expander(f"Options of {method}"):
            pairs += method_options(method, key(f"opt_{method}"), prefix=f"{method}.")
    values["option"] = pairs
    with st.expander("Advanced: precision, Hub access, data split, seed"):
        values.update(draw([f for f in FIELDS.values() if f.advanced], start, key))
    if not values["tasks"]:
        values.pop("limit")
    show_estimate(lambda: estimate(values))
    if not st.button("Start the sweep", type="primary", disabled=running, key=key("start")):
        return None
    values["calib"] = corpus_name(values["calib"], upload, store)
    values["eval"] = corpus_name(values["eval"], upload, store)
    return values


def estimate(values: dict[str, Any]) -> tuple[float, str]:
    planned = {k: ("pydoc" if v == UPLOAD else v) for k, v in values.items()}
    plan = plan_grid_job(store, planned)
    points = [c for c in plan.configs if c.kind in PRUNED_KINDS]
    stored = {r.id for r in list_runs(store, status="done")}
    todo = sum(1 for c in points if c.run_id not in stored)
    speed = speed_for(store, plan.configs[0].model)
    st.caption(f"Command line: `{command_line('sweep', planned, ['--grid'])}`")
    what = f"{todo} of {len(points)} point(s) to compute, with the dense baseline; {speed.source}"
    return plan.seconds, what


# ---- live grid -----------------------------------------------------------------------------------
def show_grid(status: GridStatus) -> None:
    counts = status.counts()
    total = len(status.cells)
    finished = sum(counts[s] for s in ("cached", "done", "failed", "cancelled"))
    st.progress(finished / total if total else 0.0, text=f"{finished} of {total} runs finished")
    cols = st.columns(len(GRID_STATES))
    for col, state in zip(cols, GRID_STATES, strict=True):
        col.metric(state, counts[state])
    dense = status.cells[~status.cells["kind"].isin(PRUNED_KINDS)]
    if not dense.empty:
        st.caption(
            "Dense baselines: "
            + ", ".join(
                f"{k} {ICONS[s]}" for k, s in zip(dense["kind"], dense["state"], strict=True)
            )
        )
    st.dataframe(cell_grid(status.cells, ICONS), hide_index=True, key=f"grid_{status.job_id}")


@st.fragment(run_every=1.0)
def live_grid(job_id: str) -> None:
    """Polls the sweep once a second: the grid, its counts, Cancel; reruns the page at the
    end."""
    status = grid_status(store, job_id)
    if status.finished:
        st.rerun(scope="app")
    with st.container(border=True):
        st.markdown(f"**Sweep `{job_id}` is {status.state}** · {fmt_seconds(status.elapsed)}")
        show_grid(status)
        if st.button(
            "Cancel the sweep", key=f"cancel_{job_id}", disabled=status.state == "cancelling"
        ):
            jobs.cancel(store, job_id)
            st.rerun(scope="app")


def show_curves(status: GridStatus) -> None:
    table = grid_table(store, list(status.cells["run_id"]))
    st.plotly_chart(sweep_curves(table), key=f"curves_{status.job_id}")
    st.download_button(
        "Export notebook",
        lambda: grid_notebook(store.root, status.job_id),
        file_name=f"prunescope-{status.job_id}.ipynb",
        mime="application/x-ipynb+json",
        key=f"notebook_{status.job_id}",
        help="a Jupyter notebook whose cells rebuild these curves from the store (core.api)",
    )
    if table["acc_mean"].notna().any():
        st.plotly_chart(accuracy_curves(table), key=f"acc_{status.job_id}")
    st.dataframe(table.drop(columns="run_ids"), hide_index=True, key=f"table_{status.job_id}")
    recovered = recovered_table(store, table.to_dict(orient="records"))
    if recovered:  # points recovered by `sweep --recover-steps N` or one by one (Runs page)
        title = "Perplexity before and after recovery fine-tuning"
        frame = before_after_frame(recovered)
        st.plotly_chart(ppl_vs_sparsity(frame, title), key=f"recovered_{status.job_id}")


def outcome(status: GridStatus) -> None:
    if status.state == "done":
        st.success(f"Sweep `{status.job_id}` finished in {fmt_seconds(status.elapsed)}.")
    elif status.state == "cancelled":
        st.warning("The sweep was cancelled; the points it finished are stored.")
    elif status.state == "failed":
        st.error(f"The sweep failed: {status.error}")


def label(status: GridStatus) -> str:
    """'wanda, sparsegpt · s 0.25–0.5 · 5 runs · done  [sweep-…]' for the picker."""
    points = status.cells[status.cells["kind"].isin(PRUNED_KINDS)]
    if points.empty:
        return status.job_id
    methods = ", ".join(dict.fromkeys(points["method"]))
    span = f"s {points['sparsity'].min():g}–{points['sparsity'].max():g}"
    return f"{methods} · {span} · {len(status.cells)} runs · {status.state}  [{status.job_id}]"


# ---- page ----------------------------------------------------------------------------------------
job_id = current_job(JOB_KEY)
status = grid_status(store, job_id) if job_id else None
try:
    values = sweep_form(running=status is not None and not status.finished)
    if values is not None:
        job_id = start_grid_job(store, values)
        follow_job(JOB_KEY, job_id)
        status = grid_status(store, job_id)
except PruneScopeError as exc:
    show_error(exc)

if status is not None and status.state != "unknown":
    if status.finished:
        outcome(status)
    else:
        live_grid(job_id)

st.subheader("Results")
past = grid_jobs(store)
if not past:
    st.info("No sweep yet: choose methods and sparsities above and press Start the sweep.")
else:
    start = past.index(job_id) if job_id in past else 0
    statuses = {j: grid_status(store, j) for j in past}
    chosen = linked(
        st.selectbox,
        "Sweep",
        past,
        index=start,
        key=key("result"),
        format_func=lambda j: label(statuses[j]),
    )
    shown = statuses[chosen]
    if shown.finished:
        show_grid(shown)
    show_curves(shown)
