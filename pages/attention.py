"""Attention masks: W_Q/W_K keep masks of a run, and dense vs pruned attention on a prompt."""

from __future__ import annotations

import json

import pandas as pd
import streamlit as st

from core import figures
from core.demo import PAGE_ATTENTION
from core.errors import DamagedRunError, PruneScopeError
from core.runs import attention_maps as am
from core.store.run_store import Run, RunRecord
from pages.common import (
    get_store,
    list_runs,
    open_section,
    pick_run,
    require_frame,
    run_label,
    show_error,
    store_reads,
)
from pages.gd_views import show_standing
from pages.links import linked
from pages.starters import offer_run

require_frame(__file__)
DEFAULT_PROMPT = "The cat sat on the mat because it was warm, and the dog watched it."
MAX_COMPARE = 8
# Where the per-head error is measured: the typed prompt, or the probes stored at prune time.
SOURCES = {"your prompt": None, "calibration": "calib", "held-out": "heldout"}
MAPS, ERRORS, MASKS = "Attention on a prompt", "Error per head, across runs", "Keep masks"

store = get_store()
st.title("Attention masks")
st.caption(
    "Paper B prunes W_Q and W_K so that softmax attention changes as little as possible. "
    "Here both maps use the same layer input X (the dense model's, for your prompt): only "
    "the run's pruned W_Q/W_K differ, which is exactly the quantity the paper's loss measures."
)


def _targets(rec: RunRecord) -> str | None:
    return (rec.config.get("prune") or {}).get("targets")


@st.cache_data(show_spinner=False, max_entries=4096)
def has_qk(run_id: str, stamp: float, _rec: RunRecord) -> bool:
    """Whether a finished run stored its pruned W_Q/W_K (read once per run: a header of
    its folder, without another index query). A damaged run is listed: picking it says
    what is damaged."""
    try:
        return "layer0.q" in Run(_rec, store.run_dir(run_id)).array_keys("qk")
    except DamagedRunError:
        return True


@st.cache_data(show_spinner=False, max_entries=8)
def with_qk(version: tuple, _records: list[RunRecord]) -> list[str]:
    """Ids of the finished prune runs that stored their pruned W_Q/W_K."""
    return [r.id for r in _records if has_qk(r.id, r.finished or 0.0, r)]


def model_key(rec: RunRecord) -> str:
    """The pristine model a run was pruned from (runs of one model share its attention)."""
    return json.dumps(rec.config.get("model") or rec.model, sort_keys=True)


@st.cache_data(show_spinner="Running the prompt through the dense model…", max_entries=32)
def dense_maps(model: str, _run_id: str, prompt: str, layer: int) -> tuple:
    """(layer input X, dense attention (H, L, L), tokens) of a prompt, once per model."""
    lm = am.pristine_model(store.load(_run_id))
    x = am.prompt_input(lm, prompt, layer)
    return x, am.dense_attention(lm, x, layer), x.tokens


@st.cache_data(show_spinner=False, max_entries=128)
def maps(run_id: str, stamp: float, prompt: str, layer: int) -> tuple:
    """(dense, pruned, tokens) for one run, layer and prompt; ``stamp`` (the run's finish
    time) keys the cache so a recomputed run is not served stale."""
    run = store.load(run_id)
    x, dense, tokens = dense_maps(model_key(run.record), run_id, prompt, layer)
    return dense, am.pruned_attention(am.pristine_model(run), x, run, layer), tokens


@st.cache_data(show_spinner=False, max_entries=256)
def stored_errors(run_id: str, stamp: float, layer: int, text: str) -> list[float]:
    """Per-head relative errors the run measured at prune time (empty if not recorded)."""
    run = store.load(run_id)
    if "attention_errors" not in run.tables():
        return []
    t = run.table("attention_errors")
    t = t[(t["layer"] == layer) & (t["text"] == text)].sort_values("head")
    return t["fro_rel"].tolist()


@st.cache_data(show_spinner=False, max_entries=64)
def masks(run_id: str, stamp: float, layer: int) -> dict:
    return am.keep_masks(store.load(run_id), layer)


def mask_view(run: Run, layer: int, head: int, kv_head: int, head_dim: int, stamp: float) -> None:
    """The W_Q/W_K keep masks of one head, and the attention-GD audit when the run has it."""
    st.subheader("Keep masks of this head")
    keep = masks(run.id, stamp, layer)
    if keep:
        left, right = st.columns(2)
        left.plotly_chart(
            figures.mask_heatmap(am.head_rows(keep["q"], head, head_dim), f"W_Q head {head}"),
            key="mask_q",
        )
        right.plotly_chart(
            figures.mask_heatmap(
                am.head_rows(keep["k"], kv_head, head_dim), f"W_K kv-head {kv_head}"
            ),
            key="mask_k",
        )
        st.caption(
            "Rows: the head's output dimensions; columns: the d input dimensions. Dark = kept."
        )
        if "gd_agreement" in run.tables():
            agree = run.table("gd_agreement")
            here = agree[agree["layer"] == layer].set_index("role")
            cols = st.columns(4)
            for i, role in enumerate(("q", "k")):
                if role in here.index:
                    cols[2 * i].metric(
                        f"W_{role.upper()} kept entries shared with magnitude",
                        f"{here.loc[role, 'agreement_magnitude']:.1%}",
                    )
                    cols[2 * i + 1].metric(
                        f"W_{role.upper()} kept entries shared with Wanda",
                        f"{here.loc[role, 'agreement_wanda']:.1%}",
                    )
            m = run.metrics
            st.caption(
                "Attention-GD audit: fraction of this layer's GD keep mask that the magnitude / "
                "Wanda masks at the same sparsity also keep (100 % = GD reproduced that baseline). "
                f"Whole run: magnitude {m.get('mask_agreement_magnitude', float('nan')):.1%}, "
                f"Wanda {m.get('mask_agreement_wanda', float('nan')):.1%}, "
                f"mean ‖M_T − M₀‖/‖M₀‖ {m.get('mask_delta', float('nan')):.3g}."
            )
    if run.record.method == "attention-gd":
        show_standing(run, "attn")


