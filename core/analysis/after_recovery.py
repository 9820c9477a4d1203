"""Paper A's relation after recovery: stored SliceGPT slice runs that were fine-tuned by
'recover' runs (core.runs.recover), perplexity against s before and after, and the candidate
laws of (A1) fitted to the recovered points beside the same laws fitted to the one-shot ones.

Does recovery bring ln PPL₀/ln PPL back toward 1 − s, or shift it? Both fits use the same
code as a sweep's (``core.analysis.sweep_report.relation_on`` on ``Means.from_units``: the
joint test, the local first order, the laws and the verdict) on the same s, the
same dense model's window NLLs (PPL₀) and the same evaluation windows: the one-shot fit is
made from exactly the slice runs that were recovered, so the two differ only by recovery.

A group is one model, one dense run and one number of recovery steps; a point is a
sparsity s, its slice runs (one per calibration seed) and their recover runs, each stacked in
run-id order (the bootstrap resamples seeds by position). Everything is read from the store;
nothing is drawn here.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Any

import numpy as np

from core.analysis.laws import Means
from core.analysis.sweep_report import relation_on, window_nlls
from core.errors import StoreError
from core.names import RECOVER, SLICE
from core.store.run_store import RunStore

RECOVER_HINT = "python -m core recover --run ID --steps 100"
NO_RECOVERY = (
    "No recovered SliceGPT runs yet: recover slice runs of one model at two or more s with "
    f"the same number of steps ({RECOVER_HINT}, or sweep --recover-steps N)."
)
TOO_FEW = "Paper A's laws need recovered slice runs at two or more s (one-shot fits need two)."
ONE_SHOT, RECOVERED = "one-shot", "recovered"
POINT_COLUMNS = (
    "s",
    "ppl_before",
    "ppl_after",
    "dense_ppl",
    "ratio_before",
    "ratio_after",
    "n_slice_runs",
    "n_recover_runs",
)
FIT_COLUMNS = (
    "fit",
    "joint",
    "joint_p",
    "kappa_local",
    "kappa_local_lo",
    "kappa_local_hi",
    "first_order",
    "curvature",
    "reach",
    "best_extrap",
    "sentence",
)


@dataclass(frozen=True)
class RecoveredPair:
    """One stored recover run of a finished SliceGPT slice run, with its parent's s."""

    s: float
    parent: str
    recover: str
    steps: int
    model: str
    dense_run: str


@dataclass(frozen=True)
class Group:
    """The recovered slice runs that can be fitted together: one model, one dense baseline
    (PPL₀ and the evaluation windows), one number of recovery steps."""

    model: str
    dense_run: str
    steps: int

    @property
    def label(self) -> str:
        return f"{self.model}, {self.steps} recovery steps (dense run {self.dense_run[:8]})"


def recovered_pairs(store: RunStore) -> list[RecoveredPair]:
    """Every finished recover run whose parent is a finished slice run with a dense run,
    paired with the parent's s (recover runs of prune runs, or of parents no longer stored,
    are left out)."""
    slices = {r.id: r for r in store.list(kind=SLICE, status="done")}
    out = []
    for r in store.list(kind=RECOVER, status="done"):
        rc = (r.config.get("extra") or {}).get(RECOVER) or {}
        parent = slices.get(rc.get("parent"))
        if parent is None or parent.sparsity is None:
            continue
        dense = parent.summary.get("dense_run")
        if not dense:
            continue
        out.append(
            RecoveredPair(
                float(parent.sparsity), parent.id, r.id, int(rc["steps"]), str(r.model), dense
            )
        )
    return sorted(out, key=lambda p: (p.s, p.parent, p.recover))


def recovered_groups(pairs: list[RecoveredPair]) -> list[Group]:
    """The groups present, the one with most distinct s first."""
    by: dict[Group, set[float]] = {}
    for p in pairs:
        by.setdefault(Group(p.model, p.dense_run, p.steps), set()).add(p.s)
    return sorted(by, key=lambda g: (-len(by[g]), g.model, g.steps, g.dense_run))


