"""The Streamlit app through AppTest: every page, a real prune job on tiny-llama, error paths.

Stored runs other than the job's are written directly with RunStore (synthetic tables, the
tiny model's real W_Q/W_K), so the pages are checked without the slow methods.
"""

from __future__ import annotations

import math
import re
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from streamlit.testing.v1 import AppTest

from core import jobs
from core.cli.main import build_parser, field_values
from core.cli.reproduce import command_flags
from core.cli.sweep_command import sweep_kind
from core.models.load import load_model
from core.names import DEFAULT_DIM, RELATION_SWEEP
from core.requests import request as requests
from core.settings.config import (
    CalibConfig,
    DataSpec,
    EvalConfig,
    ModelSpec,
    PruneConfig,
    RunConfig,
)
from core.store.run_store import RunStore

APP = str(Path(__file__).resolve().parents[1] / "app.py")
PAGES = ["home", "prune", "repdim", "attention", "assumptions", "runs"]
TINY = ModelSpec("tiny-llama", "cpu", "float32")
DENSE = RunConfig("eval", TINY, EvalConfig(DataSpec("pydoc"), 64, 4))


# ---- helpers -------------------------------------------------------------------------------------
def open_page(name: str, timeout: float = 60) -> AppTest:
    at = AppTest.from_file(APP, default_timeout=timeout)
    at.run()
    if name != "home":
        at.switch_page(f"pages/{name}.py")
        at.run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def texts(elements) -> str:
    return "\n".join(str(e.value) for e in elements)


def button(at: AppTest, label: str):
    return next(b for b in at.button if b.label == label)


def tiny_prune_config(prune: PruneConfig) -> RunConfig:
    """A prune run of tiny-llama on pydoc text, small enough for AppTest."""
    return RunConfig(
        "prune",
        TINY,
        EvalConfig(DataSpec("pydoc"), 64, 4),
        CalibConfig(DataSpec("pydoc", "train"), 4, 64),
        prune,
    )


def fake_prune(store: RunStore, method: str, sparsity: float, keep_q: bool = True) -> str:
    """A finished prune run of tiny-llama with real pruned W_Q/W_K (magnitude masks)."""
    prune = PruneConfig(method, sparsity, options=(("scope", "row"),))
    cfg = tiny_prune_config(prune)
    lm = load_model("tiny-llama")
    qk = {}
    for i, layer in enumerate(lm.adapter.layers):
        for role, lin in lm.adapter.linears(layer, ("q", "k")).items():
            w = lin.weight.detach().clone()
            thr = w.abs().quantile(sparsity)
            qk[f"layer{i}.{role}"] = torch.where(w.abs() > thr, w, 0).half()
    layers = [
        {
            "layer": i,
            "role": r,
            "target_sparsity": sparsity,
            "achieved_sparsity": sparsity,
            "rel_error": 0.1 * (i + 1),
            "seconds": 0.01,
        }
        for i in range(4)
        for r in "qkvo"
    ]
    errors = [
        {"text": text, "layer": i, "head": h, "fro": 0.1, "fro_rel": 0.01 * (h + 1), "tv_max": 0.05}
        for text in ("calib", "heldout")
        for i in range(4)
        for h in range(4)
    ]
    with store.begin(cfg) as w:
        w.write_table("layers", layers)
        w.write_table("attention_errors", errors)
        if keep_q:
            w.write_arrays("qk", qk)
        w.commit(
            {
                "dense_ppl": 250.0,
                "ppl": 250.0 + 100 * sparsity,
                "achieved_sparsity": sparsity,
                "decoder_sparsity": sparsity,
                "prune_seconds": 1.0,
                "effdim_mean_erank": 20 - sparsity,
                "effdim_mean_pca99": 40 - 20 * sparsity,
                "effdim_mean_erank_c": 40 - 20 * sparsity,  # the pre-registered statistic
                "dense_run": DENSE.run_id,
                "model": lm.adapter.describe(),
                "data": {"dataset": "pydoc", "comparable": False},
            }
        )
    return cfg.run_id


def fake_dense(store: RunStore) -> str:
    with store.begin(DENSE) as w:
        w.commit(
            {
                "ppl": 250.0,
                "effdim_mean_pca99": 40.0,
                "effdim_mean_erank": 21.0,
                "effdim_mean_erank_c": 40.0,
            }
        )
    return DENSE.run_id


