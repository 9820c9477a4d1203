"""Prune: configure a run, launch it as a background job, follow it live, read the results."""

from __future__ import annotations

from functools import partial
from pathlib import Path
from typing import Any

import pandas as pd
import streamlit as st

from core import figures, jobs
from core.data import default_data_dir
from core.errors import ConfigError, PruneScopeError, StoreError
from core.fields import PRESETS, app_preset, defaults
from core.methods import available_methods
from core.models import available_models
from core.store import Run
from core.tables import DENSE_ACC, accuracy_beside_dense
from core.zeroshot import TASK_NAMES
from pages.common import (
    cli_hint,
    current_job,
    device_info,
    fmt_seconds,
    follow_job,
    get_store,
    job_outcome,
    live_progress,
    pick_run,
    require_frame,
    show_error,
)

require_frame(__file__)

OTHER_MODEL = "other (local folder or Hugging Face id)"
UPLOAD = "upload a text file"
PATTERNS = ["unstructured", "2:4", "4:8"]
TARGETS = ["all", "attention", "mlp", "qk"]

store = get_store()
st.title("Prune a model")
st.caption(
    "A run prunes a copy of the model, evaluates dense and pruned perplexity on the same "
    "windows, and stores per-layer sparsity and reconstruction error. It runs in the "
    "background: you can leave this page and come back."
)


# ---- form ----------------------------------------------------------------------------------------
def corpus_choices() -> tuple[list[str], int, int]:
    """Corpora offered, and the default calibration / evaluation picks."""
    if default_data_dir():
        return ["wikitext2", "c4", "pydoc", UPLOAD], 1, 0
    return ["pydoc", "wikitext2", "c4", UPLOAD], 0, 0


def device_choices() -> list[str]:
    kind = device_info().get("type")
    return ["auto", "cpu", *([kind] if kind in ("cuda", "mps") else [])]


def save_upload(upload) -> str:
    """Keep an uploaded corpus in the store; return its ``file:`` dataset name."""
    limit_mb = st.get_option("server.maxUploadSize")
    return jobs.save_corpus(store, upload.name, upload.getvalue(), limit_mb)


def corpus_name(choice: str, upload) -> str:
    if choice != UPLOAD:
        return choice
    if upload is None:
        raise ConfigError("choose a .txt or .jsonl file to upload, or pick another corpus")
    return save_upload(upload)


def parse_option_lines(text: str) -> list[str]:
    lines = [ln.strip() for ln in text.splitlines() if ln.strip() and not ln.startswith("#")]
    bad = [ln for ln in lines if "=" not in ln]
    if bad:
        raise ConfigError(f"method options are KEY=VALUE lines; got {bad[0]!r}")
    return lines


