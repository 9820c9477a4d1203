"""How close the forms' duration estimates (core.estimate) come to real runs on this machine.

    python bench/estimate_accuracy.py [--model smollm2-135m] [--store DIR]

Runs a few small prune configurations end to end as the app's jobs do (a ``python -m core``
subprocess), one after another in a fresh store, and prints for each: the estimate from the
default device speed, the estimate calibrated on the runs stored before it, and the measured
wall time. The first run also pays the dense baseline.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from core import requests
from core.estimate import default_speed, estimate_seconds, measured_speed
from core.store import RunStore

ROOT = Path(__file__).resolve().parents[1]
SMALL = {"nsamples": 4, "calib_seqlen": 64, "seqlen": 128, "max_windows": 4, "device": "cpu"}
CASES = [
    ("wanda", {}),
    ("magnitude", {}),
    ("sparsegpt", {}),
    ("wanda", {"nsamples": 16, "calib_seqlen": 128}),
    ("attention-gd", {"targets": "qk", "option": ["steps=5", "checks=none"]}),
]


def run(store: Path, values: dict) -> float:
    argv = ["prune", *requests.to_argv("prune", values), "--store", str(store), "--json", "--quiet"]
    t0 = time.perf_counter()
    out = subprocess.run(
        [sys.executable, "-m", "core", *argv], cwd=ROOT, capture_output=True, text=True
    )
    seconds = time.perf_counter() - t0
    if out.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed: {out.stderr[-2000:]}")
    json.loads(out.stdout.strip().splitlines()[-1])
    return seconds


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--model", default="smollm2-135m")
    p.add_argument("--store", default=None)
    p.add_argument("--data-dir", default=None)
    args = p.parse_args()
    root = Path(args.store or tempfile.mkdtemp(prefix="prunescope-estimate-"))
    store = RunStore(root)
    print(f"store {root}; model {args.model}; wall times include load (machine may be loaded)")
    print(f"{'method':<14}{'options':<34}{'default est.':>13}{'calibrated':>12}{'measured':>10}")
    for method, extra in CASES:
        values = {"model": args.model, "method": method, **SMALL, **extra}
        if args.data_dir:
            values["data_dir"] = args.data_dir
        cfg = requests.plan_request("prune", values)
        first = estimate_seconds(cfg, store, default_speed("cpu"))
        speed = measured_speed(store, "cpu")
        calibrated = estimate_seconds(cfg, store, speed) if speed.n_runs else float("nan")
        measured = run(root, values)
        label = ",".join(f"{k}={v}" for k, v in extra.items())[:33]
        print(f"{method:<14}{label:<34}{first:>12.0f}s{calibrated:>11.0f}s{measured:>9.0f}s")


if __name__ == "__main__":
    main()
