"""Seconds per page render, and for the attention heatmaps of a new prompt, in Chromium.

    python bench/app_latency.py --runs 200 --store /tmp/store200   # a store of 200 runs
    python bench/app_latency.py                      # its own server on a temp store
    python bench/app_latency.py --url http://127.0.0.1:8501 --repeat 5

With ``--runs N`` the store is first filled to N runs by bench/bulk_store.py: the demo set
run for real on tiny-llama, then its runs duplicated under new ids (an existing store is
reused). Without --url the script starts the app as ``make run`` does (``python -m
pages.serve``, which pays imports and per-process caches before the port opens; ``--cold``:
plain ``streamlit run app.py``, leaving them to the first page) with PRUNESCOPE_HOME set to
--store (default: a temp folder), prints the seconds from launch to a healthy server, and, if
that store has no prune run, makes one on tiny-llama with the offline corpus so the heatmap
has something to draw.

What is timed (every figure in the browser's clock, ``performance.now()``, from the
action to the latest of the page's script run ending, the last DOM change inside a Plotly
chart and the last placeholder of a still-loading element (``stSkeleton``) replaced; see
bench/appserver.py's RUN_COUNTER). A page loaded anew can end its run with its widgets and
charts still skeletons, as Streamlit loads their code in each new document: figures taken
before the skeletons were waited for (2026-12-07) undercount URL loads and first opens.


- ``navigate``: a click on the page's sidebar link, in the session already open: how a user
  switches pages. This is "the page's render".
- ``load``: the page's URL loaded anew (page.goto: the JS bundle, a new websocket session,
  app.py's first run in that session), as when a link is opened.
- ``heatmap``: on Attention masks, a prompt never seen before typed and sent (Ctrl+Enter):
  the prompt fragment's run until its charts are redrawn; "new prompt" is the first one,
  typed right after the page was reached, "another prompt" the next one (the first prompt
  after a navigation meets the browser still busy with the page it just drew).

Pass 0 runs right after the server started (the ``first`` column: Home is loaded, as a
user arrives, then every other page is navigated to, then the heatmap); then ``--repeat``
warm passes (default 5), each navigating to every page, sending a new prompt, and loading
every page by URL. ``median``/``max`` (``load``/``lmax`` for the URL loads) are over the warm
passes only. The split columns
(medians over the warm navigations) say where the time goes: ``ask`` from the action to
the run's start (the browser's message and the server's queue), ``run`` the script run
with its elements sent and laid out, ``draw`` from the run's end to the last chart change
(usually 0: Chromium draws each chart as its element arrives, so ``run`` includes drawing).
The server's share alone (CPU seconds of each page script, load-robust) was measured by a
retired script (docs/benchmarks.md, "Speed of the app"). How the method changed over time,
and which older figures are not comparable: docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from appserver import (
    CHART,
    PAGES,
    POLL_MS,
    ROOT,
    chromium_page,
    nav_link,
    runs_finished,
    streamlit_server,
    wait_charts,
    wait_idle,
    wait_run,
)
from bulk_store import build
from playwright.sync_api import TimeoutError as PlaywrightTimeout

HEATMAP = "heatmap (new prompt)"
HEATMAP_NEXT = "heatmap (another prompt)"
COMPARE = "compare (new prompt)"
COMPARE_NEXT = "compare (another prompt)"
QUIET_MS = 300  # no chart change for this long = drawn (waited for, not counted)
SEED_RUN = [
    "prune",
    "--model",
    "tiny-llama",
    "--method",
    "wanda",
    "--calib",
    "pydoc",
    "--eval",
    "pydoc",
    "--nsamples",
    "4",
    "--seqlen",
    "64",
    "--max-windows",
    "4",
    "--quiet",
]


def ensure_prune_run(store: Path) -> None:
    """One finished prune run with stored W_Q/W_K (the heatmap needs it)."""
    sys.path.insert(0, str(ROOT))
    from core.cli.main import main as cli
    from core.store.run_store import RunStore

    if RunStore(store).list(kind="prune", status="done"):
        return
    if cli([*SEED_RUN, "--store", str(store)]) != 0:  # in this process: no second start-up
        raise SystemExit("the seed prune run failed")


@dataclass(frozen=True)
class Timing:
    """One timed action, in seconds of the browser's clock."""

    total: float
    ask: float  # action -> the script run started
    run: float  # the run's start -> its end
    draw: float  # the run's end -> the last chart change (0 if no chart changed)
    charts: int


def stamps(page) -> dict:
    return page.evaluate("() => ({...window.__psRuns, now: performance.now()})")