def fake_gd(store: RunStore) -> str:
    prune = PruneConfig("attention-gd", 0.5, targets="qk", options=(("lam", 0.001),))
    cfg = tiny_prune_config(prune)
    steps = np.arange(6)
    traj, groups, agree = [], [], []
    for layer in range(2):
        for matrix, head in [("group", -1), ("q", 0), ("q", 1), ("k", -1)]:
            loss = 1e-2 * 0.5**steps + 1e-4
            traj += [
                {
                    "layer": layer,
                    "group": 0,
                    "matrix": matrix,
                    "head": head,
                    "step": int(t),
                    "loss": float(loss[t]),
                    "grad_norm": float(loss[t]) * 3,
                    "step_size": 500.0,
                    "lipschitz_est": 1e-3,
                    "pl_ratio": 1e-3,
                }
                for t in steps
            ]
        groups.append(
            {
                "layer": layer,
                "group": 0,
                "verdict": "supported" if layer == 0 else "contradicted",
                "reason": "test",
                "mu_hat": 1e-3,
                "lipschitz_hessian": 2e-3,
                "lipschitz_secant": 1e-3,
                "lipschitz_bound": 2e4,
                "L_star_lo": 1e-4,
                "L_star_hi": 1.1e-4,
                "pl_slope": 0.0,
                "hessian_slope": 0.0,
                "n_points": 10,
                "gap_decades": 2.0,
                "steps": 5,
                "mask_delta": 0.1,
                "attn_fro_rel": 0.01,
            }
        )
        if layer == 1:  # a group the sampled checks left out (checks = sample)
            groups.append({**groups[-1], "group": 1, "verdict": "not_checked", "reason": ""})
        agree += [
            {
                "layer": layer,
                "role": role,
                "kept": 10,
                "shared_magnitude": 8,
                "shared_wanda": 9,
                "agreement_magnitude": 0.8,
                "agreement_wanda": 0.9,
            }
            for role in ("q", "k")
        ]
    with store.begin(cfg) as w:
        w.write_table("gd_trajectory", traj)
        w.write_table("gd_groups", groups)
        w.write_table("gd_agreement", agree)
        w.commit(
            {
                "dense_ppl": 250.0,
                "ppl": 251.0,
                "achieved_sparsity": 0.5,
                "mask_agreement_magnitude": 0.8,
                "mask_agreement_wanda": 0.9,
                "mask_delta": 0.1,
                "gd_verdict": "contradicted",
            }
        )
    return cfg.run_id


def fake_sweep(store: RunStore) -> str:
    cfg = RunConfig("sweep", TINY, extra=(("grid", (0.25, 0.5)),))
    d, ppl0 = 64, 20.0
    rows = [
        {
            "s": s,
            "s_eff": s,
            "d_prime": int(d * (1 - s)),
            "params": 1000,
            "ppl": ppl0 ** (1 / (1 - s)) * 1.1,
            "predicted_ppl": ppl0 ** (1 / (1 - s)),
            "rel_error": -0.09,
            "eff_dim_erank": 10.0 * (1 - s),
        }
        for s in (0.25, 0.5)
    ]
    with store.begin(cfg) as w:
        w.write_table("sweep", rows)
        w.commit({"ppl0": ppl0, "d": d, "a": 0.95, "b": 0.0, "r2": 0.98})
    return cfg.run_id


@pytest.fixture
def filled_store(store) -> dict[str, str]:
    return {
        "dense": fake_dense(store),
        "wanda": fake_prune(store, "wanda", 0.5),
        "magnitude": fake_prune(store, "magnitude", 0.3),
        "gd": fake_gd(store),
        "sweep": fake_sweep(store),
    }


# ---- pages on an empty store ---------------------------------------------------------------------
def test_home_page_says_what_device_and_models(store_root) -> None:
    at = open_page("home")
    body = texts(at.markdown) + texts(at.warning) + texts(at.success)
    assert "PruneScope prunes" in body
    assert ("CPU" in body and "slower" in body) or "GPU" in body
    assert "smollm2-135m" in body and body.index("smollm2-135m") < body.index("tiny-llama")
    assert "gemma3-270m" in body and "Gemma-3-270M" in body  # the second real model (#15)
    formulas = texts(at.latex)
    assert r"\operatorname{RMSNorm}" in formulas and r"1 - s" in formulas
    assert r"\tfrac12 \lambda" in formulas and r"\eta \nabla L" in formulas


