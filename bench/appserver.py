"""Start the app in a subprocess and drive Debian's Chromium with Playwright.

Shared by tests/test_e2e_browser.py, tests/test_e2e_compare.py and bench/app_latency.py. Never
runs ``playwright install``: the browser is /usr/bin/chromium (apt-get install chromium).

When a script run ends is read exactly, without a fixed sleep: every page gets an init
script (RUN_COUNTER) whose MutationObservers keep, in ``window.__psRuns``, the count of the
``stApp`` element's ``data-test-script-state`` changes to ``notRunning`` (finished runs; a
fragment's run counts too), the ``performance.now()`` of the last run's start and end, and
of the last DOM change inside a Plotly chart (its drawing) or removal of a skeleton. An action
reads the count first (``runs_finished``) and then waits until the count has passed it
(``wait_run``).

A page loaded anew can end its script run while the browser still shows skeletons: Streamlit
loads the code of its widgets and of Plotly on demand, in every new document, and draws a
placeholder (``stSkeleton``) meanwhile. A page is drawn once no skeleton is left and every
chart has its SVG (``wait_charts``).
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
IDLE = "[data-testid='stApp'][data-test-script-state='notRunning']"
# Waits poll their predicate in the page every POLL_MS, not on every animation frame: a
# per-frame poll runs querySelector on the main thread the timed page draws on, and the
# times themselves come from the page's own stamps (RUN_COUNTER), not from when a poll saw.
POLL_MS = 50
CHART = "[data-testid='stPlotlyChart']"
SKELETON = "[data-testid='stSkeleton']"
# See the module docstring. tStart/tEnd: the last run's start and end; tDraw: the last change
# inside a chart, all in performance.now() milliseconds (0 = the document's navigation start).
RUN_COUNTER = """
(() => {
  const runs = (window.__psRuns = {finished: 0, tStart: 0, tEnd: 0, tDraw: 0});
  new MutationObserver((records) => {
    for (const r of records) {
      const now = r.target.getAttribute("data-test-script-state");
      if (now === r.oldValue) continue;
      if (now === "running") runs.tStart = performance.now();
      if (now === "notRunning") { runs.finished++; runs.tEnd = performance.now(); }
    }
  }).observe(document, {subtree: true, attributes: true, attributeOldValue: true,
                        attributeFilter: ["data-test-script-state"]});
  const skeleton = (n) => n.nodeType === 1 &&
    (n.matches("[data-testid=stSkeleton]") || n.querySelector("[data-testid=stSkeleton]"));
  new MutationObserver((records) => {
    for (const r of records) {
      const el = r.target.nodeType === 1 ? r.target : r.target.parentElement;
      if ((el && el.closest("[data-testid=stPlotlyChart]")) ||
          [...r.removedNodes].some(skeleton)) {
        runs.tDraw = performance.now();
        return;
      }
    }
  }).observe(document, {subtree: true, childList: true, attributes: true});
})();
"""
# url path of each page (st.Page derives it from the file name; Home is the default "/").
PAGES = {
    "Home": "",
    "Prune": "prune",
    "Sweeps": "sweeps",
    "Representation dimension": "repdim",
    "Attention masks": "attention",
    "Assumption checks": "assumptions",
    "Compare": "compare",
    "Runs": "runs",
}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_health(url: str, timeout: float = 90.0) -> None:
    """Poll /_stcore/health until the server answers ok."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with (
            contextlib.suppress(OSError),
            urllib.request.urlopen(f"{url}/_stcore/health", timeout=2) as resp,
        ):
            if resp.read().strip() == b"ok":
                return
        time.sleep(0.3)
    raise TimeoutError(f"streamlit at {url} did not become healthy in {timeout:.0f} s")


@contextlib.contextmanager
def streamlit_server(
    store_root: Path,
    log_file: Path | None = None,
    *,
    warmed: bool = True,
    script: Path | None = None,
    timings: dict | None = None,
    prepare: bool = False,
) -> Iterator[str]:
    """The app on a free port with PRUNESCOPE_HOME=store_root; yields its URL.

    warmed: started as ``make run`` starts it (``python -m pages.serve``: imports and
    per-process caches paid before the port opens); False: plain ``streamlit run app.py``,
    every cost left to the first page. script: ``streamlit run`` this script instead of the
    app (a reference). prepare: run make run's set-up step (``python -m core prepare``) first,
    as a newcomer's first ``make run`` does on an empty user cache.
    ``timings["start_s"]`` (when given): seconds from launch to a healthy server;
    ``timings["prepare_s"]``: the set-up step's seconds.
    """
    port = free_port()
    env = dict(os.environ, PRUNESCOPE_HOME=str(store_root), HF_HUB_OFFLINE="1")
    log_file = log_file or Path(tempfile.mkstemp(prefix="streamlit-", suffix=".log")[1])
    if script is not None:
        launcher = ["-m", "streamlit", "run", str(script)]
    else:
        launcher = ["-m", "pages.serve"] if warmed else ["-m", "streamlit", "run", "app.py"]
    cmd = [
        sys.executable,
        *launcher,
        "--server.port",
        str(port),
        "--server.headless",
        "true",
        "--server.address",
        "127.0.0.1",
        "--browser.gatherUsageStats",
        "false",
    ]
    if prepare:
        t0 = time.monotonic()
        subprocess.run([sys.executable, "-m", "core", "prepare"], cwd=ROOT, env=env, check=True)
        if timings is not None:
            timings["prepare_s"] = time.monotonic() - t0
    t0 = time.monotonic()
    with log_file.open("w") as log:
        proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_health(url)
        if timings is not None:
            timings["start_s"] = time.monotonic() - t0
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@contextlib.contextmanager
def chromium_page(width: int = 1500, height: int = 1000) -> Iterator:
    """A Playwright page in Debian's headless Chromium with a fresh profile."""
    from playwright.sync_api import sync_playwright

    with tempfile.TemporaryDirectory(prefix="chromium-") as profile, sync_playwright() as p:
        ctx = p.chromium.launch_persistent_context(
            profile,
            executable_path=CHROMIUM,
            args=CHROMIUM_ARGS,
            headless=True,
            viewport={"width": width, "height": height},
        )
        ctx.add_init_script(RUN_COUNTER)
        try:
            yield ctx.pages[0] if ctx.pages else ctx.new_page()
        finally:
            ctx.close()


