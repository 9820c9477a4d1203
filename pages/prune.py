"""Prune: configure a run, launch it as a background job, follow it live, read the results."""

from __future__ import annotations

from functools import partial
from pathlib import Path
from typing import Any

import pandas as pd
import streamlit as st

from core import figures, jobs
from core.analysis.tables import DENSE_ACC, accuracy_beside_dense
from core.errors import PruneScopeError
from core.names import PARAMS_REMOVED, PRUNED_KINDS, SLICE, STRUCTURED, T_STRUCTURE
from core.requests.commands import command_fields, defaults
from core.store.run_store import Run
from pages import folds
from pages.common import (
    cli_hint,
    current_job,
    fmt_seconds,
    get_store,
    list_runs,
    pick_run,
    require_frame,
    show_error,
    show_job,
    start_and_follow,
    store_reads,
)
from pages.forms import (
    PRESET_FIELDS,
    corpus_name,
    draw,
    field_value,
    form_plan,
    planned_seconds,
    preset_picker,
    show_estimate,
    typed_method_options,
    upload_widget,
)
from pages.links import linked

require_frame(__file__)

store = get_store()
st.title("Prune a model")
st.caption(
    "A run prunes a copy of the model, evaluates dense and pruned perplexity on the same "
    "windows, and stores per-layer sparsity and reconstruction error. It runs in the "
    "background: you can leave this page and come back."
)


# ---- form ----------------------------------------------------------------------------------------
FIELDS = {f.name: f for f in command_fields("prune")}
KEYS = {"max_windows": "windows"}  # widget keys that differ from the field's name
MAIN = (("model",), ("method", "sparsity", "pattern"), ("targets", "allocation", "device"))
DATA = ("calib", "nsamples", "calib_seqlen", "eval", "max_windows", "seqlen")
SAVE = "Save the pruned model (downloadable as a zip)"
FORCE = "Recompute even if the same run is stored"


def key(name: str) -> str:
    return KEYS.get(name, name)


def form_values(start: dict[str, Any]) -> tuple[dict[str, Any], Any]:
    """Every setting's widget (core.requests.commands); returns the field values and the upload."""
    values: dict[str, Any] = {}
    for column, names in zip(st.columns(3), MAIN, strict=True):
        with column:
            for name in names:
                values[name] = field_value(FIELDS[name], start[name], key(name))
    # folded: drawn only while open, read the same either way (pages.folds)
    with folds.fold("Calibration and evaluation data", "fold_data"):
        values.update(draw([FIELDS[n] for n in DATA], start, key, cols=2))
        upload = upload_widget("upload")
        z1, z2 = folds.columns([3, 1])
        with z1:
            values["tasks"] = field_value(FIELDS["tasks"], start["tasks"], "tasks")
        with z2:
            values["limit"] = field_value(FIELDS["limit"], start["limit"], "limit")
    with folds.fold(f"Options of {values['method']}", "fold_options"):
        values["option"] = typed_method_options(values["method"], f"opt_{values['method']}")
    with folds.fold("Advanced: precision, Hub access, data split, seed, OWL", "fold_advanced"):
        values.update(draw([f for f in FIELDS.values() if f.advanced], start, key))
    if not values["tasks"]:
        values.pop("limit")
    return values, upload


def prune_form(running: bool) -> tuple[dict[str, Any], bool, bool] | None:
    """Draw the form; when Run is pressed return (field values, force flag, save-model flag).
    The estimate, the path caption and the launch take one plan of the values (``form_plan``)."""
    preset = preset_picker("preset", [key(n) for n in PRESET_FIELDS])
    values, upload = form_values(defaults("prune", preset))
    with folds.fold("Output", "fold_output") as shown:
        save = st.toggle(SAVE, key="save_model") if shown else folds.kept("save_model", False)
        force = st.checkbox(FORCE, key="force") if shown else folds.kept("force", False)
    show_estimate(lambda: planned_seconds(store, "prune", values))
    show_path(values)
    if not st.button("Run", type="primary", disabled=running):
        return None
    values["calib"] = corpus_name(values["calib"], upload, store)
    values["eval"] = corpus_name(values["eval"], upload, store)
    return values, force, save


def show_path(values: dict[str, Any]) -> None:
    """Which path the run will take, as planned (the plan's placement, core.planning.fit): in
    memory or streamed from disk one layer at a time, with the figures that chose it. Nothing
    when the values are not runnable (the estimate above says why)."""
    try:
        planned = form_plan(store, "prune", values)
        figures = planned.placement
    except PruneScopeError:
        return
    stream = planned.cfg.model.stream
    path = "**streamed from disk**, one layer at a time" if stream else "**in memory**"
    st.caption(f":material/memory: Runs {path}: {figures.describe()}.")