# What each page says on an empty store instead of a result (its empty state).
EMPTY_STATE = {
    "prune": "No finished pruning run yet",
    "runs": "The store is empty",
}


@pytest.mark.parametrize("page", PAGES[1:])
def test_pages_render_on_an_empty_store(store_root, page) -> None:
    at = open_page(page)
    assert not at.error
    if page in EMPTY_STATE:
        assert EMPTY_STATE[page] in texts(at.info)
    if page == "prune":  # the form, ready to run, with its estimate
        assert at.selectbox(key="model").value == "smollm2-135m"
        assert re.search(r"Estimated duration: \*\*about \d", texts(at.caption))
        assert [b.label for b in at.button] == ["Run"]
    if page in ("repdim", "attention", "assumptions"):
        # the run it needs, startable in place with its estimated time; the CLI line beside it
        starts = [b.label for b in at.button if b.label.startswith("Run ")]
        assert starts and all(re.search(r"\((about|time unknown|already)", b) for b in starts), (
            starts
        )
        assert "python -m core" in texts(at.caption)


# ---- pages with stored runs ----------------------------------------------------------------------
def test_prune_page_shows_a_stored_result(filled_store) -> None:
    at = open_page("prune")
    assert "gemma3-270m" in at.selectbox(key="model").options  # both real models offered
    at.selectbox(key="result_run").set_value(filled_store["wanda"])
    at.run()
    assert "dense perplexity" in [m.label for m in at.metric]
    assert len(at.get("plotly_chart")) == 2
    assert any("CSV" in b.label for b in at.get("download_button"))


def test_attention_page_draws_masks_maps_and_head_errors(filled_store) -> None:
    at = open_page("attention")
    charts = at.get("plotly_chart")
    assert [c.key for c in charts] == ["attn_maps"]  # lazy tabs: only the open one runs
    at.slider(key="attn_layer").set_value(2)
    at.slider(key="attn_head").set_value(3)
    at.text_area(key="attn_prompt").set_value("def f(x): return x + 1")
    at.run()
    assert not at.exception and not at.error
    at.session_state["attn_section"] = "Error per head, across runs"
    at.run()
    assert [c.key for c in at.get("plotly_chart")] == ["head_errors"]
    assert len(at.multiselect(key="cmp").value) == 2  # both runs of the same model compared
    at.radio(key="err_source").set_value("held-out")
    at.run()
    assert not at.exception and [c.key for c in at.get("plotly_chart")] == ["head_errors"]
    at.session_state["attn_section"] = "Keep masks"
    at.run()
    assert not at.exception
    assert [c.key for c in at.get("plotly_chart")] == ["mask_q", "mask_k"]


def test_attention_page_rejects_an_empty_prompt(filled_store) -> None:
    at = open_page("attention")
    at.text_area(key="attn_prompt").set_value("   ")
    at.run()
    assert "prompt" in texts(at.error)


def test_assumptions_page_trajectories_and_summary(filled_store) -> None:
    at = open_page("assumptions")
    assert [c.key for c in at.get("plotly_chart")] == ["gd_traj"]  # the open tab's only
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["run verdict"] == "contradicted"
    counts = {k: v for k, v in metrics.items() if k.startswith("groups ")}
    assert counts == {  # every group counted once: the headline adds up to its total
        "groups supported": "1 / 3",
        "groups contradicted": "1 / 3",
        "groups inconclusive": "0 / 3",
        "groups not checked": "1 / 3",
    }
    assert "1 of 3 groups not checked: checks = sample judges one group per layer" in texts(
        at.caption
    )
    at.selectbox(key="gd_layer").set_value(1)
    at.run()
    assert not at.exception
    at.session_state["gd_section"] = "How far GD moved"
    at.run()
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["kept entries shared with magnitude"] == "80.0%"
    at.session_state["gd_section"] = "Controls: how to read the curves"
    at.run()
    controls = at.dataframe[0].value  # the rule on the three known functions
    assert list(controls["verdict"]) == list(controls["expected"])
    assert [c.key for c in at.get("plotly_chart")] == ["control_paths"]


