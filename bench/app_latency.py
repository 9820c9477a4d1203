"""Time to first render of every page, and of the attention heatmaps of a stored run.

    python bench/app_latency.py                      # starts its own server on a temp store
    python bench/app_latency.py --url http://127.0.0.1:8501 --repeat 3
    python bench/app_latency.py --runs 200 --store /tmp/store200   # a store of 200 runs

With ``--runs N`` the store is first filled to N runs by bench/bulk_store.py: the demo set
run for real on tiny-llama, then its runs duplicated under new ids.

Without --url the script starts ``streamlit run app.py`` with PRUNESCOPE_HOME set to --store
(default: a temp folder) and, if that store has no prune run, makes one on tiny-llama with
the offline corpus so the heatmap has something to draw. A "render" is: navigation until the
page's script finished and every Plotly chart drew its SVG, in Debian's Chromium.
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from appserver import (
    PAGES,
    ROOT,
    chromium_page,
    open_page,
    streamlit_server,
    wait_charts,
    wait_idle,
)
from bulk_store import build

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
    from core.store import RunStore

    if RunStore(store).list(kind="prune", status="done"):
        return
    subprocess.run(
        [sys.executable, "-m", "core", *SEED_RUN, "--store", str(store)], cwd=ROOT, check=True
    )


def time_heatmap(page, url: str) -> float:
    """Open Attention masks, then time a new prompt until the heatmaps are redrawn."""
    open_page(page, url, "Attention masks")
    box = page.get_by_label("Prompt", exact=True)
    box.fill(f"A new prompt typed at {time.time():.0f} to miss every cache.")
    t0 = time.perf_counter()
    box.press("Control+Enter")
    wait_idle(page)
    wait_charts(page)
    return time.perf_counter() - t0


def measure(url: str, repeat: int) -> dict[str, list[float]]:
    times: dict[str, list[float]] = {name: [] for name in [*PAGES, "heatmap (new prompt)"]}
    with chromium_page() as page:
        for _ in range(repeat):
            for name in PAGES:
                times[name].append(open_page(page, url, name))
            times["heatmap (new prompt)"].append(time_heatmap(page, url))
    return times


def print_table(times: dict[str, list[float]]) -> None:
    width = max(len(k) for k in times)
    print(f"{'page'.ljust(width)}  {'first':>7}  {'median':>7}  {'max':>7}   (seconds)")
    for name, ts in times.items():
        print(f"{name.ljust(width)}  {ts[0]:7.2f}  {statistics.median(ts):7.2f}  {max(ts):7.2f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--url", help="a running PruneScope app (default: start one)")
    ap.add_argument("--store", type=Path, help="results store for a server started here")
    ap.add_argument("--repeat", type=int, default=2, help="passes over the pages (default 2)")
    ap.add_argument("--runs", type=int, help="fill the store to this many runs first")
    ap.add_argument("--model", default="tiny-llama", help="model of the --runs store's real runs")
    ap.add_argument("--seed-store", type=Path, help="--runs: copy this store's runs first")
    args = ap.parse_args()
    with contextlib.ExitStack() as stack:
        url = args.url
        if url is None:
            store = args.store or Path(stack.enter_context(tempfile.TemporaryDirectory()))
            if args.runs:
                build(store, args.runs, args.model, args.seed_store)
            else:
                ensure_prune_run(store)
            url = stack.enter_context(streamlit_server(store))
        print_table(measure(url.rstrip("/"), args.repeat))


if __name__ == "__main__":
    main()
