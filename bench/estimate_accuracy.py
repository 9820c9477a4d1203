"""How close the forms' duration estimates (core.runs.estimate) come to real runs on this
machine.

    python bench/estimate_accuracy.py [--model smollm2-135m] [--store DIR]
    python bench/estimate_accuracy.py --replay DEMO_STORE [--after 0,1,2,4]

Runs a few small prune configurations end to end as the app's jobs do (a ``python -m core``
subprocess), one after another in a fresh store, and prints for each: the estimate from the
default device speed, the estimate calibrated on the runs stored before it, and the measured
wall time. The first run also pays the dense baseline.

``--replay`` reads a store the demo set (core.demo.start_demo) filled and runs nothing: for
each ``--after`` k it rebuilds the index as it stood when piece k started (the runs created
before it) and prints, for every piece not yet run, the estimate the app showed then against
the piece's measured job time from the queue (estimate / measured), and the totals. With
k = 0 the store is empty and the CPU's speed is this process's matmul benchmark, so that row
depends on the load of the machine running the bench, not on the stored runs;
``--cpu-gflops`` replaces that benchmark's rate (to see the row at a quiet machine's rate).
"""

from __future__ import annotations

import argparse
import json
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from core.demo import QUEUE, demo_pieces, piece_config
from core.planning.speed import Speed, default_speed, measured_speed
from core.requests import request as requests
from core.runs.estimate import estimate_many, estimate_seconds
from core.store.run_store import RunStore

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
    """Wall time of one prune run in a subprocess, launched as the app's jobs are: from its
    resolved config's JSON (``python -m core run --config FILE``)."""
    cfg = requests.plan_request("prune", values)
    path = store / f"{cfg.run_id}.config.json"
    path.write_text(json.dumps(cfg.to_dict()))
    argv = ["run", "--config", str(path), "--store", str(store), "--json", "--quiet"]
    t0 = time.perf_counter()
    out = subprocess.run(
        [sys.executable, "-m", "core", *argv], cwd=ROOT, capture_output=True, text=True
    )
    seconds = time.perf_counter() - t0
    if out.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed: {out.stderr[-2000:]}")
    json.loads(out.stdout.strip().splitlines()[-1])
    return seconds


def store_as_of(source: Path, before: float, root: Path) -> RunStore:
    """A copy of ``source``'s index holding only the runs created before ``before``."""
    if root.exists():
        shutil.rmtree(root)
    root.mkdir(parents=True)
    with (
        sqlite3.connect(source / "index.sqlite") as src,
        sqlite3.connect(root / "index.sqlite") as dst,
    ):
        src.backup(dst)
        dst.execute("DELETE FROM runs WHERE created >= ?", (before,))
    return RunStore(root)


def replay(source: Path, after: list[int], cpu_gflops: float | None = None) -> None:
    queue = json.loads((source / "progress" / f"{QUEUE}.queue.json").read_text())
    items = queue["items"]
    model = items[0]["config"]["model"]["name"]
    pieces = {p.key: p for p in demo_pieces(model)}
    measured = {i["key"]: i["elapsed"] for i in items}
    print(f"demo store {source}; model {model}; measured: the queue's job times there")
    print(f"measured total {queue['finished'] - queue['started']:.1f} s (queue start to end)")
    tmp = Path(tempfile.mkdtemp(prefix="estimate-replay-"))
    for k in after:
        store = store_as_of(source, items[k]["started"] if k else 0.0, tmp / str(k))
        speed = measured_speed(store, "cpu", model)
        if cpu_gflops and not speed.n_runs:
            speed = Speed("cpu", cpu_gflops * 1e9)
        print(
            f"\n-- after {k} piece(s) stored: {speed.source}, {speed.flops_per_s / 1e9:.0f} GFLOP/s"
        )
        factors = ", ".join(f"{m} {f:.2f}" for m, f in sorted(speed.overhead.items()))
        print(f"   method factors measured: {factors or 'none'}")
        print(f"{'piece':<14}{'estimate':>10}{'measured':>10}{'ratio':>7}")
        est_total = meas_total = 0.0
        for item in items[k:]:
            cfg = piece_config(store, pieces[item["key"]])
            est, meas = estimate_many([cfg], store, speed), measured[item["key"]]
            est_total, meas_total = est_total + est, meas_total + meas
            print(f"{item['key']:<14}{est:>9.1f}s{meas:>9.1f}s{est / meas:>7.2f}")
        print(f"{'total':<14}{est_total:>9.1f}s{meas_total:>9.1f}s{est_total / meas_total:>7.2f}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--model", default="smollm2-135m")
    p.add_argument("--store", default=None)
    p.add_argument("--data-dir", default=None)
    p.add_argument("--replay", default=None, help="a store the demo set filled")
    p.add_argument("--after", default="0,1,2,4", help="pieces stored before the estimate")
    p.add_argument("--cpu-gflops", type=float, default=None, help="empty store: this CPU rate")
    args = p.parse_args()
    if args.replay:
        replay(Path(args.replay), [int(k) for k in args.after.split(",")], args.cpu_gflops)
        return
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