def test_repdim_page_sweep_charts_table_and_effdim(filled_store) -> None:
    at = open_page("repdim")
    assert not at.error, texts(at.error)
    assert [c.key for c in at.get("plotly_chart")] == ["ppl_dprime", "ratio_keep"]
    assert {m.label: m.value for m in at.metric}["width d"] == "64"
    at.session_state["repdim_section"] = "Effective dimension"
    at.run()
    assert not at.error, texts(at.error)
    assert [c.key for c in at.get("plotly_chart")] == ["effdim_scatter"]
    assert "mean |prediction error|" in {m.label for m in at.metric}
    assert at.selectbox(key="effdim_measure").value == DEFAULT_DIM  # the pre-registered one
    relation = at.dataframe[0].value
    assert sorted(relation["method"]) == ["magnitude", "wanda"]
    # wanda: d_eff 30 of 40 -> PPL0^(40/30)
    wanda = relation[relation["method"] == "wanda"].iloc[0]
    assert wanda["predicted"] == pytest.approx(250.0 ** (40 / 30))


def test_repdim_page_relation_slider_reads_the_relation(filled_store) -> None:
    at = open_page("repdim")
    at.slider(key="teach_s").set_value(0.5)
    at.run()
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["kept width d′"] == "32 of 64"
    assert metrics["predicted PPL"] == f"{20.0**2:.2f}"  # PPL0^(1/(1-s))
    assert metrics["measured PPL (nearest: s = 0.5)"] == f"{20.0**2 * 1.1:.2f}"


def test_repdim_page_matched_budget_chart(store) -> None:
    dense = fake_dense(store)
    for method, kept, ppl in [
        ("wanda", 0.9, 300.0),
        ("wanda", 0.6, 600.0),
        ("magnitude", 0.9, 400.0),
        ("magnitude", 0.6, 900.0),
    ]:
        cfg = tiny_prune_config(PruneConfig(method, round(1 - kept, 2)))
        with store.begin(cfg) as w:
            w.commit({"ppl": ppl, "dense_run": dense, "kept_params": kept, "latency": 1.0})
    at = open_page("repdim")
    at.session_state["repdim_section"] = "Matched budgets"
    at.run()
    assert not at.exception and not at.error
    assert [c.key for c in at.get("plotly_chart")] == ["budget_chart"]
    table = at.dataframe[0].value  # the matched-budget table
    assert table.loc[0.9, "wanda"] == pytest.approx(300.0)
    assert table.loc[0.75, "magnitude"] == pytest.approx(math.sqrt(400.0 * 900.0))  # ln-linear


def test_runs_page_lists_every_run(filled_store) -> None:
    at = open_page("runs")
    table = at.dataframe[0].value
    assert set(filled_store.values()) <= set(table["id"])
    assert len(at.get("plotly_chart")) == 1


# ---- a real job through the Prune page -----------------------------------------------------------
# The Prune form's values for a run small enough for AppTest: tiny-llama on pydoc text.
TINY_FORM = {
    "model": "tiny-llama",
    "calib": "pydoc",
    "eval": "pydoc",
    "nsamples": 4,
    "calib_seqlen": 64,
    "windows": 4,
    "seqlen": 64,
    "device": "cpu",
}


def open_folds(at: AppTest) -> None:
    """Open every folded section of the page (pages.folds), nested ones too, so that all of
    its widgets are drawn."""
    while closed := [e.key for e in at.expander if e.key and e.key.startswith("fold_")
                     and not at.session_state[e.key]]:  # fmt: skip
        for key in closed:
            at.session_state[key] = True
        at.run()


def fill_prune_form(at: AppTest, fold: bool = False, **values) -> None:
    """Set the form's widgets (TINY_FORM, then ``values``) and press Run; ``fold``: with every
    section folded again first."""
    open_folds(at)
    settings = {**TINY_FORM, **values}
    if "method" in settings:  # the method's own option widgets follow it
        at.selectbox(key="method").set_value(settings.pop("method"))
        at.run()
        open_folds(at)  # the new method's expert fold
    for key, value in settings.items():
        widget_of(at, key).set_value(value)
    if fold:
        at.run()
        for e in at.expander:
            if e.key and e.key.startswith("fold_"):
                at.session_state[e.key] = False
        at.run()
        assert "nsamples" not in [w.key for w in at.number_input]  # folded: not drawn
    button(at, "Run").click()
    at.run()


