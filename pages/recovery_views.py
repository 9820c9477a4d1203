"""The Runs page's recovery section (not a page itself): a form that fine-tunes the selected
prune or slice run's model as a background job (live progress, cancel), and each of its
recoveries' curve and perplexities before and after. Fields, defaults and checks come from
the recover command's table (core.requests.recovery) through the one request path."""

from __future__ import annotations

from typing import Any

import streamlit as st

from core import figures, jobs
from core.data import default_data_dir
from core.errors import PruneScopeError
from core.names import PRUNED_KINDS, RECOVER, T_RECOVERY
from core.requests.commands import command_fields, defaults
from core.store.run_store import Run, RunRecord, RunStore
from pages import forms
from pages.common import (
    current_job,
    fmt_seconds,
    list_runs,
    pick_run,
    show_error,
    show_job,
    start_and_follow,
    store_reads,
)

JOB_KEY = "recover_job"
RESULT_KEY = "recover_result"
BASIC = ("steps", "method", "rank", "lr", "batch_size", "nsamples", "calib_seqlen")
ADVANCED = ("alpha", "every", "curve_windows", "seed")
CORPORA = ("c4", "wikitext2", "pydoc")


def _form(rec: RunRecord, running: bool) -> dict[str, Any] | None:
    """The recovery settings as widgets; the field values when the form is sent."""
    fields = {f.name: f for f in command_fields(RECOVER)}
    start = defaults(RECOVER)
    key = lambda name: f"recover_{name}"  # noqa: E731
    with st.form("recover_form"):
        st.markdown(f"**Recover run `{rec.id}`** ({rec.method}, s = {rec.sparsity})")
        values = forms.draw([fields[n] for n in BASIC], start, key, cols=4)
        with st.expander("Advanced"):
            values.update(forms.draw([fields[n] for n in ADVANCED], start, key, cols=4))
            corpus = start["calib"] if default_data_dir() else "pydoc"
            values["calib"] = forms.widget(fields["calib"], corpus, key("calib"), CORPORA)
        sent = st.form_submit_button("Start recovery", type="primary", disabled=running)
    return {"run": rec.id, **values} if sent else None


def show_recovery(store: RunStore, run_id: str) -> None:
    """A recover run: perplexity before/after beside the dense model's, the curve, the zeros."""
    with store_reads():  # a damaged run: its message in its place
        draw_recovery(store.load(run_id))


def draw_recovery(run: Run) -> None:
    run_id = run.id
    m = run.metrics
    c1, c2, c3, c4 = st.columns(4)
    c1.metric("perplexity before", f"{m['parent_ppl']:.3f}")
    delta = f"{m['ppl'] - m['parent_ppl']:+.3f}"
    c2.metric("perplexity after", f"{m['ppl']:.3f}", delta, delta_color="inverse")
    c3.metric("dense perplexity", f"{m['dense_ppl']:.3f}")
    c4.metric("fine-tune time", fmt_seconds(m["recover_seconds"]))
    if m.get("achieved_sparsity") is not None:
        same = "exactly the parent's zeros" if m["zero_set_kept"] else "ZEROS CHANGED"
        st.caption(
            f"achieved sparsity {m['achieved_sparsity']:.6f} (parent "
            f"{m['parent_achieved_sparsity']:.6f}): {same}; {m['steps']} steps of "
            f"{m['recover_method']}, peak memory {m['peak_rss_mb']:.0f} MiB"
        )
    left, right = st.columns(2)
    with left:
        curve = run.table(T_RECOVERY)
        st.plotly_chart(figures.recovery_curve(curve, m["parent_ppl"]), key=f"curve_{run_id}")
    with right:
        st.plotly_chart(figures.before_after(m), key=f"before_after_{run_id}")


def recovery_panel(store: RunStore, records: list[RunRecord]) -> None:
    """Pick a finished prune/slice run to recover (starting at the selected run), or a
    recover run to look at."""
    st.subheader("Recovery fine-tuning")
    st.caption(
        "Fine-tune a run's model on calibration text while keeping its zeros (LoRA merged "
        "with the mask re-applied, or masked fine-tuning); stored as a new run linked to it."
    )
    done = [
        r
        for r in records
        if r.status == "done"
        and (
            r.kind == RECOVER
            or (r.kind in PRUNED_KINDS and r.config["model"].get("stream") is not True)
        )
    ]
    if not done:
        st.info("No finished prune or slice run to recover yet.")
        return
    rec = pick_run("Run to recover", done, key="recover_pick")
    if rec.kind == RECOVER:
        show_recovery(store, rec.id)
    else:
        recovery_section(store, rec)


def recovery_section(store: RunStore, rec: RunRecord) -> None:
    """The form recovering ``rec`` (a finished prune/slice run), its job and its recoveries."""
    job_id = current_job(JOB_KEY)
    status = jobs.job_status(store, job_id) if job_id else None
    try:
        params = _form(rec, running=status is not None and not status.finished)
        if params is not None:
            status = start_and_follow(store, JOB_KEY, RECOVER, params)
    except PruneScopeError as exc:
        show_error(exc)
    show_job(store, status, RESULT_KEY)
    children = [
        r
        for r in list_runs(store, kind=RECOVER, status="done")
        if r.config["extra"]["recover"]["parent"] == rec.id
    ]
    for child in children:
        with st.container(border=True):
            st.markdown(f"Recovery run `{child.id}`")
            show_recovery(store, child.id)
