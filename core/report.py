"""A stored run as one self-contained HTML file (``python -m core runs report RUN_ID OUT.html``
and the Runs / Compare pages' export): its provenance (model, revision, data, seeds, code
version, run id), its metrics with 95 % intervals, and its charts as interactive plotly HTML
(plotly.js embedded once, so the file opens offline: what a teacher mails to a class).

Perplexity intervals resample the run's evaluation windows (``core.analysis.uncertainty``, the
same bootstrap the pages use); the dense model's beside it from its own windows.
"""

from __future__ import annotations

import html
import json
from pathlib import Path
from typing import Any

import numpy as np
import plotly.graph_objects as go

from core import figures
from core.analysis.tables import runs_frame
from core.analysis.uncertainty import Interval, ppl_intervals
from core.errors import DamagedRunError, StoreError
from core.names import PARAMS_REMOVED, T_EFFDIM, T_EVAL_WINDOWS, T_LAYERS
from core.store.record import Run
from core.store.run_store import RunStore

SPARSITY_READING = "The sparsity each pruned linear reached, layer by layer."
ERROR_READING = (
    "The relative reconstruction error of each linear's output on calibration inputs: where "
    "the method could not keep what the layer computed."
)
EFFDIM_READING = "The effective dimension of the residual stream, layer by layer."
PPL_READING = "This run's perplexity among every stored run of the same model."
PROVENANCE_ID = "provenance"  # the block's HTML id (the browser test looks for it)
STYLE = """body{font-family:system-ui,sans-serif;max-width:1100px;margin:2em auto;color:#222}
table{border-collapse:collapse;margin:.5em 0 1.5em}td,th{border:1px solid #ccc;padding:3px 8px;
text-align:left}th{background:#f4f4f4}h1{font-size:1.6em}.note{color:#666;font-size:.9em}"""


def _table(rows: list[tuple[str, Any]]) -> str:
    body = "".join(
        f"<tr><th>{html.escape(str(k))}</th><td>{html.escape(_fmt(v))}</td></tr>" for k, v in rows
    )
    return f"<table>{body}</table>"


def _fmt(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.6g}"
    if isinstance(v, dict | list):
        return json.dumps(v, default=str)
    return "—" if v is None else str(v)


def provenance(run: Run) -> list[tuple[str, Any]]:
    """What produced the run: id, kind, model and revision, data, seeds, code version."""
    cfg, env, rec = run.config, run.env, run.record
    model, calib, ev = cfg.get("model") or {}, cfg.get("calib") or {}, cfg.get("eval") or {}
    prune = cfg.get("prune") or {}
    return [
        ("run id", run.id),
        ("kind", rec.kind),
        ("model", model.get("name", rec.model)),
        ("revision", model.get("revision") or "(default)"),
        ("dtype / device", f"{model.get('dtype')} / {model.get('device')}"),
        ("method", prune.get("method")),
        (
            "sparsity / pattern",
            f"{prune.get('sparsity')} / {prune.get('pattern')}" if prune else None,
        ),
        ("targets", prune.get("targets")),
        ("evaluation data", ev.get("data")),
        ("evaluation windows", f"{ev.get('max_windows') or 'all'} × {ev.get('seqlen')} tokens"),
        ("calibration data", calib.get("data")),
        ("calibration", _calib(calib)),
        ("code version (git)", env.get("git_commit")),
        ("torch / transformers", f"{env.get('torch')} / {env.get('transformers')}"),
        ("device used", env.get("device")),
        ("finished", rec.finished),
    ]


def _calib(calib: dict[str, Any]) -> str | None:
    if not calib:
        return None
    return f"{calib.get('nsamples')} × {calib.get('seqlen')} tokens, seed {calib.get('seed')}"


def _window_nll(run: Run) -> np.ndarray | None:
    if T_EVAL_WINDOWS not in run.tables():
        return None
    return run.table(T_EVAL_WINDOWS)["nll"].to_numpy(dtype=float)


