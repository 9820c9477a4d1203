"""Compare and the run report in a real browser (Debian's Chromium via Playwright).

A fresh store is populated with two tiny-llama runs (Wanda 50 % and SliceGPT s = 0.25, the
demo set's kinds at test size; the demo set itself on the embedded model is
tests/test_e2e_browser.py's), the app is started, and Compare must show the generations, the
token-NLL map and the per-layer curves for two runs and a prepared prompt, then update for a
typed text. The report written by ``python -m core runs report`` must open with its charts
drawn and its provenance block. Slow: run with ``make test``.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
from appserver import (
    CHROMIUM,
    choose,
    chromium_page,
    open_page,
    streamlit_server,
    wait_charts,
    wait_idle,
    wait_run,
)

pytestmark = [
    pytest.mark.slow,
    pytest.mark.long,
    pytest.mark.skipif(
        not Path(CHROMIUM).exists(), reason=f"{CHROMIUM} missing (apt-get install chromium)"
    ),
]
HEATMAP = "[data-testid='stPlotlyChart'] .heatmaplayer"
ERRORS = "[data-testid='stAlertContentError'], [data-testid='stException']"


@pytest.fixture
def populated(tmp_path) -> tuple[Path, list[str]]:
    """A fresh store with two finished tiny-llama runs; (root, their ids)."""
    from core.runs import run_prune, run_slice
    from core.settings.config import CalibConfig, DataSpec, EvalConfig, ModelSpec, PruneConfig
    from core.store.run_store import RunStore

    root = tmp_path / "store"
    store = RunStore(root)
    parts = (
        ModelSpec("tiny-llama", "cpu", "float32"),
        CalibConfig(DataSpec("pydoc", "train"), nsamples=4, seqlen=64),
        EvalConfig(DataSpec("pydoc", "test"), seqlen=64, max_windows=2),
    )
    wanda = run_prune(parts[0], PruneConfig("wanda", 0.5), *parts[1:], store)
    sliced = run_slice(parts[0], PruneConfig("slicegpt", 0.25), *parts[1:], store)
    return root, [wanda["run_id"], sliced["run_id"]]


def labels_of(root: Path, run_ids: list[str]) -> list[str]:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from core.store.run_store import RunStore
    from pages.common import run_label

    store = RunStore(root)
    # whitespace collapsed, as the browser names a multiselect's options (the label has two
    # spaces before the id)
    return [" ".join(run_label(store.get(rid)).split()) for rid in run_ids]


def open_compare_with_two_runs(page, url: str, root: Path, run_ids: list[str]) -> None:
    open_page(page, url, "Compare", timeout_ms=120_000)
    chosen = page.get_by_role("combobox", name="Runs to compare (same model)", exact=True)
    picker = page.locator("[data-testid='stMultiSelect']").first
    for label in labels_of(root, run_ids):
        shown = " ".join(picker.inner_text().split())  # the chosen runs' chips
        if label not in shown:  # not chosen yet (a chosen run is not among the options)
            choose(page, "Runs to compare (same model)", label)
    assert chosen.is_visible()
    wait_idle(page, 120_000)
    wait_charts(page, 60_000)


def no_error(page, log: Path) -> None:
    assert page.locator(ERRORS).count() == 0, page.locator(ERRORS).all_inner_texts()
    assert not any("Traceback" in line for line in log.read_text().splitlines())


def test_compare_two_runs_on_a_prepared_prompt(tmp_path, populated) -> None:
    pytest.importorskip("playwright")
    root, run_ids = populated
    log = tmp_path / "server.log"
    with streamlit_server(root, log) as url, chromium_page() as page:
        open_compare_with_two_runs(page, url, root, run_ids)
        before = page.evaluate("() => window.__psRuns.finished")
        page.get_by_text("A short arithmetic", exact=True).click()
        wait_run(page, before, 120_000)
        wait_charts(page, 60_000)
        main = page.locator("[data-testid='stMain']")
        assert main.get_by_text("Dense", exact=True).is_visible()  # the generations' columns
        assert main.get_by_text(re.compile(r"12 \+ 7")).count() >= 3  # dense + two runs
        assert page.locator(HEATMAP).count() == 1  # the token-NLL map
        assert page.get_by_text("KL(dense ‖ pruned) of the logit lens").count() == 1
        assert main.get_by_text(re.compile("rotated back")).count() >= 1  # SliceGPT, stated
        no_error(page, log)


def test_compare_updates_for_a_typed_prompt(tmp_path, populated) -> None:
    pytest.importorskip("playwright")
    root, run_ids = populated
    log = tmp_path / "server.log"
    with streamlit_server(root, log) as url, chromium_page() as page:
        open_compare_with_two_runs(page, url, root, run_ids)
        page.get_by_text("Your own text", exact=True).click()
        box = page.get_by_label("Prompt", exact=True)
        # the fragment reruns with an empty text box of its own (no comparison to wait for)
        page.wait_for_function(
            "() => [...document.querySelectorAll('textarea')].some(t => t.value === '')",
            timeout=60_000,
        )
        box.fill("Pruning a model changes the words it picks.")
        before = page.evaluate("() => window.__psRuns.finished")
        box.press("Control+Enter")
        wait_run(page, before, 120_000)
        wait_charts(page, 60_000)
        main = page.locator("[data-testid='stMain']")
        assert main.get_by_text(re.compile("changes the words it picks")).count() >= 3
        assert page.locator(HEATMAP).count() == 1
        no_error(page, log)


def test_report_opens_with_charts_and_provenance(tmp_path, populated) -> None:
    pytest.importorskip("playwright")
    from core.cli.main import main
    from core.report import PROVENANCE_ID

    root, run_ids = populated
    out = tmp_path / "report.html"
    assert main(["runs", "report", run_ids[0], str(out), "--store", str(root)]) == 0
    with chromium_page() as page:
        page.goto(out.as_uri())
        page.wait_for_function(
            """() => { const c = [...document.querySelectorAll('.plotly-graph-div')];
                       return c.length > 0 && c.every(d => d.querySelector('.main-svg')); }""",
            timeout=30_000,
        )
        assert page.locator(".plotly-graph-div").count() >= 2
        prov = page.locator(f"#{PROVENANCE_ID}")
        assert prov.is_visible() and run_ids[0] in prov.inner_text()
        assert "code version" in prov.inner_text()