def timing(page, t0_ms: float, after: int, timeout_ms: int = 600_000) -> Timing:
    """Wait for the run after ``after`` and its charts, quiet for QUIET_MS; time from t0_ms."""
    wait_run(page, after, timeout_ms)
    wait_charts(page, timeout_ms)
    page.wait_for_function(
        f"() => performance.now() - window.__psRuns.tDraw > {QUIET_MS}",
        timeout=timeout_ms,
        polling=POLL_MS,
    )
    s = stamps(page)
    end = max(s["tEnd"], s["tDraw"])
    draw = max(s["tDraw"] - s["tEnd"], 0.0) if s["tDraw"] > t0_ms else 0.0
    charts = page.locator(CHART).count()
    return Timing(
        (end - t0_ms) / 1e3,
        (s["tStart"] - t0_ms) / 1e3,
        (s["tEnd"] - s["tStart"]) / 1e3,
        draw / 1e3,
        charts,
    )


def load(page, url: str, name: str) -> Timing:
    """page.goto the page's URL; t = 0 is the new document's navigation start."""
    page.goto(f"{url}/{PAGES[name]}")
    return timing(page, 0.0, 0)


STALL_MS = 30_000  # no run this long after an action: a stall, said on stderr and retried


def act(page, action) -> Timing:
    """Do ``action`` in the open session and time the script run it causes. An action that
    starts no run within STALL_MS is a stall: its screenshot and the page's URL go to
    stderr, and the action is done once more (timed afresh), so one lost click does not
    end the pass."""
    for retried in (False, True):
        wait_idle(page)
        before, t0 = runs_finished(page), stamps(page)["now"]
        action()
        try:
            return timing(page, t0, before, timeout_ms=600_000 if retried else STALL_MS)
        except PlaywrightTimeout:
            if retried:
                raise
            shot = Path(tempfile.mkstemp(prefix="stall-", suffix=".png")[1])
            page.screenshot(path=str(shot), full_page=True)
            print(f"STALL: no run {STALL_MS / 1e3:.0f} s after an action on {page.url}; "
                  f"screenshot {shot}; retried once", file=sys.stderr, flush=True)  # fmt: skip
    raise AssertionError("unreachable")


def navigate(page, name: str) -> Timing:
    return act(page, nav_link(page, name).click)


def heatmap(page) -> Timing:
    """On Attention masks: a prompt never typed before, sent with Ctrl+Enter."""
    box = page.get_by_label("Prompt", exact=True)
    box.fill(f"A new prompt typed at {time.time():.3f} to miss every cache.")
    return act(page, lambda: box.press("Control+Enter"))


def compare_prompt(page) -> Timing:
    """On Compare: a text never typed before, sent with Ctrl+Enter: the dense model and the
    page's default run (the first listed) continue it and are compared layer by layer."""
    own = page.get_by_role("radio", name="Your own text", exact=True)
    if not own.is_checked():  # leave the prepared text, untimed: wait for what its run draws
        # (a stall report showed the page after that run, which the run counter had missed)
        wait_idle(page)
        page.get_by_text("Your own text", exact=True).click()
        page.get_by_text("Type a text to compare.").wait_for(timeout=STALL_MS)  # its run drew
        wait_idle(page)
    box = page.get_by_label("Prompt", exact=True)
    text = f"A new text typed at {time.time():.3f} to miss every cache, then continued."
    wait_idle(page)  # a run still drawing the page would redraw the box over the typed text
    box.fill(text)
    if box.input_value() != text:
        print(f"compare: the typed text was not kept ({box.input_value()!r})", file=sys.stderr)
    return act(page, lambda: box.press("Control+Enter"))


def one_pass(page, url: str, first: bool) -> dict[str, dict[str, Timing]]:
    """Navigate to every page (then the heatmap), then load every page by URL."""
    out: dict[str, dict[str, Timing]] = {"navigate": {}, "load": {}}
    for name in PAGES:
        if first and name == "Home":
            out["navigate"][name] = load(page, url, name)  # how a user arrives
        else:
            out["navigate"][name] = navigate(page, name)
        if name == "Attention masks":
            out["navigate"][HEATMAP] = heatmap(page)  # the first prompt typed on arriving
            out["navigate"][HEATMAP_NEXT] = heatmap(page)  # and the one after it
        if name == "Compare":
            out["navigate"][COMPARE] = compare_prompt(page)
            out["navigate"][COMPARE_NEXT] = compare_prompt(page)
    if not first:
        for name in PAGES:
            out["load"][name] = load(page, url, name)
    for how, timings in out.items():  # progress on stderr: a loaded machine's pass is long
        line = ", ".join(f"{name} {t.total:.2f}" for name, t in timings.items())
        print(f"{'first' if first else 'warm'} {how}: {line}", file=sys.stderr, flush=True)
    return out


def measure(url: str, repeat: int) -> tuple[dict, list[dict]]:
    """(pass 0 right after the server started, the warm passes)."""
    with chromium_page() as page:
        cold = one_pass(page, url, first=True)
        warm = [one_pass(page, url, first=False) for _ in range(repeat)]
    return cold, warm