def error_view(
    run_rec: RunRecord, runs: list[RunRecord], stamps: dict[str, float], prompt: str, layer: int
) -> None:
    """Paper B's data term per head for several runs of one model, on the same X."""
    same_model = [r for r in runs if r.model == run_rec.model]
    labels = {r.id: run_label(r) for r in same_model}
    series = {
        r.id: f"{figures.series_name(r.method, r.pattern, None, False, _targets(r))} "
        f"s={r.sparsity:g}"
        for r in same_model
    }
    if len(set(series.values())) < len(series):  # same method and sparsity twice: tell them apart
        series = {rid: f"{name} [{rid[:4]}]" for rid, name in series.items()}
    c1, c2 = st.columns([2, 1])
    compare = linked(
        c1.multiselect,
        "Runs to compare (same model)",
        list(labels),
        default=[r.id for r in same_model[:MAX_COMPARE]],
        format_func=labels.get,
        key="cmp",
    )
    source = linked(c2.radio, "Measured on", list(SOURCES), key="err_source", horizontal=True)
    rows = []
    for rid in compare:
        if SOURCES[source] is None:
            d, p, _ = maps(rid, stamps[rid], prompt, layer)
            errs = am.head_errors(d, p)["fro_rel"]
        else:
            errs = stored_errors(rid, stamps[rid], layer, SOURCES[source])
        rows += [
            {"series": series[rid], "head": h, "fro_rel": float(v)} for h, v in enumerate(errs)
        ]
    st.plotly_chart(figures.head_error_bars(pd.DataFrame(rows)), key="head_errors")
    st.caption(
        f"‖P̃ − P‖_F / ‖P‖_F of layer {layer} with the same X for every run (Paper B's data "
        "term): on your prompt, or on calibration / held-out windows as measured at prune time."
    )


@st.fragment
def sections(
    run_rec: RunRecord,
    run: Run,
    runs: list[RunRecord],
    stamps: dict[str, float],
    layer: int,
    head: int,
    kv_head: int,
    head_dim: int,
) -> None:
    """The prompt and the three sections, of which only the open tab runs: a fragment, so a
    new prompt or another tab reruns this part alone, and a new prompt costs one run's maps."""
    prompt = linked(
        st.text_area,
        "Prompt",
        value=DEFAULT_PROMPT,
        key="attn_prompt",
        max_chars=400,
        help=f"the first {am.MAX_PROMPT_TOKENS} tokens are used; Ctrl+Enter applies it",
    )
    section, pane = open_section([MAPS, ERRORS, MASKS], key="attn_section")
    with pane, store_reads():
        if section == MASKS:
            mask_view(run, layer, head, kv_head, head_dim, stamps[run.id])
            return
        try:
            if section == ERRORS:
                error_view(run_rec, runs, stamps, prompt, layer)
                return
            dense, pruned, tokens = maps(run.id, stamps[run.id], prompt, layer)
        except PruneScopeError as exc:
            show_error(exc)
            return
        title = f"Layer {layer}, head {head} ({len(tokens)} tokens)"
        st.plotly_chart(
            figures.attention_heatmaps(dense[head], pruned[head], tokens, title), key="attn_maps"
        )


prunes = list_runs(store, kind="prune", status="done")
qk_ids = set(with_qk((str(store.root), *store.version()), prunes))
runs = [r for r in prunes if r.id in qk_ids]
if not runs:
    offer_run(
        store,
        PAGE_ATTENTION,
        "No finished pruning run with stored W_Q/W_K yet (runs of models up to d = 2048 store "
        "them).",
    )
    st.stop()

stamps = {r.id: r.finished or 0.0 for r in runs}
run_rec = pick_run("Run", runs, key="attn_run")
with store_reads():  # a damaged run: its message below the picker
    run = store.load(run_rec.id)
    geo = run.metrics.get("model") or {}
    n_layers, n_heads = int(geo.get("n_layers", 1)), int(geo.get("n_heads", 1))
    n_kv, head_dim = int(geo.get("n_kv_heads", n_heads)), int(geo.get("head_dim", 1))
    c1, c2 = st.columns(2)
    layer = (
        0
        if n_layers < 2
        else linked(
            c1.slider, "Layer", key="attn_layer", min_value=0, max_value=n_layers - 1, value=0
        )
    )
    head = (
        0
        if n_heads < 2
        else linked(
            c2.slider, "Query head", key="attn_head", min_value=0, max_value=n_heads - 1, value=0
        )
    )
    kv_head = head // max(n_heads // n_kv, 1)
    sections(run_rec, run, runs, stamps, layer, head, kv_head, head_dim)
