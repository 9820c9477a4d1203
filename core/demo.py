"""The demo set: the smallest runs that fill every page of the app on one model.

"Populate every page" on Home starts them as one job queue (core.jobs.queue), in an order
that fills one page after another: the dense baseline, Wanda 50% (Attention masks and the
effective-dimension chart), a SliceGPT sweep and ShortGPT and FLAP at a quarter of the
decoder's parameters (Representation dimension: its sweep, and the structured methods against
parameters removed and against the dimension), attention-GD 50% on W_Q/W_K (Assumption
checks) with its magnitude and Wanda baselines on the same targets, then the comparisons
(SparseGPT 50%, Wanda 2:4) and zero-shot accuracy of the dense model on two tasks. Every
piece uses the "demo" preset (core.requests.commands: 8 × 128 calibration tokens, 4
evaluation windows of 64), so the numbers are real but noisy; the Prune page's presets are
the ones to quote. Sized so the set's estimate (core.runs.estimate) is minutes on a CPU:
every prune or slice run pays a fixed share (start-up, the latency forwards before and
after, the effective dimension's eigendecompositions), so the set keeps few runs, small
windows and a short zero-shot sample, and measures lean (no latency, no effective dimension
of the changed model: core.settings.config.MEASURES) on every piece but Wanda 50%, ShortGPT
and FLAP, whose effective dimensions the Representation dimension page plots beside the
dense run's (ShortGPT's and FLAP's are the dimension axis of the structured view; SliceGPT's
is its d′). SparseGPT 2:4 left the set when ShortGPT and FLAP joined it, to keep the set's
time (docs/benchmarks.md). No page needs the latency: the matched-budget chart's latency
axis shows the runs that have it (its default axis, kept parameters, is measured by every
run).

    start_demo(store, "smollm2-135m")
    status = demo_status(store)              # core.jobs.queue.QueueStatus or None
    piece = piece_for(PAGE_ASSUMPTIONS)      # the one run that page needs, startable alone
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from core.cli.reproduce import command_line
from core.data import default_data_dir
from core.jobs.launch import start_config_job
from core.jobs.queue import QueueItem, QueueStatus, cancel_queue, queue_status, start_queue
from core.names import FULL, LEAN
from core.requests.commands import PRESETS
from core.requests.request import DEFAULT_MODEL, plan_request
from core.runs.estimate import estimate_many, estimate_seconds
from core.settings.config import RunConfig
from core.store.run_store import RunStore

QUEUE = "demo"
PAGE_REPDIM, PAGE_ATTENTION, PAGE_ASSUMPTIONS, PAGE_RUNS = (
    "repdim",
    "attention",
    "assumptions",
    "runs",
)
SWEEP_GRID = "0.1,0.25,0.4"  # three points: the relation's line is visible, the fit defined
ZEROSHOT_TASKS = "arc_easy,piqa"  # the two shortest items of the bundled tasks
ZEROSHOT_LIMIT = 25  # items per task: one standard error ≈ 0.1, enough to see the scale
# Attention-GD at demo size: 4 sequences × 128 tokens, at most 8 steps, 2 check points per
# group (the defaults, 8 × 256 and 20 steps, take a quarter of an hour on a CPU).
GD_OPTIONS = ("steps=8", "max_seq=4", "max_len=128", "check_points=2")


@dataclass(frozen=True)
class Piece:
    """One run of the demo set: ``command`` and ``params`` as ``core.requests.request`` takes
    them (planned into the RunConfig its job receives: ``piece_config``); ``page`` is the page
    it fills first (None: it only adds a comparison)."""

    key: str
    title: str
    command: str
    params: Mapping[str, Any]
    page: str | None = None


def _offline() -> dict[str, str]:
    """The offline corpus for calibration and evaluation when no local data folder exists."""
    return {} if default_data_dir() is not None else {"calib": "pydoc", "eval": "pydoc"}


def _data(model: str, measure: str = LEAN) -> dict[str, Any]:
    """Model, the demo preset's token counts and the corpora of a prune / slice / sweep."""
    return {"model": model, **PRESETS["demo"], **_offline(), "measure": measure}


def _prune(model: str, method: str, measure: str = LEAN, **extra: Any) -> dict[str, Any]:
    return {**_data(model, measure), "method": method, "sparsity": 0.5, **extra}


STRUCTURED_BUDGET = "params=0.25"  # the structured pieces: a quarter of the decoder removed


def _structured(model: str, method: str) -> dict[str, Any]:
    """A structured method at the demo's parameter budget, its effective dimension measured."""
    return {**_data(model, FULL), "method": method, "budget": STRUCTURED_BUDGET}


def _dense(model: str) -> dict[str, Any]:
    """The evaluation the pruned runs compare with (their dense baseline has the same id)."""
    demo = PRESETS["demo"]
    values = {"model": model, "seqlen": demo["seqlen"], "max_windows": demo["max_windows"]}
    return values | ({"dataset": "pydoc"} if _offline() else {})


