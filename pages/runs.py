"""Runs: the jobs at work (state and progress from the store's jobs table), every stored run
in one sortable table; compare, delete or export a selection (its ids in the URL, so a link
shows the same runs); recover one selected prune/slice run by fine-tuning
(pages.recovery_views); a prune run's calibration sensitivity (pages.sensitivity_views)."""

from __future__ import annotations

from functools import partial

import streamlit as st

from core import figures, jobs
from core.analysis.tables import runs_frame
from core.errors import PruneScopeError
from core.report import report_html
from pages import links
from pages.common import damaged_runs, get_store, list_runs, require_frame, show_error
from pages.recovery_views import recovery_panel
from pages.sensitivity_views import sensitivity_panel

require_frame(__file__)
LINK_KEY = "runs_from_link"
store = get_store()
st.title("Stored runs")
st.caption(
    f"Everything PruneScope has computed lives in `{store.root}`. Select rows to compare "
    "them on one chart, export them, or delete them. Click a column header to sort."
)

working = jobs.active_jobs(store)  # from the jobs table alone (core.jobs.status)
if working:
    st.subheader("Jobs at work")
    st.dataframe(
        jobs.jobs_frame(working),
        key="jobs_table",
        hide_index=True,
        column_config={
            "progress": st.column_config.ProgressColumn("progress", min_value=0.0, max_value=1.0),
            "elapsed s": st.column_config.NumberColumn(format="%.0f"),
            "eta s": st.column_config.NumberColumn(format="%.0f"),
        },
    )
    if st.button("Refresh", help="re-read the jobs; a job whose process is gone is marked lost"):
        jobs.reconcile_jobs(store)
        st.rerun()

records = list_runs(store)
if not records:
    st.info("The store is empty. Start a run on the Prune page or with `python -m core prune`.")
    st.stop()

table = runs_frame(records)
damaged = damaged_runs(store)  # finished runs whose folder is damaged (core.store.integrity)
if damaged:
    hit = table["id"].isin(damaged)
    table.loc[hit, "status"] = "damaged"
    table.loc[hit, "error"] = table.loc[hit, "id"].map(damaged)
    st.warning(
        f"{len(damaged)} run(s) are damaged (status 'damaged'): select one to read which file "
        "and the way out. They cannot be exported or reported."
    )
# Deleting bumps the version: a fresh table widget, so no stale row selection survives.
version = st.session_state.setdefault("runs_version", 0)
selection = st.dataframe(
    table,
    key=f"runs_table_{version}",
    hide_index=True,
    on_select="rerun",
    selection_mode="multi-row",
    column_config={
        "created": st.column_config.DatetimeColumn("created", format="YYYY-MM-DD HH:mm"),
        "sparsity": st.column_config.NumberColumn(format="%.2f"),
        "ppl": st.column_config.NumberColumn("ppl", format="%.3f"),
        "dense_ppl": st.column_config.NumberColumn("dense ppl", format="%.3f"),
        "achieved_sparsity": st.column_config.NumberColumn("achieved", format="%.3f"),
        "prune_seconds": st.column_config.NumberColumn("prune s", format="%.1f"),
    },
)
rows = selection.selection.rows if selection is not None else []
# a link's runs (?runs=ID&runs=ID) stand for the selection until rows are selected
from_link = st.session_state.setdefault(LINK_KEY, links.take("runs", list(table["id"]), many=True))
if rows:
    st.session_state[LINK_KEY] = None
    chosen = table.iloc[rows]
    st.caption(f"{len(rows)} selected")
elif from_link:
    chosen = table[table["id"].isin(from_link)]
    st.caption(f"The link's {len(chosen)} run(s); select rows to change them.")
else:
    chosen = table
    st.caption("No row selected: the chart shows every run.")
links.publish("runs", list(chosen["id"]) if rows or from_link else None)

st.subheader("Perplexity vs sparsity")
st.plotly_chart(figures.ppl_vs_sparsity(figures.compare_frame(chosen)), key="compare_chart")

if rows:
    ids = list(table.iloc[rows]["id"])
    done_ids = list(table.iloc[rows].query("status == 'done'")["id"])
    st.session_state["selected_run"] = ids[0]
    c1, c2 = st.columns(2)
    with c1:
        if done_ids:
            st.download_button(
                f"Export {len(done_ids)} finished run(s) as zip",
                partial(jobs.export_runs, store, done_ids),
                file_name="prunescope-runs.zip",
                mime="application/zip",
            )
            st.download_button(
                f"Report of {done_ids[0][:8]} (HTML: provenance, metrics, charts)",
                partial(report_html, store, done_ids[0]),
                file_name=f"prunescope-{done_ids[0]}.html",
                mime="text/html",
                help="one self-contained file to share; the first finished run selected",
            )
    with c2:
        confirm = st.checkbox(f"Yes, delete {len(ids)} run(s)", key=f"confirm_delete_{version}")
        if st.button("Delete selected", disabled=not confirm, type="primary"):
            try:
                for run_id in ids:
                    jobs.delete_run(store, run_id)
            except PruneScopeError as exc:
                show_error(exc)
            else:
                st.session_state["runs_version"] = version + 1
                st.toast(f"Deleted {len(ids)} run(s)")
                st.rerun()
    picked = table.iloc[rows]
    for _, row in picked[(picked["status"] != "done") & picked["error"].notna()].iterrows():
        st.error(f"{row['id']} ({row['status']}): {row['error']}")

recovery_panel(store, records)
sensitivity_panel(store, records)
