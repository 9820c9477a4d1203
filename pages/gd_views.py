"""Views the Attention masks and Assumption checks pages share about an attention-gd run (not a
page): where the method stands against Wanda on the run's model (the stored headroom analysis,
or "not yet measured") and, beside it, the detection power of each assumption-check verdict at
the budget and optimiser the run judged. Frames come from core.analysis.gd_standing."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from core.analysis.gd_standing import (
    headroom_frame,
    run_budget,
    standing_sentence,
    verdict_power_frame,
)
from core.methods.attention_gd.audit import TABLE_GROUPS
from core.methods.attention_gd.headroom import caption
from core.methods.attention_gd.verdict_notes import budget_words
from core.store.run_store import Run


@st.cache_data(show_spinner="Measuring the rule's power…", persist="disk")
def power_frame(verdicts: tuple[str, ...], steps: int, optimizer: str) -> pd.DataFrame:
    return verdict_power_frame(verdicts, steps, optimizer)


def show_standing(run: Run, key: str) -> None:
    """The headroom table of the run's model beside the power of each verdict of the run."""
    model = str(run.record.model or run.config.get("model", {}).get("name", "?"))
    st.subheader(f"Where attention-gd stands against Wanda on {model}")
    st.markdown(standing_sentence(model, run.metrics))
    table = headroom_frame(model)
    left, right = st.columns([3, 2])
    with left:
        if table.empty:
            st.info("No headroom analysis of this model is stored: not yet measured.")
        else:
            st.dataframe(table, hide_index=True, key=f"{key}_headroom")
        st.caption(caption(model))
    with right:
        steps, optimizer = run_budget(run.config)
        verdicts: tuple[str, ...] = ()
        if TABLE_GROUPS in run.tables():
            verdicts = tuple(str(v) for v in run.table(TABLE_GROUPS)["verdict"])
        st.dataframe(power_frame(verdicts, steps, optimizer), hide_index=True, key=f"{key}_power")
        st.caption(
            "Each verdict's power: how often the rule gives the right answer on controls with "
            f"known μ and L when it judges runs of at most {budget_words(steps, optimizer)}, as "
            "this "
            "run's groups were judged; groups: how many of this run's groups got that verdict; "
            "if PL holds: how many the control with the layer's spectral density (PL true) "
            "gives for that many groups, with its 95 % interval; if PL fails: the same for x⁴."
        )
