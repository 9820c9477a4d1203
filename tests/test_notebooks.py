"""The notebooks the Compare, Representation dimension and Sweeps pages export: valid nbformat,
and their code cells, run as one script against a test store, rebuild the page's figure
(the same figure the page's own builders make from the store)."""

from __future__ import annotations

import json
import socket
import subprocess
import time
from dataclasses import replace

import nbformat
import pytest
from test_app_laws import fake_law_sweep

from core import api
from core.errors import ConfigError
from core.evaluation.generate import Decoding
from core.figures.compare import layer_curves, layer_frame, run_series, token_nll_map
from core.figures.laws import laws_chart
from core.figures.sweeps import sweep_curves
from core.jobs.grid_sweep import cell_rows, grid_path, grid_table
from core.names import GRID_SWEEP, T_LAWS
from core.notebooks import compare_notebook, grid_notebook, sweep_notebook
from core.runs import plan_eval, plan_prune, run_prune
from core.runs.comparison import compare_run
from core.settings.config import CalibConfig, DataSpec, EvalConfig, ModelSpec, PruneConfig
from core.store.jobs_table import DONE, JobRow, insert_job

TINY = ModelSpec("tiny-llama", "cpu", "float32")
EVAL = EvalConfig(DataSpec("pydoc", "test"), seqlen=64, max_windows=2)
CALIB = CalibConfig(DataSpec("pydoc", "train"), nsamples=4, seqlen=64, seed=0)


def run_cells(text: str) -> dict:
    """Validate the notebook, then execute its code cells as one script; the namespace."""
    nb = nbformat.reads(text, as_version=4)
    nbformat.validate(nb)
    assert nb.cells[0].cell_type == "markdown" and nb.metadata.kernelspec.name == "python3"
    code = "\n\n".join(c.source for c in nb.cells if c.cell_type == "code")
    namespace: dict = {"__name__": "__notebook__"}
    exec(compile(code, "<notebook>", "exec"), namespace)
    return namespace


def same_figure(a, b) -> bool:
    return json.loads(a.to_json()) == json.loads(b.to_json())


def test_compare_notebook_rebuilds_the_pages_figures(store):
    runs = [
        run_prune(TINY, PruneConfig(m, 0.5), CALIB, EVAL, store)["run_id"]
        for m in ("wanda", "magnitude")
    ]
    text, dec = "The capital of France is", Decoding(5, 0.0, 1.0, 0)
    ns = run_cells(compare_notebook(store.root, runs, text, dec))
    assert ns["STORE"] == str(store.root) and ns["RUNS"] == runs
    # what the Compare page computes for these runs, text and decoding
    page = {}
    for rid in runs:
        rec = store.get(rid)
        page[run_series(rec.method, rec.sparsity, rec.pattern, rid)] = compare_run(
            store, rid, text, dec
        )
    assert list(ns["results"]) == list(page)
    for name, r in ns["results"].items():
        assert r.pruned.new_ids == page[name].pruned.new_ids and len(r.pruned.new_ids) <= 5
    assert same_figure(ns["layer_fig"], layer_curves(layer_frame(page)))
    first = next(iter(page.values()))
    diffs = {n: r.nll_diff for n, r in page.items()}
    assert same_figure(ns["token_fig"], token_nll_map(first.tokens, diffs))
    assert len(ns["layer_fig"].data) == 4  # two runs, two panels


def test_sweep_notebook_rebuilds_the_laws_figure(store):
    m = fake_law_sweep(store)  # κ = 1.3: (A1) rejected, the local first order departs
    sweep = store.list(kind="sweep")[0].id
    ns = run_cells(sweep_notebook(store.root, sweep, "s_eff"))
    view = ns["view"]
    assert view.basis == "s_eff" and view.sentence == m["sentence"]
    assert view.sentence.startswith("(A1) is rejected by the joint test")
    run = store.load(sweep)
    laws = run.table(T_LAWS)
    laws = laws[laws["basis"] == "s_eff"]
    measured = run.table("sweep").assign(s=run.table("sweep")["s_eff"])
    assert same_figure(ns["laws_fig"], laws_chart(laws, measured, run.metrics["ppl0"]))
    assert len(ns["dprime_fig"].data) >= 2  # measured points and PPL₀^(d/d′)
    with pytest.raises(ConfigError, match="basis"):
        api.sweep_view(sweep, basis="d", store=store)


def finished_grid(store) -> tuple[str, list[str]]:
    """A grid sweep job as the Sweeps page finds it once done: its cells and its row of the
    jobs table (a process that has ended, its outcome written); its points are real runs."""
    dense = plan_eval(TINY, EVAL).cfg
    points = [plan_prune(TINY, PruneConfig("magnitude", s), CALIB, EVAL).cfg for s in (0.25, 0.5)]
    for cfg in points:
        run_prune(TINY, cfg.prune, CALIB, EVAL, store)
    configs = [dense, *points]
    job_id = "sweep-test0001"
    grid_path(store, job_id).write_text(json.dumps(cell_rows(configs)))
    ended = subprocess.Popen(["true"])
    ended.wait()
    now = time.time()
    row = JobRow(job_id, GRID_SWEEP, DONE, now - 60, job_id, ended.pid, socket.gethostname())
    insert_job(store, replace(row, heartbeat=now, finished=now))  # as its process left it
    return job_id, [c.run_id for c in configs]


def test_grid_notebook_rebuilds_the_sweeps_curves(store):
    job_id, ids = finished_grid(store)
    ns = run_cells(grid_notebook(store.root, job_id))
    table = ns["table"]
    assert sorted(zip(table["method"], table["sparsity"], strict=True)) == [
        ("dense", 0.0), ("magnitude", 0.25), ("magnitude", 0.5)
    ]  # fmt: skip
    assert same_figure(ns["curves_fig"], sweep_curves(grid_table(store, ids)))
    with pytest.raises(ConfigError, match="no grid sweep"):
        api.sweep_grid("sweep-nope", store=store)
