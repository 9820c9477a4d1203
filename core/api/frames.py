"""Runs as a pandas frame, and Paper A's laws and verdict on a frame.

``runs`` gives the Runs page's table (``core.analysis.tables.runs_frame``) of a store, or the
same columns for prunes made in memory (``PruneReport``s evaluated with ``evaluate=``), with
the NLL of every evaluation window in ``window_nll`` when asked. ``laws`` fits the candidate
laws of (A1) to such a frame and reads (A1)'s verdict from them exactly as a relation sweep
does (``core.analysis.sweep_report.relation_on``: the joint test of (A1), the local first
order and the candidate laws, with intervals resampling calibration seeds, i.e. rows at the
same s, then evaluation windows, paired with the dense model's).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from core.analysis.laws import Means
from core.analysis.sweep_report import point_intervals, relation_on, window_nlls
from core.analysis.tables import runs_frame
from core.api.pruning import PruneReport, StoreArg, open_store
from core.errors import ConfigError
from core.evaluation.perplexity import PerplexityResult
from core.methods import get_method
from core.names import T_EVAL_WINDOWS, T_LAW_POINTS, T_LAWS
from core.store.run_store import RunRecord, RunStore

WINDOW_NLL = "window_nll"  # column: the NLL of every evaluation window of the row's model
DENSE = "dense"  # the method column of the dense model's row
VERDICT_KEYS = ("joint", "joint_w", "joint_p", "first_order", "kappa_local", "kappa_local_lo",
                "kappa_local_hi", "local_smax", "curvature", "reach", "best_loo",
                "best_extrap")  # fmt: skip


def runs(
    source: StoreArg | Sequence[PruneReport] = None,
    *,
    dense: PerplexityResult | None = None,
    windows: bool = False,
) -> pd.DataFrame:
    """One row per run: a store's (a RunStore, a folder, None for $PRUNESCOPE_HOME), or one
    per report of prunes made in memory, with a first ``dense`` row (method 'dense') when
    the dense model's perplexity is given. ``windows``: add ``window_nll`` (always there for
    reports)."""
    if isinstance(source, list | tuple):
        return _reports_frame(list(source), dense)
    store = open_store(source)
    records = store.list()
    frame = runs_frame(records)
    if windows:
        frame[WINDOW_NLL] = [_windows(store, r) for r in records]
    return frame


def _windows(store: RunStore, rec: RunRecord) -> list[float] | None:
    if rec.status != "done" or T_EVAL_WINDOWS not in store.load(rec.id).tables():
        return None
    return window_nlls(store, rec.id).tolist()


def _reports_frame(reports: list[PruneReport], dense: PerplexityResult | None) -> pd.DataFrame:
    """The runs frame's columns for reports of prunes made in memory."""
    columns = [*runs_frame([]).columns, WINDOW_NLL]
    rows: list[dict[str, Any]] = []
    if dense is not None:
        rows.append(
            {"kind": "eval", "status": "done", "method": DENSE, "ppl": dense.ppl,
             WINDOW_NLL: list(dense.window_nll)}
        )  # fmt: skip
    for r in reports:
        if not isinstance(r, PruneReport):
            raise ConfigError(f"runs() takes PruneReports (from prune), got {type(r).__name__}")
        ppl = r.perplexity
        rows.append(
            {
                "kind": get_method(r.method).run_kind,
                "status": "done",
                "model": r.model,
                "method": r.method,
                "sparsity": r.sparsity,
                "pattern": r.pattern,
                "targets": r.config["prune"]["targets"],
                "ppl": None if ppl is None else ppl.ppl,
                "dense_ppl": None if dense is None else dense.ppl,
                "achieved_sparsity": r.summary.get("achieved_sparsity"),
                "prune_seconds": r.summary.get("prune_seconds"),
                "id": r.run_id,
                WINDOW_NLL: None if ppl is None else list(ppl.window_nll),
            }
        )
    return pd.DataFrame(rows, columns=columns)


@dataclass(frozen=True)
class LawFit:
    """(A1) judged on a frame's points. ``sentence``: the verdict in words (the joint test,
    the local first order and reach, core.analysis.verdicts); ``verdict``: its parts (the
    joint test's W and p, the local κ with its interval, curvature, reach, the laws that
    describe the curve best); ``laws``: one row per candidate law (parameters with 95%
    intervals, mean |error| in sample, leaving one s out and extrapolating, its verdict);
    ``points``: each law's fitted and held-out errors per s; ``ratios``: ln PPL₀/ln PPL per s
    with its interval."""

    sentence: str
    verdict: dict[str, Any] = field(repr=False)
    laws: pd.DataFrame = field(repr=False)
    points: pd.DataFrame = field(repr=False)
    ratios: pd.DataFrame = field(repr=False)
    n_windows: int = 0
    n_seeds: int = 0


def _nll(values: Sequence[Any]) -> np.ndarray:
    rows = [np.asarray(v, dtype=float) for v in values]
    if len({r.shape for r in rows}) != 1:
        raise ConfigError("the rows were evaluated on different numbers of windows")
    return np.stack(rows)


def laws(frame: pd.DataFrame, s: str = "sparsity") -> LawFit:
    """The candidate laws of (A1) fitted to ``frame``'s rows against column ``s`` (the nominal
    sparsity; e.g. ``s_eff`` for sliced runs), with the verdict a relation sweep prints. The
    frame needs ``window_nll`` (``runs(..., windows=True)``, or reports evaluated with
    ``evaluate=``), exactly one dense row (method 'dense', its windows those of every
    point) and at least two sparsities; rows at the same s are calibration seeds."""
    if WINDOW_NLL not in frame:
        raise ConfigError(
            "the frame has no window_nll column: use runs(store, windows=True), or prune "
            "with evaluate= and runs(reports, dense=...)"
        )
    have = frame[frame[WINDOW_NLL].map(lambda v: v is not None and len(v) > 0)]
    dense = have[have["method"] == DENSE]
    points = have[(have["method"] != DENSE) & have[s].notna()]
    if len(dense) != 1:
        raise ConfigError(
            f"the frame holds {len(dense)} dense rows with window NLLs; the laws need exactly "
            "one, the dense model every point is compared with (filter to one model and one "
            "evaluation corpus)"
        )
    grid = sorted(float(x) for x in points[s].unique())
    if len(grid) < 2:
        raise ConfigError(f"the laws need points at two sparsities or more, got {grid}")
    nll = [_nll(points.loc[points[s] == x, WINDOW_NLL].tolist()) for x in grid]
    base = _nll(dense[WINDOW_NLL].tolist())[0]
    if any(p.shape[1] != base.shape[0] for p in nll):
        raise ConfigError("the points and the dense row were evaluated on different windows")
    m = Means.from_units(grid, nll, base)
    out = relation_on(m, s)
    return LawFit(
        out["sentence"],
        {k: out[k] for k in VERDICT_KEYS},
        pd.DataFrame(out[T_LAWS]),
        pd.DataFrame(out[T_LAW_POINTS]),
        pd.DataFrame(point_intervals(m)),
        int(out["n_windows"]),
        min(p.shape[0] for p in nll),
    )
