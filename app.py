"""PruneScope app: ``streamlit run app.py`` (or ``make run``).

The entrypoint is the shared frame: page config, the store (interrupted jobs are marked on
start), the sidebar facts, and st.navigation over the page files in pages/. Results live in
the store at $PRUNESCOPE_HOME; pages only draw what core computes.
"""

from __future__ import annotations

import streamlit as st

from pages.common import device_info, get_store

st.set_page_config(page_title="PruneScope", page_icon="✂️", layout="wide")

PAGES = [
    st.Page("pages/home.py", title="Home", icon="🏠", default=True),
    st.Page("pages/prune.py", title="Prune", icon="✂️"),
    st.Page("pages/repdim.py", title="Representation dimension", icon="📐"),
    st.Page("pages/attention.py", title="Attention masks", icon="🔍"),
    st.Page("pages/assumptions.py", title="Assumption checks", icon="📉"),
    st.Page("pages/runs.py", title="Runs", icon="🗂️"),
]

if "reconciled" not in st.session_state:  # once per browser session
    get_store().reconcile()
    st.session_state["reconciled"] = True

page = st.navigation(PAGES)
with st.sidebar:
    dev = device_info()
    where = dev.get("name", "CPU")
    if dev.get("memory_gb"):
        where += f" · {dev['memory_gb']} GB"
    st.caption(f"Device: **{where}**")
    st.caption(f"Results store: `{get_store().root}`")
page.run()
