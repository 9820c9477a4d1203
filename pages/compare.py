"""Compare: dense and pruned side by side on your own text, token by token and layer by layer."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from core.analysis.departure import departure_reading, generation_reading, nll_reading
from core.demo import PAGE_ATTENTION
from core.errors import PruneScopeError
from core.evaluation.generate import Decoding
from core.figures.compare import layer_curves, layer_frame, lens_frame, run_series, token_nll_map
from core.names import PRUNED_KINDS
from core.notebooks import compare_notebook
from core.report import report_html
from core.runs import comparison as cmp
from core.store.record import RunRecord
from pages.common import fmt_seconds, get_store, list_runs, require_frame, run_label, show_error
from pages.links import linked
from pages.starters import offer_run

require_frame(__file__)
MAX_RUNS = 4
OWN = "Your own text"
# the decoding widgets' ranges: value, min, max, step
NEW_TOKENS = dict(value=32, min_value=1, max_value=128)
TEMPERATURE = dict(value=0.0, min_value=0.0, max_value=2.0, step=0.1)
TOP_P = dict(value=1.0, min_value=0.05, max_value=1.0, step=0.05)
SEED = dict(value=0, min_value=0, max_value=2**31 - 1)

store = get_store()
st.title("Compare")
st.caption(
    "What did pruning change in what the model *says*? Pick runs of one model and a text: "
    "their continuations beside the dense model's (same decoding), the tokens that became "
    "harder, and the layer from which each run parts from the dense model."
)

records = [
    r for kind in PRUNED_KINDS for r in list_runs(store, kind=kind, status="done") if r.model
]
if not records:
    offer_run(store, PAGE_ATTENTION, "No finished pruning run to compare yet.")
    st.stop()

models = list(dict.fromkeys(r.model for r in records))
c1, c2 = st.columns([1, 2])
model = linked(c1.selectbox, "Model", models, key="cmp_model")
of_model = [r for r in records if r.model == model]
labels = {r.id: run_label(r) for r in of_model}
chosen = linked(
    c2.multiselect,
    "Runs to compare (same model)",
    list(labels),
    default=list(labels)[:1],
    format_func=labels.get,
    max_selections=MAX_RUNS,
    key="cmp_runs",
)
if not chosen:
    st.info("Pick at least one run.")
    st.stop()
by_id: dict[str, RunRecord] = {r.id: r for r in of_model}

with st.expander("Decoding (the same for the dense model and every run)"):
    d1, d2, d3, d4 = st.columns(4)
    new_tokens = linked(d1.number_input, "New tokens", key="cmp_tokens", **NEW_TOKENS)
    temperature = linked(d2.number_input, "Temperature (0 = greedy)", key="cmp_t", **TEMPERATURE)
    top_p = linked(d3.number_input, "Top-p", key="cmp_top_p", **TOP_P)
    seed = linked(d4.number_input, "Seed", key="cmp_seed", **SEED)
dec = Decoding(int(new_tokens), float(temperature), float(top_p), int(seed))


def name_of(run_id: str) -> str:
    r = by_id[run_id]
    return run_series(r.method or r.kind, r.sparsity, r.pattern, run_id)


def announce_rebuilds(run_ids: list[str]) -> None:
    """Say which runs are rebuilt by re-running their pruning, and for about how long."""
    for rid in run_ids:
        run = store.load(rid)
        secs = cmp.rebuild_seconds(run)
        if cmp.how_built(run) == "rebuilt" and not cmp.model_cached(run):
            st.info(
                f"{name_of(rid)} stored no masks: its model is rebuilt once by re-running its "
                f"pruning (about {fmt_seconds(secs)}), then kept for this session."
            )


def generations(text: str, run_ids: list[str]) -> dict[str, cmp.RunComparison]:
    """Continuations side by side, streamed into their columns on a first computation."""
    cols = st.columns(len(run_ids) + 1)
    cols[0].markdown("**Dense**")
    slots = {cmp.DENSE: cols[0].empty()}
    for col, rid in zip(cols[1:], run_ids, strict=True):
        col.markdown(f"**{name_of(rid)}**")
        slots[rid] = col.empty()
    shown: dict[str, list[int]] = {k: [] for k in slots}
    out: dict[str, cmp.RunComparison] = {}
    tokenizer = cmp.tokenizer_of(store.load(run_ids[0]))

    def on_token(who: str, tok: int) -> None:
        shown[who].append(tok)
        slots[who].markdown(f"{text} **{tokenizer.decode(shown[who])}**")

    for rid in run_ids:
        res = cmp.compare_run(store, rid, text, dec, on_token)
        out[rid] = res
        slots[cmp.DENSE].markdown(f"{text} **{res.dense.text}**")
        slots[rid].markdown(f"{text} **{res.pruned.text}**")
    for col, rid in zip(cols[1:], run_ids, strict=True):
        res = out[rid]
        col.caption(generation_reading(res.dense.new_ids, res.pruned.new_ids, name_of(rid)))
    cols[0].caption(dec.describe())
    return out


def token_view(results: dict[str, cmp.RunComparison]) -> list:
    first = next(iter(results.values()))
    diffs = {name_of(rid): r.nll_diff for rid, r in results.items()}
    fig = token_nll_map(first.tokens, diffs)
    st.plotly_chart(fig, key="cmp_tokens_map")
    for rid, r in results.items():
        st.caption(nll_reading(r.mean_nll_diff, r.worst(), name_of(rid)))
    worst = [{"run": name_of(rid), **w} for rid, r in results.items() for w in r.worst()[:5]]
    st.dataframe(pd.DataFrame(worst), hide_index=True, key="cmp_worst")
    return [(fig, "Per-token NLL of each run minus the dense model's on this text.")]


def layer_view(results: dict[str, cmp.RunComparison]) -> list:
    fig = layer_curves(layer_frame({name_of(rid): r for rid, r in results.items()}))
    st.plotly_chart(fig, key="cmp_layers")
    readings = [departure_reading(r.layers.kl, name_of(rid)) for rid, r in results.items()]
    for line in readings:
        st.caption(line)
    for rid, r in results.items():
        if r.note != cmp.SAME_BASIS:  # SliceGPT: the basis it was compared in, stated
            st.caption(f"{name_of(rid)}: {r.note}")
    with st.expander("Logit lens: what each layer would predict next (last position)"):
        first = next(iter(results.values()))
        tok = cmp.tokenizer_of(store.load(first.run_id))
        dense_top = [(tok.decode([i]), p) for i, p in first.layers.dense_top]
        runs_top = {
            name_of(rid): [(tok.decode([i]) if i >= 0 else "?", p) for i, p in r.layers.pruned_top]
            for rid, r in results.items()
        }
        st.dataframe(lens_frame(len(dense_top), dense_top, runs_top), hide_index=True)
    return [(fig, " ".join(readings))]


TEXT_KEY = "cmp_text"


def _prepared(run, choice: str) -> str:
    """The prompt box's text for a choice: the prepared prompt, or empty for your own."""
    return "" if choice == OWN else cmp.prompt_text(run, choice)


