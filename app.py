"""PruneScope app: ``streamlit run app.py`` (or ``make run``).

The entrypoint is the shared frame: page config, the store (interrupted jobs are marked on
start), the sidebar facts, and st.navigation over the page files in pages/. Results live in
the store at $PRUNESCOPE_HOME; pages only draw what core computes.
"""

from __future__ import annotations

import streamlit as st

from core.errors import PruneScopeError
from pages.common import FRAME_KEY, device_info, get_store, list_runs, show_store_error
from pages.links import one_write
from pages.starters import demo_progress

st.set_page_config(page_title="PruneScope", page_icon=":material/content_cut:", layout="wide")

PAGES = [
    st.Page("pages/home.py", title="Home", icon=":material/home:", default=True),
    st.Page("pages/prune.py", title="Prune", icon=":material/content_cut:"),
    st.Page("pages/sweeps.py", title="Sweeps", icon=":material/stacked_line_chart:"),
    st.Page("pages/repdim.py", title="Representation dimension", icon=":material/straighten:"),
    st.Page("pages/attention.py", title="Attention masks", icon=":material/grid_on:"),
    st.Page("pages/assumptions.py", title="Assumption checks", icon=":material/trending_down:"),
    st.Page("pages/compare.py", title="Compare", icon=":material/compare:"),
    st.Page("pages/runs.py", title="Runs", icon=":material/table_view:"),
]

try:
    store = get_store()
except PruneScopeError as exc:  # not writable, or a damaged index (offers the rebuild)
    show_store_error(exc)
reindexed = st.session_state.pop("reindexed", None)
if reindexed is not None:
    st.success(
        f"Index rebuilt from {reindexed.runs} run folder(s); the old one is kept as "
        f"{', '.join(reindexed.kept_aside) or '-'}"
    )
if "reconciled" not in st.session_state:  # once per browser session
    store.reconcile()
    st.session_state["reconciled"] = True

st.session_state[FRAME_KEY] = True
page = st.navigation(PAGES)
pending = st.session_state.pop("pending_page", None)
if pending:  # a deep link that arrived before st.navigation took over (see require_frame)
    st.switch_page(pending)
with st.sidebar:
    dev = device_info()
    where = dev.get("name", "CPU")
    if dev.get("memory_gb"):
        where += f" · {dev['memory_gb']} GB"
    st.caption(f"Device: **{where}**")
    st.caption(f"Results store: `{store.root}`")
    running = list_runs(store, status="running")
    if running:
        st.caption(
            f"In progress: {', '.join(f'{r.method or r.kind} ({r.model})' for r in running)}"
        )
    demo_progress(store)
with one_write():  # the page's selections into the URL in one message (pages.links)
    page.run()