# ---- results -------------------------------------------------------------------------------------
def headline(run: Run) -> None:
    """Dense vs pruned perplexity and what was removed, in one row of metrics."""
    m = run.metrics
    c = st.columns(5)
    c[0].metric("dense perplexity", f"{m.get('dense_ppl', float('nan')):.3f}")
    delta = m.get("ppl", 0) - m.get("dense_ppl", 0)
    c[1].metric(
        "pruned perplexity",
        f"{m.get('ppl', float('nan')):.3f}",
        f"{delta:+.3f}",
        delta_color="inverse",
    )
    if run.record.kind == SLICE:
        c[2].metric(
            "kept width d′",
            f"{m.get('d_sliced')} of {m.get('d')}",
            help=f"parameters: {m.get('param_ratio', float('nan')):.0%} of the dense model",
        )
    elif run.record.kind == STRUCTURED:
        c[2].metric(
            "decoder parameters removed",
            f"{m.get(PARAMS_REMOVED, float('nan')):.1%}",
            help=str(m.get("removed", "")),
        )
    else:
        c[2].metric(
            "achieved sparsity",
            f"{m.get('achieved_sparsity', 0):.1%}",
            help=f"{m.get('decoder_sparsity', 0):.1%} of all decoder linears",
        )
    c[3].metric("pruning time", fmt_seconds(m.get("prune_seconds")))
    c[4].metric("device", (run.env.get("device") or {}).get("name", run.config["model"]["device"]))
    data = m.get("data") or {}
    if data and not data.get("comparable", True):
        st.caption(f"⚠️ Evaluated on {data.get('dataset')}: not comparable with published figures.")
    if m.get("standing_vs_wanda"):  # attention-gd: the stored headroom analysis of this model
        st.caption(str(m["standing_vs_wanda"]))


def layer_charts(layers: pd.DataFrame) -> None:
    left, right = st.columns(2)
    left.plotly_chart(figures.layer_sparsity_chart(layers), key="sparsity_bars")
    with right:
        error_chart = st.empty()
        log_y = linked(st.toggle, "log scale", key="err_log", value=False)
        error_chart.plotly_chart(figures.layer_error_chart(layers, log_y=log_y), key="error_bars")


def downloads(run: Run, table: pd.DataFrame, name: str) -> None:
    d1, d2 = st.columns(2)
    d1.download_button(
        f"Download the {name} table (CSV)",
        table.to_csv(index=False),
        file_name=f"{name}-{run.id}.csv",
        mime="text/csv",
    )
    saved = run.metrics.get("saved_to")
    if saved and Path(saved).is_dir():
        d2.download_button(
            "Download the pruned model (zip)",
            partial(jobs.zip_folder, Path(saved), f"pruned-{run.id}", False),
            file_name=f"pruned-{run.id}.zip",
            mime="application/zip",
        )
        loader = {
            SLICE: "core.methods.slicegpt.load_sliced",
            STRUCTURED: "core.methods.structure.load_structured",
        }.get(run.record.kind, "transformers' from_pretrained")
        d2.caption(f"Saved at `{saved}` (reload with {loader}).")


def show_accuracy(run: Run) -> None:
    """Zero-shot accuracy per task, pruned beside dense."""
    table, notes = accuracy_beside_dense(store, run)
    st.markdown(
        f"**Zero-shot accuracy** (mean {run.metrics.get('mean_acc', float('nan')):.3f}, dense "
        f"{run.metrics.get('dense_mean_acc', float('nan')):.3f})"
    )
    for note in notes:
        st.caption(note)
    st.dataframe(
        table,
        hide_index=True,
        key="zeroshot_table",
        column_config={
            c: st.column_config.NumberColumn(c, format="%.3f")
            for c in ("acc", "acc_stderr", "acc_norm", DENSE_ACC)
        },
    )


def show_result(run_id: str) -> None:
    with store_reads():  # a damaged run: its message, where its result would be
        draw_result(store.load(run_id))


def draw_result(run: Run) -> None:
    headline(run)
    tables = run.tables()
    if "layers" in tables:
        layer_charts(run.table("layers"))
        downloads(run, run.table("layers"), "layer")
    elif T_STRUCTURE in tables:  # what every dense layer kept (structured methods)
        st.markdown(f"**What each layer kept** ({run.metrics.get('removed', '')})")
        st.dataframe(run.table(T_STRUCTURE), hide_index=True, key="structure")
        downloads(run, run.table(T_STRUCTURE), "structure")
    elif "boundaries" in tables:  # SliceGPT: the PCA cut at every residual boundary
        st.markdown("**Residual boundaries** (PCA energy kept by the first d′ directions)")
        st.dataframe(run.table("boundaries"), hide_index=True, key="boundaries")
        downloads(run, run.table("boundaries"), "boundary")
    else:
        cli_hint("This run has no per-layer table.", "python -m core prune ... --store <store>")
    if "zeroshot" in tables:
        show_accuracy(run)
    if "effdim" in tables:
        with folds.fold(
            "Effective dimension of the residual stream, per layer", "fold_effdim"
        ) as shown:
            if shown:  # a chart: drawn only once opened (pages.folds)
                st.plotly_chart(figures.effdim_layers(run.table("effdim")), key="effdim_layers")
    if run.array_keys("qk"):
        st.page_link(
            "pages/attention.py", label="Look at its attention masks", icon=":material/grid_on:"
        )


# ---- page ----------------------------------------------------------------------------------------
job_id = current_job("job_id")
status = jobs.job_status(store, job_id) if job_id else None
try:
    request = prune_form(running=status is not None and not status.finished)
    if request is not None:
        values, force, save = request
        # the form's plan: the same values unless a corpus was uploaded (its file is named now)
        planned = form_plan(store, "prune", values)
        params = {**values, "force": force}
        status = start_and_follow(store, "job_id", "prune", params, save, planned)
except PruneScopeError as exc:
    show_error(exc)
show_job(store, status, "result_run")

finished = [r for r in list_runs(store, status="done") if r.kind in PRUNED_KINDS]
st.subheader("Results")
if not finished:
    st.info("No finished pruning run yet: configure one above and press Run.")
else:
    chosen = pick_run("Run", finished, key="result_run")
    show_result(chosen.id)
