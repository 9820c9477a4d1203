"""Views you can link to (AppTest): a page opened from a copied URL shows the same selection,
and writes the selection it shows back to the URL; a link naming what the store no longer has
falls back to the page's defaults."""

from __future__ import annotations

import pytest
from streamlit.testing.v1 import AppTest
from test_app import APP, fake_prune, texts
from test_app_laws import fake_law_sweep

from core.runs import execute, run_prune
from core.runs.sensitivity import plan_sensitivity
from core.settings.config import CalibConfig, DataSpec, EvalConfig, ModelSpec, PruneConfig

TINY = ModelSpec("tiny-llama", "cpu", "float32")
EVAL = EvalConfig(DataSpec("pydoc", "test"), seqlen=64, max_windows=2)
CALIB = CalibConfig(DataSpec("pydoc", "train"), nsamples=4, seqlen=64, seed=0)


def open_link(page: str, params: dict, timeout: float = 120) -> AppTest:
    """The app opened at ``page`` from a URL with ``params`` (as a pasted link opens it)."""
    at = AppTest.from_file(APP, default_timeout=timeout)
    for name, value in params.items():
        at.query_params[name] = value
    at.run()
    if page != "home":
        at.switch_page(f"pages/{page}.py")
        at.run()
    assert not at.exception, [e.value for e in at.exception]
    return at


@pytest.fixture
def tiny_runs(store) -> list[str]:
    """Two real tiny-llama prune runs (Wanda, then magnitude)."""
    return [
        run_prune(TINY, PruneConfig(m, 0.5), CALIB, EVAL, store)["run_id"]
        for m in ("wanda", "magnitude")
    ]


def test_compare_page_opens_the_linked_runs_decoding_and_prompt(tiny_runs) -> None:
    wanda, magnitude = tiny_runs
    prompt = "Pruning changes what a model says."
    link = {
        "cmp_model": "tiny-llama",
        "cmp_runs": [wanda, magnitude],
        "cmp_tokens": "5",
        "cmp_t": "0.0",
        "cmp_choice": "Your own text",
        "prompt": prompt,
    }
    at = open_link("compare", link)
    assert not at.error, texts(at.error)
    assert at.multiselect(key="cmp_runs").value == [wanda, magnitude]
    assert at.number_input(key="cmp_tokens").value == 5
    assert at.radio(key="cmp_choice").value == "Your own text"
    assert at.text_area(key="cmp_text").value == prompt
    assert prompt in texts(at.markdown)  # the generations continue the linked text
    assert len(at.get("plotly_chart")) == 2
    # the URL holds the view shown (a copy of it opens the same view)
    shown = at.query_params
    assert shown["cmp_runs"] == [wanda, magnitude] and shown["prompt"] == prompt
    assert shown["cmp_tokens"] == "5" and shown["cmp_choice"] == "Your own text"
    assert "Export notebook" in [b.label for b in at.get("download_button")]
    # opened again from that URL: the same selection
    again = open_link("compare", dict(shown))
    assert again.multiselect(key="cmp_runs").value == [wanda, magnitude]
    assert again.text_area(key="cmp_text").value == prompt


def test_a_stale_link_falls_back_to_the_defaults(tiny_runs) -> None:
    at = open_link("compare", {"cmp_runs": ["0" * 16], "cmp_tokens": "999", "cmp_choice": "x"})
    assert not at.error, texts(at.error)
    assert len(at.multiselect(key="cmp_runs").value) == 1  # the page's default: one run
    assert at.number_input(key="cmp_tokens").value == 32
    assert at.radio(key="cmp_choice").value == "A fact"


def test_attention_page_opens_the_linked_run_layer_head_and_section(store) -> None:
    first = fake_prune(store, "magnitude", 0.5)
    second = fake_prune(store, "wanda", 0.3)
    link = {"attn_run": first, "attn_layer": "2", "attn_head": "3", "attn_section": "Keep masks"}
    at = open_link("attention", link)
    assert not at.error, texts(at.error)
    assert at.selectbox(key="attn_run").value == first != second
    assert at.slider(key="attn_layer").value == 2 and at.slider(key="attn_head").value == 3
    keys = [c.key for c in at.get("plotly_chart")]
    assert keys == ["mask_q", "mask_k"]  # the linked tab is the open one
    assert at.query_params["attn_section"] == "Keep masks"
    assert at.query_params["attn_run"] == first and at.query_params["attn_layer"] == "2"