def _fit(s: list[float], nll: list[np.ndarray], dense: np.ndarray, basis: str) -> dict[str, Any]:
    """(A1) on one set of points as a sweep reads it (core.analysis.sweep_report.relation_on:
    the joint test, the local first order, the laws and the verdict)."""
    return relation_on(Means.from_units(s, nll, dense), basis)


def _ratio(ppl: float, dense_ppl: float | None) -> float | None:
    if dense_ppl is None or not (ppl > 1 and dense_ppl > 1):
        return None
    return math.log(dense_ppl) / math.log(ppl)


def _ppl(store: RunStore, ids: list[str]) -> float:
    return statistics.fmean(store.get(i).summary["ppl"] for i in ids)


def recovered_relation(store: RunStore, group: Group | None = None) -> dict[str, Any]:
    """Before and after recovery for one group (``group``, else the one with most s):

    - ``points``: one row per s (``POINT_COLUMNS``): mean perplexity of the recovered slice
      runs and of their recover runs, the dense perplexity, ln PPL₀/ln PPL of each, counts;
    - ``one_shot`` / ``recovered``: relation_on(...) on the slice runs' and the recover runs'
      window NLLs (against the s they were sliced at), or None with ``message`` when there
      are fewer than two s;
    - ``fits``: the two verdicts side by side (``FIT_COLUMNS``);
    - ``groups`` (every group present) and ``group`` (the one shown, None when none).
    """
    pairs = recovered_pairs(store)
    groups = recovered_groups(pairs)
    empty = {"points": [], "one_shot": None, "recovered": None, "fits": [], "groups": groups}
    if group is None and groups:
        group = groups[0]
    if group is None or group not in groups:
        return {**empty, "group": None, "message": NO_RECOVERY}
    mine = [p for p in pairs if Group(p.model, p.dense_run, p.steps) == group]
    s_values = sorted({p.s for p in mine})
    parents = [sorted({p.parent for p in mine if p.s == s}) for s in s_values]
    recovers = [sorted({p.recover for p in mine if p.s == s}) for s in s_values]
    dense_ppl = store.get(parents[0][0]).summary.get("dense_ppl")
    points = []
    for s, par, rec in zip(s_values, parents, recovers, strict=True):
        before, after = _ppl(store, par), _ppl(store, rec)
        points.append(
            {
                "s": s,
                "ppl_before": before,
                "ppl_after": after,
                "dense_ppl": dense_ppl,
                "ratio_before": _ratio(before, dense_ppl),
                "ratio_after": _ratio(after, dense_ppl),
                "n_slice_runs": len(par),
                "n_recover_runs": len(rec),
            }
        )
    out = {**empty, "points": points, "group": group, "message": None}
    if len(s_values) < 2:
        return {**out, "message": TOO_FEW}
    try:
        dense = window_nlls(store, group.dense_run)
        nll_before = [np.stack([window_nlls(store, i) for i in ids]) for ids in parents]
        nll_after = [np.stack([window_nlls(store, i) for i in ids]) for ids in recovers]
    except StoreError as exc:
        return {**out, "message": f"cannot fit: {exc}"}
    one_shot = _fit(s_values, nll_before, dense, ONE_SHOT)
    recovered = _fit(s_values, nll_after, dense, RECOVERED)
    fits = [
        {"fit": name, **{k: fit[k] for k in FIT_COLUMNS[1:]}}
        for name, fit in ((ONE_SHOT, one_shot), (RECOVERED, recovered))
    ]
    return {**out, "one_shot": one_shot, "recovered": recovered, "fits": fits}


def before_after_curves(points: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``points`` as rows for ``core.figures.ppl_vs_sparsity``: series one-shot / recovered,
    with the dense perplexity (method, sparsity, ppl, series, dense_ppl)."""
    return [
        {
            "method": "slicegpt",
            "sparsity": p["s"],
            "ppl": p[key],
            "series": name,
            "dense_ppl": p["dense_ppl"],
        }
        for p in points
        for key, name in (("ppl_before", ONE_SHOT), ("ppl_after", RECOVERED))
    ]
