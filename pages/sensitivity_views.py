"""The Runs page's calibration-sensitivity section (not a page itself): start the sensitivity of
a finished prune run as a background job (its method re-run with other calibration seeds or
another corpus: core.runs.sensitivity), and show a sensitivity run: the agreement of the
kept weights per layer beside two random masks', each draw, and the perplexity spread."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from core import jobs
from core.errors import PruneScopeError
from core.figures.sensitivity import agreement_chart
from core.names import PRUNE, SENSITIVITY, T_DRAWS
from core.requests.request import sensitivity_request
from core.store.run_store import RunRecord, RunStore
from pages.common import current_job, follow_job, list_runs, pick_run, show_error, show_job
from pages.links import linked

JOB_KEY = "sensitivity_job"
RESULT_KEY = "sensitivity_result"
OWN = "the run's own corpus"
CORPORA = (OWN, "wikitext2", "c4", "pydoc")
DRAW_COLUMNS = ["draw", "seed", "dataset", "jaccard", "kept_again", "ppl", "run_id"]


def show_sensitivity(store: RunStore, run_id: str) -> None:
    """A sensitivity run: headline agreement and floors, the per-layer chart, the draws."""
    run = store.load(run_id)
    m = run.metrics
    spread = m["ppl_spread"]
    c1, c2, c3 = st.columns(3)
    c1.metric(
        "Jaccard of the kept sets", f"{m['jaccard']:.3f}",
        help=f"two random masks at the same sparsity: {m['jaccard_floor']:.3f}; lowest draw "
        f"{m['jaccard_min']:.3f}",
    )  # fmt: skip
    c2.metric(
        "run's kept weights kept again", f"{m['kept_again']:.3f}",
        help=f"two random masks: {m['kept_again_floor']:.3f}",
    )  # fmt: skip
    c3.metric(
        "perplexity over the draws", f"{spread['mean']:.3f} ± {spread['sd']:.3f}",
        help=f"{spread['n']} runs, range {spread['min']:.3f}–{spread['max']:.3f}",
    )  # fmt: skip
    st.caption(
        f"Run `{m['source_run']}` calibrated on {m['source_dataset']}; draws from "
        f"{m['calib_dataset']} with seeds {', '.join(map(str, m['seeds']))}. A draw that is the "
        "run itself (its own seed and corpus) is listed but kept out of the means."
    )
    st.plotly_chart(agreement_chart(pd.DataFrame(m["layers"])), key=f"agreement_{run_id}")
    draws = run.table(T_DRAWS)
    st.dataframe(draws[[c for c in DRAW_COLUMNS if c in draws]], hide_index=True)


def _form(rec: RunRecord, running: bool) -> tuple[str, str | None] | None:
    """Seeds and corpus of a new sensitivity of ``rec``; (seeds, corpus) when sent."""
    with st.form("sensitivity_form"):
        st.markdown(f"**Calibration sensitivity of run `{rec.id}`** ({rec.method}, s = "
                    f"{rec.sparsity})")  # fmt: skip
        c1, c2 = st.columns(2)
        seeds = c1.text_input("Calibration seeds of the draws", "1,2,3", key="sens_seeds")
        corpus = c2.selectbox("Draw from", CORPORA, key="sens_corpus")
        sent = st.form_submit_button("Start the draws", type="primary", disabled=running)
    return (seeds, None if corpus == OWN else corpus) if sent else None


def sensitivity_panel(store: RunStore, records: list[RunRecord]) -> None:
    """Pick a finished prune run (to start its sensitivity) or a sensitivity run to read."""
    st.subheader("Calibration sensitivity")
    st.caption(
        "How much does a mask depend on its calibration data? The run's method is run again "
        "with other calibration draws (or another corpus), and the kept weights are compared "
        "per layer and linear with the run's: Jaccard and the share of its kept weights kept "
        "again, beside what two random masks at that sparsity share, with the perplexity "
        "spread of the draws."
    )
    done = [r for r in records if r.status == "done" and (r.kind == SENSITIVITY or _masked(r))]
    if not done:
        st.info("No finished prune run yet.")
        return
    rec = pick_run("Run", done, key="sensitivity_pick")
    if rec.kind == SENSITIVITY:
        show_sensitivity(store, rec.id)
        return
    job_id = current_job(JOB_KEY)
    status = jobs.job_status(store, job_id) if job_id else None
    try:
        asked = _form(rec, running=status is not None and not status.finished)
        if asked is not None:
            cfg = sensitivity_request(store, rec.id, *asked)
            follow_job(JOB_KEY, jobs.start_config_job(store, cfg))
            status = jobs.job_status(store, st.session_state[JOB_KEY])
    except PruneScopeError as exc:
        show_error(exc)
    show_job(store, status, RESULT_KEY)
    children = [
        r
        for r in list_runs(store, kind=SENSITIVITY, status="done")
        if r.config["extra"]["source_run"] == rec.id
    ]
    if children:
        shown = linked(
            st.selectbox, "Sensitivity runs of this run", [c.id for c in children],
            format_func=lambda i: f"{i[:8]} · {_describe(children, i)}", key="sensitivity_of",
        )  # fmt: skip
        show_sensitivity(store, shown)


def _masked(rec: RunRecord) -> bool:
    """A prune run that stored its keep masks (not streamed)."""
    return rec.kind == PRUNE and rec.config["model"].get("stream") is not True


def _describe(children: list[RunRecord], run_id: str) -> str:
    rec = next(c for c in children if c.id == run_id)
    extra = rec.config["extra"]
    corpus = (extra.get("calib_data") or rec.config["calib"]["data"])["dataset"]
    return f"{corpus}, seeds {', '.join(map(str, extra['seeds']))}"
