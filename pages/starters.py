"""Buttons that start the runs a page needs, and the demo set's progress (core.demo).

Not a page. ``demo_progress`` is drawn in the sidebar of every page by app.py; ``offer_run``
is the empty state of an analysis page: the run it needs, its estimated time, a button that
starts it in place, and the CLI line as a secondary hint.
"""

from __future__ import annotations

import streamlit as st

from core import demo, jobs
from core.errors import PruneScopeError
from core.store.run_store import RunStore
from pages.common import (
    current_job,
    fmt_seconds,
    follow_job,
    job_outcome,
    live_progress,
    show_error,
    stage_text,
)

MODEL_KEY = "demo_model"  # the model the demo set and the empty-state buttons use


def demo_model() -> str:
    return st.session_state.get(MODEL_KEY, demo.DEFAULT_MODEL)


@st.cache_data(show_spinner=False, max_entries=64)
def _estimate(root: str, key: str | None, model: str, version: tuple) -> float | None:
    """Estimated seconds of one piece, or of the whole set (key None); None when it cannot
    be planned here (e.g. a model that is not available offline). ``version``: the store's
    (RunStore.version), so pieces become free as they land."""
    store = RunStore(root)
    try:
        if key is None:
            return demo.demo_seconds(store, model)
        return demo.piece_seconds(store, next(p for p in demo.demo_pieces(model) if p.key == key))
    except PruneScopeError:
        return None


def estimate_text(store: RunStore, key: str | None, model: str) -> str:
    seconds = _estimate(str(store.root), key, model, store.version())
    if seconds is None:
        return "time unknown"
    return "already stored" if seconds < 1 else f"about {fmt_seconds(seconds)}"


def demo_progress(store: RunStore) -> None:
    """The demo set's progress in the sidebar: polled every 2 s while it runs (only then, so
    an idle app does not rerun), a one-line outcome once it has finished."""
    status = demo.demo_status(store)
    if status is None:
        return
    if not status.finished:
        _live_demo(store)
        return
    not_done = [i.title for i in status.items if i.state != "done"]
    text = f"Demo set {status.state} in {fmt_seconds(status.elapsed)}"
    st.caption(text + (f" · not done: {', '.join(not_done)}" if not_done else ""))


@st.fragment(run_every=2.0)
def _live_demo(store: RunStore) -> None:
    status = demo.demo_status(store)
    landed = status.n_done if status else 0
    if status is None or status.finished or st.session_state.get("demo_landed", landed) != landed:
        st.session_state["demo_landed"] = landed
        st.rerun(scope="app")  # a finished piece appears on the page being looked at
    st.session_state["demo_landed"] = landed
    now = next((i for i in status.items if i.state == "running"), None)
    doing = f"{now.title}: {stage_text(status.current)}" if now and status.current else "starting"
    st.progress(landed / len(status.items), text=f"Demo set {landed}/{len(status.items)} · {doing}")
    st.caption(f"elapsed {fmt_seconds(status.elapsed)}")


def demo_button(store: RunStore) -> None:
    """Home: start (or cancel) the whole demo set on the chosen model."""
    model = demo_model()
    status = demo.demo_status(store)
    if status is not None and not status.finished:
        _demo_times(store, model)
        if st.button("Cancel the demo set", key="demo_cancel"):
            demo.cancel_demo(store)
            st.rerun()
        return
    label = f"Populate every page ({estimate_text(store, None, model)})"
    if st.button(label, type="primary", key="demo_start", icon=":material/play_arrow:"):
        try:
            demo.start_demo(store, model)
            st.session_state.pop("demo_landed", None)
            st.rerun()
        except PruneScopeError as exc:
            show_error(exc)
    st.caption(
        f"Runs on `{model}`, one after another: "
        + ", ".join(p.title for p in demo.demo_pieces(model))
        + ". Small token counts (the 'demo' preset): real numbers, noisy."
    )


@st.fragment(run_every=2.0)
def _demo_times(store: RunStore, model: str) -> None:
    """The running demo set piece by piece: time taken and the estimate still to go."""
    status = demo.demo_status(store)
    if status is None:
        return
    estimates = {
        p.key: _estimate(str(store.root), p.key, model, store.version())
        for p in demo.demo_pieces(model)
    }
    rows = demo.piece_times(status, estimates)
    left = [r.remaining for r in rows]
    total = "unknown" if None in left else f"about {fmt_seconds(sum(left))}"
    st.info(f"The demo set is running ({status.n_done}/{len(status.items)} done; {total} left).")
    st.table(  # a few rows of text: HTML, so the browser finds them as a reader does
        [
            {
                "piece": r.title,
                "state": r.state,
                "time so far": fmt_seconds(r.elapsed) if r.elapsed is not None else "",
                "still to go": ""
                if r.state not in ("waiting", "running")
                else fmt_seconds(r.remaining),
            }
            for r in rows
        ]
    )


def offer_run(store: RunStore, page: str, missing: str) -> None:
    """Empty state of an analysis page: say what is missing and start the run it needs."""
    model = demo_model()
    piece = demo.piece_for(page, model)
    key = f"{page}_job_id"
    job_id = current_job(key)
    status = jobs.job_status(store, job_id) if job_id else None
    if status is not None and not status.finished:
        st.info(f"{missing} Computing it now: {piece.title} on `{model}`.")
        live_progress(store, job_id)
        return
    if status is not None:
        job_outcome(status, result_key=f"{page}_run")
    queue = demo.demo_status(store)
    if queue is not None and not queue.finished:
        ahead = next((i for i in queue.items if i.key == piece.key), None)
        if ahead is not None and ahead.state in ("waiting", "running"):
            st.info(f"{missing} The demo set is computing it ({piece.title}); it appears here.")
            return
    with st.container(border=True):
        st.markdown(f"**{missing}**")
        eta = estimate_text(store, piece.key, model)
        if st.button(f"Run {piece.title} on {model} ({eta})", type="primary", key=f"{page}_start"):
            try:
                follow_job(key, demo.start_piece(store, piece))
                st.rerun()
            except PruneScopeError as exc:
                show_error(exc)
        st.caption(f"Or from a terminal: `{demo.cli_line(piece)}`")
