"""The Compare page through AppTest on tiny-llama runs: prepared prompts, a typed text, the
empty store's offer."""

from __future__ import annotations

from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from core.runs import run_prune, run_slice
from core.settings.config import CalibConfig, DataSpec, EvalConfig, ModelSpec, PruneConfig

APP = str(Path(__file__).resolve().parents[1] / "app.py")
TINY = ModelSpec("tiny-llama", "cpu", "float32")
EVAL = EvalConfig(DataSpec("pydoc", "test"), seqlen=64, max_windows=2)
CALIB = CalibConfig(DataSpec("pydoc", "train"), nsamples=4, seqlen=64, seed=0)


def open_compare(timeout: float = 120) -> AppTest:
    at = AppTest.from_file(APP, default_timeout=timeout)
    at.run()
    at.switch_page("pages/compare.py")
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    return at


@pytest.fixture
def two_runs(store) -> list[str]:
    wanda = run_prune(TINY, PruneConfig("wanda", 0.5), CALIB, EVAL, store)
    sliced = run_slice(TINY, PruneConfig("slicegpt", 0.25), CALIB, EVAL, store)
    return [wanda["run_id"], sliced["run_id"]]


def test_compare_page_on_an_empty_store_offers_a_run(store_root) -> None:
    at = open_compare()
    assert any(b.label.startswith("Run ") for b in at.button)


def test_compare_page_draws_generations_tokens_and_layers(two_runs) -> None:
    at = open_compare()
    assert not at.error, [e.value for e in at.error]
    assert len(at.multiselect(key="cmp_runs").value) == 1  # one run by default: dense + one
    at.multiselect(key="cmp_runs").set_value(two_runs).run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    charts = at.get("plotly_chart")
    assert len(charts) == 2  # the token map and the per-layer curves
    captions = "\n".join(c.value for c in at.caption)
    assert "nats a token" in captions and "dense model" in captions
    assert "rotated back" in captions  # the SliceGPT run's basis, stated
    at.radio(key="cmp_choice").set_value("A short arithmetic").run()
    assert not at.exception and not at.error
    assert "12 + 7" in "\n".join(m.value for m in at.markdown)
    at.radio(key="cmp_choice").set_value("Your own text").run()
    at.text_area(key="cmp_text").input("Pruning a model changes its words.").run()
    assert not at.exception and not at.error
    assert "changes its words" in "\n".join(m.value for m in at.markdown)
    assert len(at.get("plotly_chart")) == 2