def widget_of(at: AppTest, key: str):
    """The widget with this key, whatever its kind (selectbox, radio, number, text)."""
    for kind in (at.selectbox, at.radio, at.number_input, at.text_input, at.multiselect):
        try:
            return kind(key=key)
        except KeyError:
            continue
    raise KeyError(key)


def finished(at: AppTest) -> bool:
    return bool(at.success or at.error or at.warning)


@pytest.fixture(scope="module")
def ui_jobs(tmp_path_factory):
    """Three jobs started from three Prune pages at once (they share the start-up time): one
    that succeeds, one whose model does not exist, one cancelled with its Cancel button."""
    mp = pytest.MonkeyPatch()
    mp.setenv("PRUNESCOPE_HOME", str(tmp_path_factory.mktemp("ui") / "store"))
    pages = {name: open_page("prune") for name in ("ok", "bad", "cancel")}
    fill_prune_form(pages["ok"])
    fill_prune_form(
        pages["bad"],
        model="other (local folder or Hugging Face id)",
        custom_model="no-org/missing-model-xyz",
    )
    # Sized to run for most of a minute even on an idle machine, so it is still running when
    # Cancel is clicked (a smaller job could finish first and leave nothing to cancel).
    fill_prune_form(pages["cancel"], windows=4096, seqlen=512, nsamples=1024, calib_seqlen=512)
    store = RunStore()
    slow = pages["cancel"].session_state["job_id"]
    deadline = time.monotonic() + 90
    while jobs.job_status(store, slow).phase is None and time.monotonic() < deadline:
        time.sleep(0.3)
    pages["cancel"].run()
    button(pages["cancel"], "Cancel").click()
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not all(finished(at) for at in pages.values()):
        time.sleep(0.5)
        for at in pages.values():
            if not finished(at):
                at.run()
    yield {"store": store, **pages}
    mp.undo()


def test_prune_job_runs_live_and_shows_results(ui_jobs) -> None:
    at, store = ui_jobs["ok"], ui_jobs["store"]
    assert not at.error, texts(at.error)
    job_id = at.session_state["job_id"]
    assert job_id in texts(at.success)
    assert store.get(job_id).status == "done"
    metrics = {m.label: m.value for m in at.metric}
    assert float(metrics["pruned perplexity"]) > 0 and metrics["achieved sparsity"] == "50.0%"
    assert len(at.get("plotly_chart")) == 2  # sparsity, error
    open_folds(at)
    assert len(at.get("plotly_chart")) == 3  # and the effective dimension per layer, once opened


def test_failed_job_shows_one_error(ui_jobs) -> None:
    at = ui_jobs["bad"]
    assert len(at.error) == 1 and "missing-model-xyz" in at.error[0].value


def test_cancel_button_stops_the_job(ui_jobs) -> None:
    assert "cancelled" in texts(ui_jobs["cancel"].warning)
    assert [r for r in ui_jobs["store"].list() if r.status == "running"] == []


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"method": "attention-gd", "pattern": "2:4"}, "N:M"),
        (
            {"model": "other (local folder or Hugging Face id)", "custom_model": "./nope"},
            "does not exist",
        ),
        ({"calib": "upload a text file"}, "choose a .txt or .jsonl file"),
        ({"method": "attention-gd", "targets": "qk", "opt_attention-gd_step": "fixed"}, "eta"),
        ({"model": "other (local folder or Hugging Face id)", "custom_model": ""}, "empty"),
    ],
)
def test_bad_input_shows_one_error_and_stores_nothing(store, values, message) -> None:
    at = open_page("prune")
    fill_prune_form(at, **values)
    assert len(at.error) == 1 and message in at.error[0].value
    assert "job_id" not in at.session_state
    assert store.list() == []


def test_uploaded_corpus_is_kept_and_the_size_limit_enforced(store) -> None:
    from streamlit import config

    at = open_page("prune")
    open_folds(at)
    at.file_uploader(key="upload").set_value(("notes.txt", b"hello world\n\n" * 100, "text/plain"))
    # every section folded before Run: the file and the values set are still the form's
    fill_prune_form(at, calib="upload a text file", method="attention-gd", pattern="2:4", fold=True)
    assert "N:M" in texts(at.error)  # the corpus was accepted; the pattern was not
    assert [p.suffix for p in (store.root / "uploads").iterdir()] == [".txt"]

    limit = config.get_option("server.maxUploadSize")
    config.set_option("server.maxUploadSize", 1)
    try:
        at = open_page("prune")
        open_folds(at)
        at.file_uploader(key="upload").set_value(("big.txt", b"x" * (2 * 2**20), "text/plain"))
        fill_prune_form(at, calib="upload a text file")
        assert "upload limit is 1 MB" in texts(at.error)
    finally:
        config.set_option("server.maxUploadSize", limit)
    assert store.list() == []