BARE_APP = 'import streamlit as st\n\nst.title("A bare Streamlit app")\n'
# One element of each kind the Prune page draws, and three small charts: the code Streamlit
# loads on demand in each new document (its skeletons' wait) with next to no app behind it.
BARE_ELEMENTS = """import plotly.graph_objects as go
import streamlit as st

st.title("A bare Streamlit app with the Prune page's kinds of element")
c = st.columns(3)
c[0].selectbox("Model", ["a", "b"])
c[1].number_input("Sparsity", 0.0, 1.0, 0.5)
c[2].text_input("Name", "x")
st.radio("Pattern", ["unstructured", "2:4"], horizontal=True)
st.multiselect("Tasks", ["x", "y"], ["x"])
st.checkbox("Stream")
st.file_uploader("Corpus")
st.button("Start", type="primary")
st.metric("Perplexity", "12.3", "+1.2")
for i in range(3):
    st.plotly_chart(go.Figure(go.Scatter(x=[1, 2, 3], y=[i, 2, 1])), key=f"c{i}")
"""
FLOORS = {"a one-line Streamlit app": BARE_APP, "one element of each kind": BARE_ELEMENTS}


def framework_floor(script: str, repeat: int) -> tuple[float, float]:
    """(first, median warm) load of a bare Streamlit ``script`` in a fresh Chromium: what a
    page's ``first`` and ``load`` include before the app itself does anything (the JS bundle,
    the websocket session, and, with elements, their code loaded on demand)."""
    with contextlib.ExitStack() as stack:
        tmp = Path(stack.enter_context(tempfile.TemporaryDirectory()))
        (tmp / "bare.py").write_text(script)
        url = stack.enter_context(streamlit_server(tmp / "store", script=tmp / "bare.py"))
        page = stack.enter_context(chromium_page())
        page.goto(url)
        first = timing(page, 0.0, 0).total
        loads = []
        for _ in range(max(repeat, 1)):
            page.goto(url)
            loads.append(timing(page, 0.0, 0).total)
    return first, statistics.median(loads)


def print_table(cold: dict, warm: list[dict]) -> None:
    names = [*PAGES, HEATMAP, HEATMAP_NEXT, COMPARE, COMPARE_NEXT]
    width = max(len(k) for k in names)
    print(
        f"{'seconds':{width}}  {'first':>6} {'median':>6} {'max':>6} {'load':>6} {'lmax':>6}"
        f"   {'ask':>5} {'run':>5} {'draw':>5} {'charts':>6}"
    )
    for name in names:
        nav = [w["navigate"][name] for w in warm]
        loads = [w["load"][name].total for w in warm if name in w["load"]]
        med = {f: statistics.median(getattr(t, f) for t in nav) for f in ("ask", "run", "draw")}
        dash = f"{'-':>6} {'-':>6}"
        load_s = f"{statistics.median(loads):6.2f} {max(loads):6.2f}" if loads else dash
        print(
            f"{name:{width}}  {cold['navigate'][name].total:6.2f} "
            f"{statistics.median(t.total for t in nav):6.2f} {max(t.total for t in nav):6.2f} "
            f"{load_s}   {med['ask']:5.2f} {med['run']:5.2f} {med['draw']:5.2f} "
            f"{nav[-1].charts:6d}"
        )
    print(
        f"({len(warm)} warm passes; first = pass 0 right after the server started; "
        "load/lmax = the URL loaded anew, median/max; ask/run/draw = medians of the warm "
        "navigate; "
        f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs)"
    )


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--url", help="a running PruneScope app (default: start one)")
    ap.add_argument("--store", type=Path, help="results store for a server started here")
    ap.add_argument("--repeat", type=int, default=5, help="warm passes (default 5)")
    ap.add_argument("--runs", type=int, help="fill the store to this many runs first")
    ap.add_argument("--model", default="tiny-llama", help="model of the --runs store's real runs")
    ap.add_argument("--seed-store", type=Path, help="--runs: copy this store's runs first")
    ap.add_argument(
        "--cold",
        action="store_true",
        help="start plain `streamlit run app.py`, not `make run`'s warmed pages.serve",
    )
    args = ap.parse_args(argv)
    with contextlib.ExitStack() as stack:
        url = args.url
        if url is None:
            store = args.store or Path(stack.enter_context(tempfile.TemporaryDirectory()))
            if args.runs:
                build(store, args.runs, args.model, args.seed_store)
            else:
                ensure_prune_run(store)
            timings: dict = {}
            url = stack.enter_context(
                streamlit_server(store, warmed=not args.cold, timings=timings, prepare=True)
            )
            how = "streamlit run app.py" if args.cold else "python -m pages.serve (make run)"
            if "prepare_s" in timings:
                print(f"set-up (python -m core prepare): {timings['prepare_s']:.2f} s")
            print(f"server: {how}, healthy {timings['start_s']:.2f} s after launch")
        print_table(*measure(url.rstrip("/"), args.repeat))
    for what, script in FLOORS.items():
        first, load_s = framework_floor(script, args.repeat)
        print(
            f"reference, {what} in a fresh Chromium: first {first:.2f} s, "
            f"load {load_s:.2f} s (median of {max(args.repeat, 1)})"
        )


if __name__ == "__main__":
    main()