def test_repdim_page_opens_the_linked_basis_and_held_out_view(store) -> None:
    sweep = fake_law_sweep(store)
    link = {"repdim_section": "SliceGPT sweep", "sweep_run": sweep, "law_basis": "s_eff",
            "law_error_kind": "loo", "teach_s": "0.4"}  # fmt: skip
    at = open_link("repdim", link)
    assert not at.error, texts(at.error)
    assert at.radio(key="law_basis").value == "s_eff"
    assert at.radio(key="law_error_kind").value == "loo"
    assert at.slider(key="teach_s").value == pytest.approx(0.4)
    assert "Verdict (achieved s_eff" in texts(at.info)
    assert at.query_params["law_basis"] == "s_eff"


def test_prune_form_and_result_open_from_a_link(store) -> None:
    run = fake_prune(store, "magnitude", 0.5)
    fake_prune(store, "wanda", 0.3)
    link = {"method": "sparsegpt", "sparsity": "0.7", "pattern": "2:4", "result_run": run,
            "err_log": "True"}  # fmt: skip
    at = open_link("prune", link)
    assert not at.error, texts(at.error)
    assert at.selectbox(key="method").value == "sparsegpt"
    assert at.number_input(key="sparsity").value == pytest.approx(0.7)
    assert at.selectbox(key="result_run").value == run
    assert at.toggle(key="err_log").value is True


def test_runs_page_shows_the_linked_runs_and_sensitivity(store, tiny_runs) -> None:
    wanda, magnitude = tiny_runs
    sens = execute(plan_sensitivity(store, wanda, (1,)), store)["run_id"]
    at = open_link("runs", {"runs": [magnitude], "sensitivity_pick": sens})
    assert not at.error, texts(at.error)
    assert "The link's 1 run(s)" in texts(at.caption)
    chart = next(c for c in at.get("plotly_chart") if c.key == "compare_chart")
    assert "magnitude" in chart.proto.spec and "wanda" not in chart.proto.spec
    assert at.selectbox(key="sensitivity_pick").value == sens
    labels = {m.label for m in at.metric}
    assert {"Jaccard of the kept sets", "run's kept weights kept again"} <= labels
    assert at.query_params["runs"] == magnitude


def five_linked_numbers() -> None:
    """An AppTest script: five linked widgets, drawn inside one_write unless told not to."""
    from contextlib import nullcontext

    import streamlit as st

    from pages.links import linked, one_write

    with one_write() if st.session_state.get("batched", True) else nullcontext():
        for i in range(5):
            linked(st.number_input, f"n{i}", key=f"n{i}", value=i)


@pytest.mark.parametrize("batched", [True, False])
def test_a_page_run_writes_its_selections_to_the_url_in_one_message(monkeypatch, batched) -> None:
    """Each write to st.query_params is a message, which the browser takes as a history entry:
    inside one_write (the frame runs every page in it) a run sends one message at most, and a
    run that changed no selection sends none; outside it, one per changed selection."""
    from streamlit.runtime.state.query_params import QueryParams

    sent: list[str] = []
    send = QueryParams._send_query_param_msg

    def counted(self) -> None:
        sent.append(str(self))
        send(self)

    monkeypatch.setattr(QueryParams, "_send_query_param_msg", counted)
    at = AppTest.from_function(five_linked_numbers)
    at.session_state["batched"] = batched
    at.run()
    assert dict(at.query_params) == {f"n{i}": str(i) for i in range(5)}
    assert len(sent) == (1 if batched else 5)
    sent.clear()
    at.run()
    assert sent == []  # nothing changed
    at.number_input(key="n3").set_value(7)
    at.number_input(key="n4").set_value(8)
    at.run()
    assert len(sent) == (1 if batched else 2) and at.query_params["n3"] == "7"