def metric_rows(store: RunStore, run: Run) -> list[tuple[str, Any]]:
    """Headline metrics; perplexities with their 95 % bootstrap interval over windows."""
    m = run.metrics
    rows: list[tuple[str, Any]] = []
    nll = _window_nll(run)
    if nll is not None and len(nll) > 1:
        rows.append(("perplexity [95 % interval]", str(ppl_intervals([nll[None]])[0])))
    elif "ppl" in m:
        rows.append(("perplexity", m["ppl"]))
    dense_id = m.get("dense_run")
    if dense_id:
        damaged = None
        try:
            dnll = _window_nll(store.load(dense_id))
        except DamagedRunError as exc:  # this run's report stands; the gap is said
            dnll, damaged = None, str(exc)
        except StoreError:
            dnll = None
        if dnll is not None and len(dnll) > 1:
            iv: Interval = ppl_intervals([dnll[None]])[0]
            rows.append(("dense perplexity [95 % interval]", str(iv)))
        else:
            rows.append(("dense perplexity", m.get("dense_ppl")))
        if damaged:
            rows.append(("dense run damaged (no interval)", damaged))
    for key in (
        "achieved_sparsity",
        "kept_params",
        "mean_acc",
        "dense_mean_acc",
        "d_sliced",
        PARAMS_REMOVED,
        "removed",
        "prune_seconds",
        "n_windows",
        "n_tokens",
    ):
        if key in m:
            rows.append((key, m[key]))
    return rows


def charts(store: RunStore, run: Run) -> list[tuple[go.Figure, str]]:
    """(figure, one-sentence reading) of every chart the pages draw about this run."""
    out: list[tuple[go.Figure, str]] = []
    tables = run.tables()
    if T_LAYERS in tables:
        layers = run.table(T_LAYERS)
        out.append((figures.layer_sparsity_chart(layers), SPARSITY_READING))
        out.append((figures.layer_error_chart(layers), ERROR_READING))
    if T_EFFDIM in tables:
        out.append((figures.effdim_layers(run.table(T_EFFDIM)), EFFDIM_READING))
    same = [r for r in store.list(status="done") if r.model == run.record.model and r.sparsity]
    if same:
        frame = figures.compare_frame(runs_frame(same))
        out.append((figures.ppl_vs_sparsity(frame), PPL_READING))
    return out


def report_html(
    store: RunStore, run_id: str, extra: list[tuple[go.Figure, str]] | None = None
) -> str:
    """The report of a finished run as one HTML string (plotly.js inline); ``extra``: more
    (figure, reading) pairs, e.g. the Compare page's charts of the text on screen."""
    rec = store.get(run_id)
    if rec.status != "done":
        raise StoreError(f"run {rec.id} is {rec.status}; only finished runs have a report")
    run = store.load(rec.id)
    parts = [
        f"<!doctype html><html><head><meta charset='utf-8'><title>PruneScope run {rec.id}"
        f"</title><style>{STYLE}</style></head><body>",
        f"<h1>PruneScope run <code>{rec.id}</code></h1>",
        f"<section id='{PROVENANCE_ID}'><h2>Provenance</h2>{_table(provenance(run))}</section>",
        f"<h2>Metrics</h2>{_table(metric_rows(store, run))}",
        "<p class='note'>Intervals: 95 % percentile bootstrap over evaluation windows.</p>",
        "<h2>Charts</h2>",
    ]
    for i, (fig, reading) in enumerate([*charts(store, run), *(extra or [])]):
        parts.append(fig.to_html(full_html=False, include_plotlyjs=i == 0))
        parts.append(f"<p class='note'>{html.escape(reading)}</p>")
    parts.append(
        f"<h2>Configuration</h2><pre>{html.escape(json.dumps(run.config, indent=2))}</pre>"
    )
    parts.append("</body></html>")
    return "\n".join(parts)


def write_report(
    store: RunStore, run_id: str, out: str | Path, extra: list[tuple[go.Figure, str]] | None = None
) -> Path:
    """Write the report to ``out`` (checked at the edge: core.settings.outputs); the path
    written."""
    path = Path(out)
    text = report_html(store, run_id, extra)  # errors before anything is written
    path.write_text(text)
    return path
