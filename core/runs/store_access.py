"""How a run meets the store before it starts: reuse a finished run with the same id, wait
for another process computing it, and the result dict every run returns."""

from __future__ import annotations

from typing import Any

from core.config import RunConfig
from core.errors import StoreError
from core.progress import ProgressFn, report
from core.store import RunStore


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
