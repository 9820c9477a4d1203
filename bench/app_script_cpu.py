"""CPU seconds of every page's script run on the server side, without a browser.

    python bench/app_script_cpu.py --store /tmp/store200 [--repeat 3]

The browser figures of bench/app_latency.py are wall time: on a loaded machine they grow
with everyone else's work. This script runs app.py and each page in Streamlit's AppTest (in
this process, the way the server runs them) and prints the process's CPU seconds
(``time.process_time``) per run, which depend far less on load: ``first`` is the page's
first run in a fresh process (imports and cold caches included; Home's first run also pays
for app.py's imports), ``warm`` the median of the next ``--repeat`` runs. What the browser
figure adds on top of ``warm`` is Chromium's work (React, Plotly, KaTeX) and the websocket.
The new-prompt row times the Attention masks page after its prompt changed.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
APP = str(ROOT / "app.py")
PAGES = {  # title -> page file (as app.py lists them)
    "Home": "pages/home.py",
    "Prune": "pages/prune.py",
    "Sweeps": "pages/sweeps.py",
    "Representation dimension": "pages/repdim.py",
    "Attention masks": "pages/attention.py",
    "Assumption checks": "pages/assumptions.py",
    "Runs": "pages/runs.py",
}
HEATMAP = "heatmap (new prompt)"


def cpu_run(at) -> float:
    c0 = time.process_time()
    at.run()
    if at.exception:
        raise RuntimeError([e.value for e in at.exception])
    return time.process_time() - c0


def measure(repeat: int) -> dict[str, list[float]]:
    """CPU seconds per run: [first, warm...] for every page, then new prompts."""
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file(APP, default_timeout=900)
    out: dict[str, list[float]] = {}
    for name, path in PAGES.items():
        if name != "Home":
            at.switch_page(path)
        out[name] = [cpu_run(at) for _ in range(repeat + 1)]
    at.switch_page(PAGES["Attention masks"])
    at.run()
    out[HEATMAP] = []
    for i in range(repeat + 1):
        at.text_area(key="attn_prompt").input(f"A new prompt number {i} at {time.time():.3f}.")
        out[HEATMAP].append(cpu_run(at))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--store", type=Path, required=True, help="the results store to read")
    ap.add_argument("--repeat", type=int, default=3, help="warm runs per page (default 3)")
    args = ap.parse_args()
    os.environ["PRUNESCOPE_HOME"] = str(args.store)
    sys.path.insert(0, str(ROOT))
    times = measure(args.repeat)
    width = max(len(k) for k in times)
    print(f"{'CPU seconds':{width}}  {'first':>6} {'warm':>6}")
    for name, ts in times.items():
        print(f"{name:{width}}  {ts[0]:6.2f} {statistics.median(ts[1:]):6.2f}")
    print(
        f"(AppTest in one process; warm = median of {args.repeat} runs; "
        f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs)"
    )


if __name__ == "__main__":
    main()
