"""What a grid sweep's worker does with one configuration, wherever it runs: run it into a
results store through the one dispatcher, and move finished run folders between stores as
one tar archive.

Every worker but the in-process one writes into a results store of its own (a temporary
folder on its host) and hands back its finished run folders packed; the driver imports each
into the main store atomically by run id (``RunStore.import_run``), so no two hosts ever
write one SQLite file. Dense baselines travel to the workers the same way, so no worker
recomputes them.
"""

from __future__ import annotations

import io
import json
import shutil
import tarfile
import tempfile
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from core.errors import ConfigError, PruneScopeError, StoreError
from core.names import EVAL, PRUNE, SLICE, STRUCTURED, ZEROSHOT
from core.progress import ProgressFn
from core.runs import execute
from core.settings.config import RunConfig
from core.store.run_store import RunStore

GRID_KINDS = (EVAL, PRUNE, SLICE, STRUCTURED, ZEROSHOT)  # what a grid point or its baseline can be
MAX_RETRIES = 2  # reruns of a configuration whose worker process died
OnDone = Callable[[RunConfig, str | None], None]  # (config, error or None) per finished config


def run_config(
    cfg: RunConfig, store: RunStore, on_progress: ProgressFn | None = None
) -> dict[str, Any]:
    """Run one resolved config (kind eval | prune | slice | dense zeroshot) into ``store``
    through the one dispatcher (core.runs.execute), reusing a stored result. Returns
    {run_id, config, metrics, cached}."""
    if cfg.kind not in GRID_KINDS or cfg.extra_value("source_run") is not None:
        raise ConfigError(f"a sweep cannot run a {cfg.kind!r} configuration")
    res = execute(cfg, store, on_progress)
    if res["run_id"] != cfg.run_id:  # e.g. a worker resolving a path differently
        raise StoreError(
            f"config {cfg.run_id} ran as {res['run_id']}: the worker resolved it "
            "differently (data folder, device)"
        )
    return res


def pack_runs(store: RunStore, run_ids: Iterable[str]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for run_id in run_ids:
            tar.add(store.run_dir(run_id), arcname=run_id)
    return buf.getvalue()


def unpack_runs(blob: bytes, store: RunStore) -> list[str]:
    """Import every run folder of an archive into ``store``; returns the newly added ids."""
    added = []
    with tempfile.TemporaryDirectory(dir=store.root / "tmp", prefix="unpack-") as tmp:
        with tarfile.open(fileobj=io.BytesIO(blob), mode="r:gz") as tar:
            tar.extractall(tmp, filter="data")
        for folder in sorted(Path(tmp).iterdir()):
            if store.import_run(folder):
                added.append(folder.name)
    return added


def run_isolated(cfg_json: str, seeds: bytes, scratch: str | None = None) -> bytes:
    """Worker entry point: run one config (as JSON) in a store of its own under ``scratch``,
    seeded with the baselines' run folders; return the run folders it produced, packed."""
    cfg = RunConfig.from_dict(json.loads(cfg_json))
    if scratch:
        Path(scratch).mkdir(parents=True, exist_ok=True)
    root = tempfile.mkdtemp(prefix="prunescope-worker-", dir=scratch)
    try:
        store = RunStore(root)
        seeded = set(unpack_runs(seeds, store)) if seeds else set()
        run_config(cfg, store)
        produced = [r.id for r in store.list(status="done") if r.id not in seeded]
        return pack_runs(store, produced)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def report_done(on_done: OnDone, cfg: RunConfig, fn: Callable[[], Any]) -> None:
    """Call ``fn`` (run or import ``cfg``) and report the outcome: a PruneScopeError is the
    run's failure, reported, not raised."""
    try:
        fn()
    except PruneScopeError as exc:
        on_done(cfg, str(exc))
        return
    on_done(cfg, None)
