"""How a run meets the store before it starts: reuse a finished run with the same id, wait
for another process computing it, and the result dict every run returns."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from core.errors import StoreError
from core.machine.gpu_memory import oom_as_error
from core.progress import ProgressFn, report
from core.settings.config import RunConfig
from core.store.run_store import RunStore, RunWriter


def result(cfg: RunConfig, metrics: dict[str, Any], cached: bool = False) -> dict[str, Any]:
    """What every run returns: run id, resolved config, metrics, whether it was reused."""
    return {"run_id": cfg.run_id, "config": cfg.to_dict(), "metrics": metrics, "cached": cached}


def cached_result(store: RunStore, cfg: RunConfig, force: bool) -> dict[str, Any] | None:
    """The finished run with ``cfg``'s id, unless forced."""
    if force:
        return None
    try:
        rec = store.get(cfg.run_id)
    except StoreError:
        return None
    if rec.status != "done" or rec.id != cfg.run_id:
        return None
    return {
        "run_id": rec.id,
        "config": rec.config,
        "metrics": store.load(rec.id).metrics,
        "cached": True,
    }


def reusable(
    store: RunStore, cfg: RunConfig, force: bool, save_dir: str | None
) -> dict[str, Any] | None:
    """The finished run with ``cfg``'s id, unless forced or saving (a save must write)."""
    return cached_result(store, cfg, force) if save_dir is None else None


@contextmanager
def writing(store: RunStore, cfg: RunConfig, force: bool, what: str) -> Iterator[RunWriter]:
    """The run's writer. Inside it an out-of-memory error becomes one clear message naming
    ``what``; the writer then marks the run failed and drops its folder (a --save folder is
    only moved into place once the run is complete)."""
    with store.begin(cfg, force) as writer, oom_as_error(cfg.model.device, what):
        yield writer


def stored_or_wait(
    store: RunStore, cfg: RunConfig, force: bool, on_progress: ProgressFn | None, what: str
) -> dict[str, Any] | None:
    """The stored result of ``cfg``; when another process is computing it (a baseline that
    several jobs share), wait for that process first instead of failing or repeating it."""
    if not force and store.running_elsewhere(cfg.run_id):
        report(on_progress, "load", 0, 1, f"waiting for a job computing {what}")
        store.wait_while_running(cfg.run_id)
    return cached_result(store, cfg, force)


def tee(*fns: ProgressFn | None) -> ProgressFn:
    """One progress function calling every given one."""
    live = [f for f in fns if f is not None]

    def fn(stage: str, done: int, total: int, detail: str = "") -> None:
        for f in live:
            f(stage, done, total, detail)

    return fn