def test_runs_page_compares_exports_and_deletes_a_selection(filled_store, store) -> None:
    at = open_page("runs")
    ids = list(at.dataframe[0].value["id"])
    rows = [ids.index(filled_store["wanda"]), ids.index(filled_store["magnitude"])]
    at.session_state["runs_table_0"] = {"selection": {"rows": rows, "columns": [], "cells": []}}
    at.run()
    assert "2 selected" in texts(at.caption)
    assert at.get("download_button")[0].label == "Export 2 finished run(s) as zip"
    assert button(at, "Delete selected").disabled
    at.checkbox(key="confirm_delete_0").check()
    at.run()
    button(at, "Delete selected").click()
    at.run()
    left = {r.id for r in store.list()}
    assert filled_store["wanda"] not in left and filled_store["magnitude"] not in left
    assert filled_store["gd"] in left
    assert "No row selected" in texts(at.caption)  # the selection does not carry over


def test_sweep_form_uses_the_prune_pages_widgets_and_defaults(store) -> None:
    """Representation dimension's sweep form: the Prune page's widgets (pages.forms), its
    defaults for the shared fields, an estimate, and one clear error for a bad choice."""
    at = open_page("repdim")
    prune = open_page("prune")
    open_folds(prune)
    assert at.selectbox(key="sweep_preset").value == prune.selectbox(key="preset").value
    # (the calibration corpus follows each method's reference: WikiText-2 for SliceGPT, C4
    # for the Prune page's Wanda; core.requests.commands.sweep_reference)
    for name in ("model", "eval", "nsamples", "calib_seqlen", "seqlen"):
        assert widget_of(at, f"sweep_{name}").value == widget_of(prune, name).value, name
    assert widget_of(at, "sweep_max_windows").value == widget_of(prune, "windows").value
    assert at.multiselect(key="sweep_sparsities").value == [0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6]
    assert "Estimated duration" in texts(at.caption)
    at.multiselect(key="sweep_sparsities").set_value([])
    at.run()
    button(at, "Start the sweep").click()
    at.run()
    assert len(at.error) == 1 and "sparsit" in at.error[0].value  # one clear message
    assert store.list() == []


def test_sweep_form_and_cli_give_the_same_run_id(store) -> None:
    """The form's values and the CLI flags built from them plan one run id."""
    at = open_page("repdim")
    values = {"method": "slicegpt"}
    values.update(
        {
            name: widget_of(at, f"sweep_{name}").value
            for name in ("model", "sparsities", "device", "nsamples", "calib_seqlen", "seqlen")
        }
    )
    app = requests.plan_request("sweep", values)
    args = build_parser().parse_args(["sweep", *command_flags("sweep", values)])
    assert sweep_kind(args, field_values(args)) == RELATION_SWEEP
    assert requests.plan_request("sweep", field_values(args)).run_id == app.run_id


@pytest.mark.slow
def test_sweep_started_from_the_page_runs_and_is_shown(store) -> None:
    """The real sweep command through the page's form: an unplanned job found by its pid."""
    at = open_page("repdim")
    at.selectbox(key="sweep_model").set_value("tiny-llama")
    at.multiselect(key="sweep_sparsities").set_value([0.0, 0.25])
    at.selectbox(key="sweep_device").set_value("cpu")
    at.run()
    for name, value in {"calib": "pydoc", "eval": "pydoc"}.items():
        widget_of(at, f"sweep_{name}").set_value(value)
    for name, value in {"nsamples": 4, "calib_seqlen": 64, "seqlen": 64, "max_windows": 4}.items():
        at.number_input(key=f"sweep_{name}").set_value(value)
    at.run()
    button(at, "Start the sweep").click()
    at.run()
    assert not at.error, texts(at.error)
    deadline = time.monotonic() + 180
    while not finished(at) and time.monotonic() < deadline:
        time.sleep(0.5)
        at.run()
    assert not at.error, texts(at.error)
    assert "finished" in texts(at.success)
    assert len(at.get("plotly_chart")) >= 2  # ppl vs d′ and the relation
    assert store.list(kind="sweep", status="done")


