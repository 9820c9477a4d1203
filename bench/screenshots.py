"""One screenshot per page of the app on the embedded model, for the README.

    python bench/screenshots.py                       # runs + screenshots -> docs/screenshots/
    python bench/screenshots.py --store ~/ps --skip-runs --out /tmp/shots

Fills a results store with a few runs of ``--model`` (default smollm2-135m) using the 'quick'
preset of core.requests.commands (the app's choice on a CPU), plus a SliceGPT sweep, then serves the
app on that store and photographs every page in Debian's Chromium. Runs already in the store are
reused (same config, same id). On a CPU this takes 15-25 minutes.
"""

from __future__ import annotations

import argparse
import logging
import subprocess
import sys
import tempfile
from pathlib import Path

from appserver import PAGES, ROOT, chromium_page, fit_viewport, open_page, streamlit_server

from core.requests.commands import PRESETS, command_fields

log = logging.getLogger("screenshots")

# (method, sparsity, pattern, targets, options); the last prune run is what pages open on.
RUNS = [
    ("attention-gd", 0.5, "unstructured", "qk", ["steps=20", "max_seq=4"]),
    ("magnitude", 0.5, "unstructured", "all", []),
    ("sparsegpt", 0.5, "unstructured", "all", []),
    ("wanda", 0.5, "2:4", "all", []),
    ("wanda", 0.3, "unstructured", "all", []),
    ("wanda", 0.5, "unstructured", "all", []),
]
FAST = {k: str(v) for k, v in PRESETS["quick"].items()}


def data_args() -> list[str]:
    from core.data import default_data_dir

    if default_data_dir():
        return ["--calib", "c4", "--eval", "wikitext2"]
    return ["--calib", "pydoc", "--eval", "pydoc"]


def core_cli(store: Path, *argv: str) -> None:
    cmd = [sys.executable, "-m", "core", *argv, "--store", str(store), "--quiet"]
    log.info("%s", " ".join(cmd[2:]))
    subprocess.run(cmd, cwd=ROOT, check=True)


def fill_store(store: Path, model: str) -> None:
    sweep(store, model)  # first, so that a prune run is the newest result the pages open on
    fast = [a for k, v in FAST.items() for a in (f"--{k.replace('_', '-')}", v)]
    for method, sparsity, pattern, targets, options in RUNS:
        opts = [a for o in options for a in ("--option", o)]
        core_cli(
            store,
            "prune",
            "--model",
            model,
            "--method",
            method,
            "--sparsity",
            str(sparsity),
            "--pattern",
            pattern,
            "--targets",
            targets,
            *opts,
            *fast,
            *data_args(),
        )


def sweep(store: Path, model: str) -> None:
    """A SliceGPT sweep with the fast settings the sweep command accepts."""
    keys = {f.name for f in command_fields("sweep")}
    fast = [a for k, v in FAST.items() if k in keys for a in (f"--{k.replace('_', '-')}", v)]
    core_cli(store, "sweep", "--model", model, *fast)


def photograph(store: Path, out: Path) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    shots = []
    with streamlit_server(store) as url, chromium_page(1500, 1900) as page:
        for name, slug in PAGES.items():
            page.set_viewport_size({"width": 1500, "height": 1000})
            open_page(page, url, name, timeout_ms=300_000)
            fit_viewport(page)
            path = out / f"{slug or 'home'}.png"
            page.screenshot(path=str(path))
            shots.append(path)
            log.info("%s -> %s", name, path)
    return shots


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--store", type=Path, help="results store (default: a temp folder)")
    ap.add_argument("--out", type=Path, default=ROOT / "docs" / "screenshots")
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--skip-runs", action="store_true", help="photograph the store as it is")
    args = ap.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    sys.path.insert(0, str(ROOT))  # core, for the data folder and the CLI's commands
    store = args.store or Path(tempfile.mkdtemp(prefix="prunescope-shots-"))
    if not args.skip_runs:
        fill_store(store, args.model)
    photograph(store, args.out)


if __name__ == "__main__":
    main()