def zeroshot_available() -> bool:
    """Whether the zero-shot piece can read its items: the task files in the local data folder,
    or the Hub when it is not declared offline (HF_HUB_OFFLINE / HF_DATASETS_OFFLINE). Without
    either the piece could only fail, so the set leaves it out (the pruning pieces fall back
    to the offline corpus instead)."""
    root = default_data_dir()
    if root and all((Path(root) / "tasks" / t).is_dir() for t in ZEROSHOT_TASKS.split(",")):
        return True
    flags = (os.environ.get(v, "").lower() for v in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE"))
    return not any(f in ("1", "true", "yes", "on") for f in flags)


def demo_pieces(model: str = DEFAULT_MODEL) -> tuple[Piece, ...]:
    """The demo set for ``model``, in the order it runs (zero-shot only where its items can
    be read: ``zeroshot_available``)."""
    qk = {"targets": "qk"}
    zeroshot = Piece(
        "zeroshot",
        "Zero-shot accuracy (2 tasks)",
        "zeroshot",
        {"model": model, "tasks": ZEROSHOT_TASKS, "limit": ZEROSHOT_LIMIT},
    )
    return (
        Piece("dense", "Dense baseline", "eval", _dense(model), PAGE_RUNS),
        Piece("wanda", "Wanda 50%", "prune", _prune(model, "wanda", FULL), PAGE_ATTENTION),
        Piece(
            "sweep",
            f"SliceGPT sweep s = {SWEEP_GRID}",
            "sweep",
            {**_data(model), "method": "slicegpt", "sparsities": SWEEP_GRID},
            PAGE_REPDIM,
        ),
        Piece("shortgpt", "ShortGPT, 25% of the decoder", "prune", _structured(model, "shortgpt")),
        Piece("flap", "FLAP, 25% of the decoder", "prune", _structured(model, "flap")),
        Piece(
            "attention-gd",
            "Attention-GD 50% on W_Q/W_K",
            "prune",
            _prune(model, "attention-gd", option=list(GD_OPTIONS), **qk),
            PAGE_ASSUMPTIONS,
        ),
        Piece(
            "magnitude-qk", "Magnitude 50% on W_Q/W_K", "prune", _prune(model, "magnitude", **qk)
        ),
        Piece("wanda-qk", "Wanda 50% on W_Q/W_K", "prune", _prune(model, "wanda", **qk)),
        Piece("sparsegpt", "SparseGPT 50%", "prune", _prune(model, "sparsegpt")),
        Piece("wanda-24", "Wanda 2:4", "prune", _prune(model, "wanda", pattern="2:4")),
    ) + ((zeroshot,) if zeroshot_available() else ())


def piece_for(page: str, model: str = DEFAULT_MODEL) -> Piece:
    """The piece of the demo set that fills ``page``."""
    return next(p for p in demo_pieces(model) if p.page == page)


def piece_config(store: RunStore, piece: Piece) -> RunConfig:
    """The resolved config a piece runs (ConfigError for a model or data that do not fit)."""
    return plan_request(piece.command, piece.params, store)


def piece_seconds(store: RunStore, piece: Piece) -> float:
    """Estimated duration of one piece on this machine (core.runs.estimate)."""
    return float(estimate_seconds(piece_config(store, piece), store))


def demo_seconds(store: RunStore, model: str = DEFAULT_MODEL) -> float:
    """Estimated duration of the whole set: its pieces one after another, the dense
    baseline counted once (it is the set's first piece), stored pieces free."""
    return float(estimate_many([piece_config(store, p) for p in demo_pieces(model)], store))


def start_demo(store: RunStore, model: str = DEFAULT_MODEL) -> None:
    """Start the demo set as one job queue of resolved configs; every piece is planned first,
    so a model or data the set cannot use raises here, before anything starts."""
    items = [QueueItem(p.key, p.title, piece_config(store, p)) for p in demo_pieces(model)]
    start_queue(store, QUEUE, items)


def start_piece(store: RunStore, piece: Piece) -> str:
    """Start one piece alone as a background job (from its resolved config); the job id."""
    return start_config_job(store, piece_config(store, piece))


def demo_status(store: RunStore) -> QueueStatus | None:
    return queue_status(store, QUEUE)


@dataclass(frozen=True)
class PieceTime:
    """One piece's time at a glance: taken so far (None before it starts) and still to go
    (0 once finished; None when it cannot be estimated)."""

    title: str
    state: str
    elapsed: float | None
    remaining: float | None


def piece_times(status: QueueStatus, estimates: Mapping[str, float | None]) -> list[PieceTime]:
    """Per piece of a running set, its elapsed and remaining seconds: a waiting piece its
    estimate (``estimates``: piece key -> seconds, as ``piece_seconds`` gives), a running one
    what its estimate leaves after the time taken (never below 0: an estimate runs short
    sometimes), a finished or skipped one nothing."""
    rows = []
    for item in status.items:
        estimate = estimates.get(item.key)
        if item.state == "waiting":
            remaining = estimate
        elif item.state == "running":
            remaining = None if estimate is None else max(estimate - (item.elapsed or 0.0), 0.0)
        else:
            remaining = 0.0
        rows.append(PieceTime(item.title, item.state, item.elapsed, remaining))
    return rows


def cancel_demo(store: RunStore) -> bool:
    return cancel_queue(store, QUEUE)


def cli_line(piece: Piece) -> str:
    """The ``python -m core`` command that computes the same run (the same run id)."""
    return command_line(piece.command, piece.params)
