"""Helpers shared by the pages: the store, run tables, pickers and messages.

Not a page itself (app.py lists the pages with st.navigation). Session state keeps only
small things: ``job_id`` (the Prune page's job) and ``selected_run``.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pandas as pd
import streamlit as st

from core import jobs
from core.errors import PruneScopeError, StoreError, StoreIndexError
from core.names import STAGES
from core.runs.planned import Plan
from core.store.integrity import files_stamp
from core.store.reindex import damage_message, index_damage, rebuild_index
from core.store.run_store import RunRecord, RunStore, default_root
from pages import links

FRAME_KEY = "_frame_ran"  # set by app.py on every run


def require_frame(page_file: str) -> None:
    """Route a page through app.py when Streamlit ran it without the entrypoint.

    On a fresh server, Streamlit's legacy pages/ routing is on until app.py first calls
    st.navigation, so a deep link (/prune) runs the page file alone. Go through app.py, which
    turns that routing off for good, and come back to the page.
    """
    if st.session_state.get(FRAME_KEY):
        return
    links.opened()  # the link's selections, before the redirect drops them from the URL
    st.session_state["pending_page"] = f"pages/{Path(page_file).name}"
    st.switch_page("app.py")


@st.cache_resource(show_spinner=False)
def _open_store(root: str) -> RunStore:
    return RunStore(root)  # creates the folders and reconciles interrupted runs


def get_store() -> RunStore:
    """The results store at $PRUNESCOPE_HOME (read at call time, so tests can point it).
    Its index is checked on every call (a stat and its 100-byte header): a store opened
    earlier whose index was damaged since raises StoreIndexError, not a query's error."""
    root = str(default_root())
    problem = index_damage(root)
    if problem is not None:
        raise StoreIndexError(damage_message(root, problem))
    return _open_store(root)


def show_store_error(exc: PruneScopeError) -> None:
    """The store cannot be opened: its one message, then stop the page. A damaged index
    (core.store.reindex) also gets a button that rebuilds it from the run folders, as
    ``python -m core runs reindex`` does."""
    st.error(str(exc))
    if isinstance(exc, StoreIndexError) and st.button(
        "Rebuild the index from the run folders", icon=":material/build:", type="primary"
    ):
        done = rebuild_index(default_root())
        _open_store.clear()
        _listed.clear()
        st.session_state["reindexed"] = done
        st.rerun()
    st.stop()


@st.cache_data(show_spinner=False, max_entries=16)
def _listed(root: str, version: tuple, kind: str | None, status: str | None) -> list[RunRecord]:
    return _open_store(root).list(kind=kind, status=status)


def list_runs(
    store: RunStore, kind: str | None = None, status: str | None = None
) -> list[RunRecord]:
    """``store.list`` read once per version of the store's index (RunStore.version)."""
    return _listed(str(store.root), store.version(), kind, status)


@st.cache_data(show_spinner=False, max_entries=4)
def _damaged(root: str, version: tuple, stamp: tuple) -> dict[str, str]:
    store = _open_store(root)
    found = {r.id: store.damage(r) for r in store.list(status="done")}
    return {run_id: message for run_id, message in found.items() if message}


def damaged_runs(store: RunStore) -> dict[str, str]:
    """Finished runs whose folder is damaged -> the message naming the file and the way out
    (core.store.integrity); checked again only when the index or a run's files change."""
    stamp = files_stamp(store.root / "runs")
    return _damaged(str(store.root), store.version(), stamp)


@st.cache_resource(show_spinner=False)
def device_info() -> dict[str, Any]:
    from core.machine.device import describe_device, resolve_device

    return describe_device(resolve_device("auto"))


def run_label(r: RunRecord) -> str:
    """Short human label of a run for pickers."""
    if r.kind == "sweep":
        grid = (r.config.get("extra") or {}).get("sparsities") or []
        span = f" s={min(grid):g}…{max(grid):g}" if grid else ""
        return f"{r.model} · {r.method or 'slicegpt'} sweep{span}  [{r.id[:8]}]"
    parts = [r.model or "?", r.method or r.kind]
    if r.sparsity is not None:
        parts.append(f"s={r.sparsity:g}")
    if r.pattern and r.pattern != "unstructured":
        parts.append(r.pattern)
    ppl = r.summary.get("ppl")
    if isinstance(ppl, int | float):
        parts.append(f"ppl {ppl:.2f}")
    return f"{' · '.join(parts)}  [{r.id[:8]}]"


def pick_run(label: str, records: list[RunRecord], key: str) -> RunRecord | None:
    """A selectbox of runs that starts at the link's run (``pages.links``), else at (and
    remembers) ``st.session_state.selected_run``; the chosen run's id goes to the URL."""
    if not records:
        return None
    ids = [r.id for r in records]
    links.restore(key, ids)
    if st.session_state.get(key) not in ids:
        wanted = st.session_state.get("selected_run")
        st.session_state[key] = wanted if wanted in ids else ids[0]
    by_id = {r.id: r for r in records}
    chosen = st.selectbox(label, ids, key=key, format_func=lambda i: run_label(by_id[i]))
    st.session_state["selected_run"] = chosen
    links.publish(key, chosen)
    return by_id[chosen]


