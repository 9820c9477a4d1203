"""The Representation dimension page's matched-budget view of the structured methods: ln PPL
against the parameters removed and against the dimension, one trace per method, and the
verdict of core.analysis.predictors beside it (AppTest on stored synthetic runs); the Prune
form offers the structured methods from the registry."""

from __future__ import annotations

import json

import numpy as np
from test_app import TINY, fake_dense, open_page, texts
from test_predictors import synthetic_runs

from core.analysis.predictors import YES
from core.names import DEFAULT_DIM, PARAMS_REMOVED, SLICE, STRUCTURED, T_EVAL_WINDOWS
from core.runs import run_prune
from core.settings.config import CalibConfig, DataSpec, EvalConfig, PruneConfig, RunConfig
from core.store.run_store import RunStore

TIMEOUT = 180  # the page's first run imports the app's modules: slow on a busy 2-core machine
KINDS = {"slicegpt": SLICE, "shortgpt": STRUCTURED, "flap": STRUCTURED, "wanda-sp": STRUCTURED}


def fake_structured(store: RunStore, dense: str) -> None:
    """Slice and structured runs whose ln PPL the dimension predicts (the rule's positive
    control), stored as their kinds store them: per-window NLLs, the fraction removed, d′/d
    (SliceGPT) or the effective dimension beside the dense run's 40."""
    runs = synthetic_runs("dim", np.random.default_rng(0))
    for r in runs.itertuples():
        cfg = RunConfig(
            KINDS[r.method],
            TINY,
            EvalConfig(DataSpec("pydoc"), 64, 4),
            CalibConfig(DataSpec("pydoc", "train"), 4, 64, seed=r.seed),
            PruneConfig(r.method, 0.0, budget=r.point),
        )
        metrics = {"ppl": float(np.exp(r.nll.mean())), "dense_run": dense}
        metrics[PARAMS_REMOVED] = r.params_removed
        if r.method == "slicegpt":
            metrics.update(d=64, d_sliced=64 * r.dim_ratio)
        else:
            metrics[DEFAULT_DIM] = 40.0 * r.dim_ratio
        with store.begin(cfg) as w:
            w.write_table(T_EVAL_WINDOWS, [{"window": i, "nll": v} for i, v in enumerate(r.nll)])
            w.commit(metrics)


def test_matched_budget_view_draws_each_method_and_the_verdict(store) -> None:
    fake_structured(store, fake_dense(store))
    at = open_page("repdim", timeout=TIMEOUT)
    at.session_state["repdim_section"] = "Dimension or parameters"
    at.run()
    assert not at.exception and not at.error, texts(at.error)
    charts = at.get("plotly_chart")
    assert [c.key for c in charts] == ["dim_or_params_chart"]
    figure = json.loads(charts[0].proto.spec)
    names = {t["name"] for t in figure["data"]}
    assert names == set(KINDS)  # one trace per method, in both panels
    assert len(figure["data"]) == 2 * len(KINDS)
    verdict = {m.label: m.value for m in at.metric}["Does the dimension predict ln PPL better?"]
    assert verdict == YES
    assert "representation dimension predicts" in texts(at.markdown)
    table = at.dataframe[0].value
    assert (
        set(table.index) == set(KINDS)
        and (table["MSE, dimension"] < table["MSE, parameters"]).all()
    )


def test_prune_page_offers_the_structured_methods_and_shows_their_runs(store) -> None:
    """The form's methods come from the registry; a stored FLAP run shows what it removed."""
    res = run_prune(
        TINY,
        PruneConfig("flap", budget=0.25),
        CalibConfig(DataSpec("pydoc", "train"), 4, 64),
        EvalConfig(DataSpec("pydoc"), 64, 4, 4),
        store,
    )
    at = open_page("prune", timeout=TIMEOUT)
    assert {"shortgpt", "flap", "wanda-sp"} <= set(at.selectbox(key="method").options)
    at.selectbox(key="result_run").set_value(res["run_id"])
    at.run()
    assert not at.exception and not at.error, texts(at.error)
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["decoder parameters removed"] == f"{res['metrics'][PARAMS_REMOVED]:.1%}"
    assert len(at.dataframe[0].value) == 4  # one row per layer of tiny-llama