def runs_finished(page) -> int:
    """Script runs finished in this document so far (0 right after a load)."""
    return page.evaluate("() => window.__psRuns ? window.__psRuns.finished : 0")


def wait_run(page, after: int, timeout_ms: int = 60_000) -> None:
    """Wait until a script run has finished since the count was ``after``, and none runs."""
    page.wait_for_function(
        f"""n => window.__psRuns && window.__psRuns.finished > n
                 && document.querySelector("{IDLE}")""",
        arg=after,
        timeout=timeout_ms,
        polling=POLL_MS,
    )


def wait_idle(page, timeout_ms: int = 60_000) -> None:
    """Wait until no script runs (at once if none does; no sleep)."""
    page.wait_for_selector(IDLE, timeout=timeout_ms)


def wait_charts(page, timeout_ms: int = 30_000) -> None:
    """Wait until every Plotly chart on the page has drawn its SVG and no placeholder of an
    element whose code is still loading (SKELETON) is left."""
    page.wait_for_function(
        f"""() => !document.querySelector("{SKELETON}") &&
                 [...document.querySelectorAll("{CHART}")]
                 .every(c => c.querySelector('.main-svg'))""",
        timeout=timeout_ms,
        polling=POLL_MS,
    )


def open_page(page, url: str, name: str, timeout_ms: int = 60_000) -> None:
    """Load a page by URL (a full reload: the JS bundle and a new session) and wait until
    its script run finished and its charts were drawn."""
    page.goto(f"{url}/{PAGES[name]}")
    wait_run(page, 0, timeout_ms)
    wait_charts(page, timeout_ms)


def cut_metrics(page) -> list[str]:
    """The metric values on the page that the browser cut off (drawn with an ellipsis: the
    text is wider than its box), as their full text."""
    return page.evaluate(
        """() => [...document.querySelectorAll("[data-testid='stMetricValue']")]
                 .filter(m => [m, ...m.querySelectorAll('*')]
                              .some(e => e.scrollWidth > e.clientWidth + 1))
                 .map(m => m.innerText)"""
    )


def nav_link(page, name: str):
    """The sidebar's link to a page (client-side navigation, as a user switches pages)."""
    return page.locator(f"[data-testid='stSidebarNav'] a[href$='/{PAGES[name]}']")


PICK_MS = 20_000  # a pick's rerun starts at once; a long one is then waited for by wait_idle


def choose(page, label: str, option: str, tries: int = 3) -> None:
    """Pick ``option`` in the Streamlit selectbox labelled ``label`` (an ARIA combobox).

    A rerun or an expander still opening can close the dropdown between the click that
    opens it and the click on the option, so the list is reopened a few times before
    giving up. The click on the option can also land on a list that is being replaced and
    select nothing (no rerun follows): when no run finishes within ``PICK_MS``, the list is
    reopened, and an option that shows as selected by then counts as picked (a run still
    going is waited for first, by ``wait_idle``).
    """
    box = page.get_by_role("combobox", name=label, exact=True)
    item = page.get_by_role("option", name=option, exact=True)
    for attempt in range(tries):
        wait_idle(page)
        box.click()
        try:
            item.wait_for(timeout=5_000)
        except Exception:
            if attempt == tries - 1:
                raise
            page.keyboard.press("Escape")
            continue
        if item.get_attribute("aria-selected") == "true":  # no change, so no rerun
            page.keyboard.press("Escape")
            return
        before = runs_finished(page)
        item.click()
        try:
            wait_run(page, before, PICK_MS)
            return
        except Exception:
            if attempt == tries - 1:
                raise


def fit_viewport(page, width: int = 1500, max_height: int = 4000) -> None:
    """Grow the viewport to the page's content (Streamlit scrolls inside its main block, so
    a full-page screenshot alone would stop at the first screen)."""
    height = page.evaluate(
        """() => Math.max(...[...document.querySelectorAll("[data-testid='stMain'], section")]
                         .map(e => e.scrollHeight), document.body.scrollHeight)"""
    )
    page.set_viewport_size({"width": width, "height": min(int(height) + 40, max_height)})
    page.wait_for_timeout(500)
    wait_charts(page)