def prune_form(running: bool) -> tuple[dict[str, Any], bool] | None:
    """Draw the form; on submit return (CLI parameters, save-model flag)."""
    corpora, calib_default, eval_default = corpus_choices()
    methods = available_methods()
    names = list(PRESETS)
    preset = st.selectbox(
        "Preset",
        names,
        names.index(app_preset(device_info().get("type"))),
        key="preset",
        help="named sets of ordinary values (core.fields): 'reference' is the protocol every "
        "default follows (calibration 32 × 512 C4 train, every evaluation window); 'quick' "
        "keeps a CPU run of the embedded model to minutes",
    )
    start = defaults("prune", preset)
    with st.form("prune_form"):
        c1, c2, c3 = st.columns(3)
        model = c1.selectbox("Model", [*available_models(), OTHER_MODEL], key="model")
        custom = c1.text_input(
            "Model folder or Hugging Face id",
            key="custom_model",
            help=f"used when Model is '{OTHER_MODEL}'",
        )
        method = c2.selectbox(
            "Method",
            methods,
            index=methods.index("wanda") if "wanda" in methods else 0,
            key="method",
        )
        sparsity = c2.number_input(
            "Sparsity",
            0.0,
            0.99,
            0.5,
            0.05,
            key="sparsity",
            help="fraction of the targeted weights to remove, in [0, 1)",
        )
        pattern = c2.selectbox("Pattern", PATTERNS, key="pattern")
        targets = c3.selectbox(
            "Targets",
            TARGETS,
            key="targets",
            help="which linears to prune; attention-gd needs q and k",
        )
        allocation = c3.radio("Allocation", ["uniform", "owl"], horizontal=True, key="allocation")
        device = c3.selectbox("Device", device_choices(), key="device")
        with st.expander("Calibration and evaluation data"):
            d1, d2 = st.columns(2)
            calib = d1.selectbox("Calibration corpus", corpora, index=calib_default, key="calib")
            nsamples = d1.number_input(
                "Calibration sequences", 1, 1024, start["nsamples"], key="nsamples"
            )
            calib_seqlen = d1.number_input(
                "Tokens per sequence",
                8,
                8192,
                start["calib_seqlen"] or start["seqlen"],
                key="calib_seqlen",
            )
            evald = d2.selectbox("Evaluation corpus", corpora, index=eval_default, key="eval")
            windows = d2.number_input(
                "Evaluation windows",
                1,
                4096,
                start["max_windows"],
                key="windows",
                help="the first N windows of the corpus; empty: every window",
            )
            seqlen = d2.number_input(
                "Window length (tokens)", 8, 8192, start["seqlen"], key="seqlen"
            )
            upload = st.file_uploader(
                "Text corpus (.txt or .jsonl with a 'text' field)",
                type=["txt", "jsonl"],
                key="upload",
            )
            st.caption(
                f"Local data folder: `{default_data_dir() or 'none found (pydoc works offline)'}`"
            )
            z1, z2 = st.columns([3, 1])
            tasks = z1.multiselect(
                "Zero-shot tasks (accuracy beside perplexity; none: perplexity only)",
                list(TASK_NAMES),
                key="tasks",
                help="scored as lm-evaluation-harness scores them, on the dense and the pruned "
                "model; files from the local data folder's tasks/, else the Hugging Face Hub",
            )
            limit = z2.number_input("Items per task", 1, 100_000, 100, key="limit")
        with st.expander("Method options and output"):
            options = st.text_area(
                "Method options (KEY=VALUE per line)",
                key="options",
                placeholder="percdamp=0.01\nlam=0.001\nsteps=30",
            )
            save = st.toggle("Save the pruned model (downloadable as a zip)", key="save_model")
            force = st.checkbox("Recompute even if the same run is stored", key="force")
        submitted = st.form_submit_button("Run", type="primary", disabled=running)
    if not submitted:
        return None
    if model == OTHER_MODEL and not custom.strip():
        raise ConfigError("model name is empty: type a local folder or a Hugging Face id")
    params = {
        "model": custom.strip() if model == OTHER_MODEL else model,
        "method": method,
        "sparsity": float(sparsity),
        "pattern": pattern,
        "targets": targets,
        "allocation": allocation,
        "device": device,
        "calib": corpus_name(calib, upload),
        "nsamples": int(nsamples),
        "calib_seqlen": int(calib_seqlen),
        "eval": corpus_name(evald, upload),
        "seqlen": int(seqlen),
        "max_windows": None if windows is None else int(windows),
        "option": parse_option_lines(options),
        "force": force,
    }
    if tasks:
        params.update(tasks=",".join(tasks), limit=int(limit))
    return params, save


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
    if run.record.kind == "slice":
        c[2].metric(
            "kept width d′",
            f"{m.get('d_sliced')} of {m.get('d')}",
            help=f"parameters: {m.get('param_ratio', float('nan')):.0%} of the dense model",
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


def layer_charts(layers: pd.DataFrame) -> None:
    left, right = st.columns(2)
    left.plotly_chart(figures.layer_sparsity_chart(layers), key="sparsity_bars")
    with right:
        error_chart = st.empty()
        log_y = st.toggle("log scale", key="err_log")
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
        loader = (
            "core.methods.slicegpt.load_sliced"
            if run.record.kind == "slice"
            else "transformers' from_pretrained"
        )
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
    try:
        run = store.load(run_id)
    except StoreError as exc:
        show_error(exc)
        return
    headline(run)
    tables = run.tables()
    if "layers" in tables:
        layer_charts(run.table("layers"))
        downloads(run, run.table("layers"), "layer")
    elif "boundaries" in tables:  # SliceGPT: the PCA cut at every residual boundary
        st.markdown("**Residual boundaries** (PCA energy kept by the first d′ directions)")
        st.dataframe(run.table("boundaries"), hide_index=True, key="boundaries")
        downloads(run, run.table("boundaries"), "boundary")
    else:
        cli_hint("This run has no per-layer table.", "python -m core prune ... --store <store>")
    if "zeroshot" in tables:
        show_accuracy(run)
    if "effdim" in tables:
        with st.expander("Effective dimension of the residual stream, per layer"):
            st.plotly_chart(figures.effdim_layers(run.table("effdim")), key="effdim_layers")
    if run.array_keys("qk"):
        st.page_link(
            "pages/attention.py", label="Look at its attention masks", icon=":material/grid_on:"
        )


# ---- page ------------------------------------------------------------------------------------------
job_id = current_job("job_id")
status = jobs.job_status(store, job_id) if job_id else None
try:
    request = prune_form(running=status is not None and not status.finished)
    if request is not None:
        params, save = request
        job_id = jobs.start_job(store, "prune", params, save)
        follow_job("job_id", job_id)
        status = jobs.job_status(store, job_id)
except PruneScopeError as exc:
    show_error(exc)

if status is not None:
    if status.finished:
        job_outcome(status, result_key="result_run")
    else:
        live_progress(store, job_id)

finished = [r for r in store.list(status="done") if r.kind in ("prune", "slice")]
st.subheader("Results")
if not finished:
    st.info("No finished pruning run yet: configure one above and press Run.")
else:
    chosen = pick_run("Run", finished, key="result_run")
    show_result(chosen.id)
