"""Start the app in a subprocess and drive Debian's Chromium with Playwright.

Shared by tests/test_e2e_browser.py, bench/screenshots.py and bench/app_latency.py. Never
runs ``playwright install``: the browser is /usr/bin/chromium (apt-get install chromium).
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
# url path of each page (st.Page derives it from the file name; Home is the default "/").
PAGES = {
    "Home": "",
    "Prune": "prune",
    "Sweeps": "sweeps",
    "Representation dimension": "repdim",
    "Attention masks": "attention",
    "Assumption checks": "assumptions",
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
def streamlit_server(store_root: Path, log_file: Path | None = None) -> Iterator[str]:
    """``streamlit run app.py`` on a free port with PRUNESCOPE_HOME=store_root; yields its URL."""
    port = free_port()
    env = dict(os.environ, PRUNESCOPE_HOME=str(store_root), HF_HUB_OFFLINE="1")
    log_file = log_file or Path(tempfile.mkstemp(prefix="streamlit-", suffix=".log")[1])
    cmd = [
        sys.executable,
        "-m",
        "streamlit",
        "run",
        "app.py",
        "--server.port",
        str(port),
        "--server.headless",
        "true",
        "--server.address",
        "127.0.0.1",
        "--browser.gatherUsageStats",
        "false",
    ]
    with log_file.open("w") as log:
        proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_health(url)
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
        try:
            yield ctx.pages[0] if ctx.pages else ctx.new_page()
        finally:
            ctx.close()


def wait_idle(page, timeout_ms: int = 60_000) -> None:
    """Wait until the script run triggered by the last action has finished."""
    page.wait_for_timeout(300)  # let the rerun start
    page.wait_for_selector(IDLE, timeout=timeout_ms)


def wait_charts(page, timeout_ms: int = 30_000) -> None:
    """Wait until every Plotly chart on the page has drawn its SVG."""
    page.wait_for_function(
        """() => [...document.querySelectorAll("[data-testid='stPlotlyChart']")]
                 .every(c => c.querySelector('.main-svg'))""",
        timeout=timeout_ms,
    )


def open_page(page, url: str, name: str, timeout_ms: int = 60_000) -> float:
    """Load a page by name; returns seconds until its script ran and its charts were drawn."""
    t0 = time.perf_counter()
    page.goto(f"{url}/{PAGES[name]}")
    page.wait_for_selector("[data-testid='stApp']", timeout=timeout_ms)
    wait_idle(page, timeout_ms)
    wait_charts(page, timeout_ms)
    return time.perf_counter() - t0


def choose(page, label: str, option: str, tries: int = 3) -> None:
    """Pick ``option`` in the Streamlit selectbox labelled ``label`` (an ARIA combobox).

    A rerun or an expander still opening can close the dropdown between the click that
    opens it and the click on the option, so the list is reopened a few times before
    giving up.
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
        item.click()
        wait_idle(page)
        return


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