def _choose_text(run) -> None:
    """A new choice of text puts its prepared prompt in the box."""
    st.session_state[TEXT_KEY] = _prepared(run, st.session_state["cmp_choice"])


@st.fragment
def comparison(run_ids: list[str]) -> None:
    """The text and the three views: a fragment, so a new text reruns this part alone."""
    try:
        first = store.load(run_ids[0])
    except PruneScopeError as exc:  # e.g. a damaged run (core.store.integrity)
        show_error(exc)
        return
    choice = linked(
        st.radio,
        "Text",
        [*cmp.PROMPTS, OWN],
        horizontal=True,
        key="cmp_choice",
        help="a prepared prompt of the teaching path, or your own text",
        on_change=_choose_text,
        args=(first,),
    )
    # One prompt box under one key: a key per choice made a second box while a run drew the
    # new one, and text typed into the old one was lost.
    st.session_state.setdefault(TEXT_KEY, _prepared(first, choice))
    text = linked(
        st.text_area,
        "Prompt",
        key=TEXT_KEY,
        param="prompt",
        max_chars=2000,
        help="continued by every model, and scored token by token; Ctrl+Enter applies it",
    )
    if not text.strip():
        st.info("Type a text to compare.")
        return
    try:
        announce_rebuilds(run_ids)
        st.subheader("Generations")
        results = generations(text, run_ids)
        st.subheader("Where it hurts, token by token")
        extra = token_view(results)
        st.subheader("Where it parts from the dense model, layer by layer")
        extra += layer_view(results)
    except PruneScopeError as exc:
        show_error(exc)
        return
    left, right = st.columns(2)
    left.download_button(
        f"Report of {name_of(run_ids[0])} (HTML)",
        lambda: report_html(store, run_ids[0], extra),
        file_name=f"prunescope-{run_ids[0]}.html",
        mime="text/html",
        key="cmp_report",
    )
    right.download_button(
        "Export notebook",
        lambda: compare_notebook(store.root, run_ids, text, dec),
        file_name=f"prunescope-compare-{run_ids[0][:8]}.ipynb",
        mime="application/x-ipynb+json",
        key="cmp_notebook",
        help="a Jupyter notebook whose cells rebuild these figures from the store (core.api)",
    )


comparison(chosen)
