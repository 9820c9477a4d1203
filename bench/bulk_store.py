"""A results store of realistic size for bench/app_latency.py (``--runs N``): real runs,
duplicated.

First the demo set (core.demo) runs for real on ``--model`` (tiny-llama by default: every
kind of run a page reads, in a few minutes on a CPU), unless the store already has finished
runs or ``--seed-store`` names a store whose finished runs are copied instead (e.g. the
demo set on the embedded model, as the browser test leaves it). Then finished runs are copied,
round-robin, until the store holds ``--runs`` runs: each copy is the same folder under a config with
one extra key (``bench_copy``), so it has its own run id and is published with
``RunStore.import_run`` like a sweep worker's.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from core import demo  # noqa: E402
from core.settings.config import RunConfig  # noqa: E402
from core.store.run_store import RunStore  # noqa: E402


def run_demo_set(store: RunStore, model: str, timeout_s: float = 1800) -> float:
    """The demo set on ``model`` for real; returns its wall time in seconds."""
    t0 = time.time()
    demo.start_demo(store, model)
    while not (status := demo.demo_status(store)) or not status.finished:
        if time.time() - t0 > timeout_s:
            demo.cancel_demo(store)
            raise TimeoutError(f"the demo set did not finish in {timeout_s:.0f} s")
        time.sleep(2)
    bad = [f"{i.key}: {i.state} {i.error or ''}" for i in status.items if i.state != "done"]
    if bad:
        raise RuntimeError("demo set pieces failed: " + "; ".join(bad))
    return time.time() - t0


def copy_run(store: RunStore, run_id: str, k: int, scratch: Path) -> bool:
    """Publish a copy of a finished run under a new id (its config + ("bench_copy", k))."""
    run = store.load(run_id)
    cfg = RunConfig.from_dict(run.config)
    extra = tuple(sorted({**dict(cfg.extra), "bench_copy": k}.items()))
    copy = dataclasses.replace(cfg, extra=extra)
    folder = scratch / copy.run_id
    shutil.copytree(run.dir, folder)
    (folder / "config.json").write_text(json.dumps(copy.to_dict(), indent=2))
    try:
        return store.import_run(folder)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def fill(store: RunStore, n_runs: int) -> int:
    """Copy finished runs round-robin until the store holds ``n_runs``; returns copies made."""
    originals = [
        r.id for r in store.list(status="done") if "bench_copy" not in r.config.get("extra", {})
    ]
    if not originals:
        raise RuntimeError(f"no finished run in {store.root} to copy")
    made, k = 0, len(store.list())
    with tempfile.TemporaryDirectory(dir=store.root / "tmp", prefix="bulk-") as tmp:
        while len(store.list()) < n_runs:
            made += copy_run(store, originals[k % len(originals)], k, Path(tmp))
            k += 1
    return made


def build(store_root: Path, n_runs: int, model: str, seed: Path | None = None) -> RunStore:
    """The store at ``store_root`` filled to ``n_runs``; its real runs are the finished runs
    of the store ``seed`` when given (e.g. a demo set on the embedded model), else the demo
    set run here on ``model``."""
    store = RunStore(store_root)
    if seed is not None and not store.list(status="done"):
        source = RunStore(seed)
        for rec in source.list(status="done"):
            store.import_run(source.run_dir(rec.id))
    if not store.list(status="done"):
        seconds = run_demo_set(store, model)
        print(f"demo set on {model}: {seconds:.0f} s (under load)", file=sys.stderr)
    made = fill(store, n_runs)
    print(f"{store_root}: {len(store.list())} runs ({made} copies)", file=sys.stderr)
    return store