def open_section(labels: list[str], key: str, default: str | None = None) -> tuple[str, Any]:
    """Tabs of which only the open one runs (Streamlit's lazy tabs, ``on_change="rerun"``):
    (its label, its container). A page then sends the browser one section's charts, which
    is what keeps it near half a second with hundreds of runs (bench/app_latency.py); every
    other picture stays one click away. The open one is in the URL (``pages.links``)."""
    default = links.take(key, labels) or default
    tabs = st.tabs(labels, key=key, default=default, on_change="rerun")
    for label, tab in zip(labels, tabs, strict=True):
        if tab.open:
            links.publish(key, label)
            return label, tab
    links.publish(key, labels[0])
    return labels[0], tabs[0]


def cli_hint(what: str, command: str) -> None:
    """Say which CLI command produces missing data."""
    st.info(f"{what} Produce it with:\n\n```\n{command}\n```")


def number_table(frame: pd.DataFrame, key: str, fmt: str) -> None:
    """A table whose every column is a number drawn with the printf format ``fmt``."""
    config = {c: st.column_config.NumberColumn(c, format=fmt) for c in frame.columns}
    st.dataframe(frame, key=key, column_config=config)


def show_error(exc: BaseException) -> None:
    """One clear message; user errors without a traceback."""
    if isinstance(exc, PruneScopeError):
        st.error(str(exc))
    else:
        st.error(f"{type(exc).__name__}: {exc}")


@contextmanager
def store_reads() -> Iterator[None]:
    """Draw what reads stored runs: a run that is damaged (core.store.integrity) or gone ends
    the block with its one message; what was drawn before it and the rest of the page stay."""
    try:
        yield
    except StoreError as exc:
        show_error(exc)


def fmt_seconds(s: float | None) -> str:
    if s is None:
        return "–"
    if s < 10:
        return f"{s:.1f} s"
    s = round(s)
    return f"{s // 60}:{s % 60:02d}" if s >= 60 else f"{s} s"


# ---- background jobs -----------------------------------------------------------------------------
def stage_text(status: jobs.JobStatus) -> str:
    """What a running job is doing, in words."""
    if status.phase is None:
        return "starting: loading Python libraries and the model"
    text = STAGES.get(status.stage or "", status.stage or "working")
    if status.phase == "eval":
        text = f"dense baseline: {text}"
    if status.total > 1:
        text += f" ({status.done}/{status.total})"
    detail = status.detail if status.detail and "layer" not in status.detail else ""
    return text + (f" · {detail}" if detail else "")


@st.fragment(run_every=1.0)
def live_progress(store: RunStore, job_id: str) -> None:
    """Polls a job once a second (stage, progress, elapsed, ETA, cancel); reruns the page
    when it ends."""
    status = jobs.job_status(store, job_id)
    if status.finished:
        st.rerun(scope="app")
    frac = status.done / status.total if status.total else 0.0
    with st.container(border=True):
        st.markdown(f"**Job `{job_id[:16]}` is {status.state}**")
        st.progress(min(max(frac, 0.0), 1.0), text=stage_text(status))
        c1, c2, c3 = st.columns([1, 1, 2])
        c1.metric("elapsed", fmt_seconds(status.elapsed))
        c2.metric("ETA (this stage)", fmt_seconds(status.eta))
        if c3.button("Cancel", key=f"cancel_{job_id}", disabled=status.state == "cancelling"):
            jobs.cancel(store, job_id)
            st.rerun(scope="app")


def job_outcome(status: jobs.JobStatus, result_key: str) -> None:
    """One message for a finished job; a new result becomes the selected run once."""
    if status.state == "unknown":  # its run was deleted meanwhile: nothing to say
        return
    if status.state == "done":
        st.success(f"Run `{status.run_id}` finished in {fmt_seconds(status.elapsed)}.")
        if st.session_state.get(f"shown_{result_key}") != status.job_id:
            st.session_state[f"shown_{result_key}"] = status.job_id
            st.session_state["selected_run"] = st.session_state[result_key] = status.run_id
    elif status.state == "cancelled":
        st.warning("The run was cancelled; nothing was stored for it.")
    else:
        st.error(f"The run {status.state}: {status.error or 'no message'}")


def current_job(key: str) -> str | None:
    """The job this page follows: session state, else the URL (?<key>=...) after a reload."""
    if key not in st.session_state and st.query_params.get(key):
        st.session_state[key] = st.query_params[key]
    return st.session_state.get(key)


def follow_job(key: str, job_id: str) -> None:
    """Remember a started job in the session and in the URL, so a reload finds it."""
    st.session_state[key] = job_id
    st.query_params[key] = job_id


def start_and_follow(
    store: RunStore,
    key: str,
    command: str,
    params: dict[str, Any],
    save_model: bool = False,
    plan: Plan | None = None,
) -> jobs.JobStatus:
    """Start ``command`` as a background job, follow it under ``key``; its first status.
    ``plan``: the form's plan of exactly these values (``pages.forms.form_plan``), launched as
    it is; without it the values are planned at the launch."""
    job_id = jobs.start_job(store, command, params, save_model, plan)
    follow_job(key, job_id)
    return jobs.job_status(store, job_id)


def show_job(store: RunStore, status: jobs.JobStatus | None, result_key: str) -> None:
    """A followed job: its outcome once finished, else its live progress (None: nothing)."""
    if status is None:
        return
    if status.finished:
        job_outcome(status, result_key=result_key)
    else:
        live_progress(store, status.job_id)