def test_unwritable_store_is_one_error(tmp_path, monkeypatch) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    monkeypatch.setenv("PRUNESCOPE_HOME", str(blocker / "store"))
    at = AppTest.from_file(APP, default_timeout=30)
    at.run()
    assert not at.exception
    assert len(at.error) == 1 and "not writable" in at.error[0].value


# ---- zero-shot accuracy ------------------------------------------------------------------------
def fake_accuracy_sweep(store: RunStore) -> str:
    """A sweep with accuracy and (A2) fit tables, as core.slicing.run_relation_sweep writes them."""
    cfg = RunConfig("sweep", TINY, extra=(("grid", (0.25, 0.5)), ("zeroshot", {"tasks": ["piqa"]})))
    d, ppl0 = 64, 20.0
    sweep = [
        {
            "s": s,
            "s_eff": s,
            "d_prime": int(d * (1 - s)),
            "ppl": ppl0 ** (1 / (1 - s)),
            "predicted_ppl": ppl0 ** (1 / (1 - s)),
            "rel_error": 0.0,
        }
        for s in (0.25, 0.5)
    ]
    acc = [
        {
            "s": s,
            "d_prime": int(d * (1 - s)),
            "task": "piqa",
            "label": "PIQA",
            "acc": a,
            "acc_stderr": 0.03,
            "acc_norm": a,
            "n": 200,
            "chance": 0.5,
        }
        for s, a in ((0.0, 0.66), (0.25, 0.6), (0.5, 0.55))
    ]
    fit = [
        {
            "task": t,
            "label": lab,
            "kappa": 0.36,
            "intercept": -0.36,
            "r2": 0.99,
            "held": True,
            "kappa_chance": 0.2,
            "r2_chance": 0.5,
            "held_chance": False,
        }
        for t, lab in (("piqa", "PIQA"), ("mean", "mean of tasks"))
    ]
    with store.begin(cfg) as w:
        w.write_table("sweep", sweep)
        w.write_table("accuracy", acc)
        w.write_table("accuracy_fit", fit)
        w.commit({"ppl0": ppl0, "d": d, "a": 1.0, "b": 0.0, "r2": 1.0, "acc_fit_r2": 0.99})
    return cfg.run_id


def test_repdim_page_shows_accuracy_against_dprime(store) -> None:
    fake_accuracy_sweep(store)
    at = open_page("repdim")
    assert not at.error, texts(at.error)
    assert "Zero-shot accuracy against d′" in texts(at.subheader)
    fits = [df.value for df in at.dataframe if "kappa" in df.value.columns]
    assert fits and list(fits[0]["label"]) == ["PIQA", "mean of tasks"]
    assert "200 items per task" in texts(at.info)


def test_runs_page_has_accuracy_columns_joined_from_zeroshot_runs(store) -> None:
    pruned = fake_prune(store, "wanda", 0.5)
    zs = RunConfig(
        "zeroshot", TINY, extra=(("source_run", pruned), ("zeroshot", {"tasks": ["piqa"]}))
    )
    with store.begin(zs) as w:
        w.commit({"source_run": pruned, "mean_acc": 0.61, "acc_piqa": 0.61})
    table = open_page("runs").dataframe[0].value
    assert {"mean_acc", "acc_piqa"} <= set(table.columns)
    row = table[table["id"] == pruned].iloc[0]
    assert row["mean_acc"] == pytest.approx(0.61) and row["acc_piqa"] == pytest.approx(0.61)
    assert (table[table["id"] == zs.run_id]["dataset"] == "tasks: piqa").all()


def test_prune_page_shows_accuracy_beside_dense(accuracy_runs) -> None:
    at = open_page("prune")
    assert not at.error, texts(at.error)
    assert "Zero-shot accuracy" in texts(at.markdown)
    table = next(df.value for df in at.dataframe if "dense acc" in df.value.columns)
    assert table.iloc[0]["acc"] == pytest.approx(0.6) and table.iloc[0]["dense acc"] == 0.7
