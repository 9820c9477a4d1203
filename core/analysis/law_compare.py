"""Every candidate law of (A1) on one sweep, compared by paired bootstrap differences of their
out-of-sample errors (the primary protocol's estimand 3, docs/statistics.md).

For each score (leave one s out over s > 0, extrapolating from nominal s ≤ 0.2) and each pair
of laws (A, B), the difference D = E_A − E_B of their mean |PPL_pred/PPL − 1| is one
statistic of the same replicates (paired: both laws see the same resampled windows and seeds),
with the studentised interval of core.analysis.uncertainty. A difference *excludes 0* when its
interval lies wholly on one side. The *leader* of a score is the law with the least error; the
laws whose difference from the leader does not exclude 0 are named with it, and a law is
*best* only when it is named alone (its difference against every other law excludes 0).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from itertools import combinations
from typing import Any

from core.analysis.laws import KINDS, LAWS, Law, Means, law_statistic, score_law
from core.analysis.protocol import EXTRAPOLATE_FROM
from core.analysis.uncertainty import Bands, Evaluated, Interval

COMPARED = ("loo", "extrap")  # the out-of-sample scores laws are compared on


def difference_bands(
    m: Means,
    laws: Sequence[Law] = LAWS,
    s_fit: float = EXTRAPOLATE_FROM,
    evaluated: Sequence[Evaluated] | None = None,
) -> tuple[list[tuple[str, int, int]], Bands]:
    """The pairs (score, i, j) in ``laws`` order and the intervals of E_i − E_j, one output
    per pair (batched like ``m``). ``evaluated``: the laws' statistics already evaluated on
    ``m`` (``law_statistic``), in ``laws`` order."""
    if evaluated is None:
        evaluated = [m.r.evaluate(law_statistic(law, m, s_fit)) for law in laws]
    score = {  # each law's mean |error| of each compared score, as one output
        (kind, i): e.take([len(law.params) + KINDS.index(kind)])
        for kind in COMPARED
        for i, (law, e) in enumerate(zip(laws, evaluated, strict=True))
    }
    pairs = [(k, i, j) for k in COMPARED for i, j in combinations(range(len(laws)), 2)]
    return pairs, m.r.bands(Evaluated.stack([score[k, i] - score[k, j] for k, i, j in pairs]))


def difference_rows(
    laws: Sequence[Law], pairs: list[tuple[str, int, int]], ivs: Sequence[Interval]
) -> list[dict[str, Any]]:
    """One row per pair: difference = E_law − E_other with its interval and whether it
    excludes 0 (negative: ``law`` predicts better)."""
    return [
        {
            "kind": kind,
            "law": laws[i].name,
            "other": laws[j].name,
            **iv.as_dict("difference"),
            "excludes_zero": bool(iv.lo > 0 or iv.hi < 0),
        }
        for iv, (kind, i, j) in zip(ivs, pairs, strict=True)
    ]


def differences(
    m: Means,
    laws: Sequence[Law] = LAWS,
    s_fit: float = EXTRAPOLATE_FROM,
    evaluated: Sequence[Evaluated] | None = None,
) -> list[dict[str, Any]]:
    """``difference_rows`` of one sweep."""
    pairs, bands = difference_bands(m, laws, s_fit, evaluated)
    return difference_rows(laws, pairs, bands.intervals())


def leaders(scores: dict[str, dict[str, Any]], rows: list[dict[str, Any]]) -> dict[str, list]:
    """Per compared score, the laws not separated from the one with the least error (the
    leader first; empty when no law could be scored). A list of one names the best law."""
    out: dict[str, list[str]] = {}
    for kind in COMPARED:
        known = {
            n: sc[kind].estimate for n, sc in scores.items() if math.isfinite(sc[kind].estimate)
        }
        if not known:
            out[kind] = []
            continue
        lead = min(known, key=known.get)
        tied = [
            r["other"] if r["law"] == lead else r["law"]
            for r in rows
            if r["kind"] == kind and lead in (r["law"], r["other"]) and not r["excludes_zero"]
        ]
        out[kind] = [lead, *sorted((n for n in tied if n in known), key=known.get)]
    return out


def fit_laws(m: Means, laws: Sequence[Law] = LAWS, s_fit: float = EXTRAPOLATE_FROM) -> dict:
    """Every law of ``laws`` scored on one sweep ({law name: score_law(...)}), their paired
    differences, and per score the laws not separated from the leader."""
    evaluated = [m.r.evaluate(law_statistic(law, m, s_fit)) for law in laws]
    scores = {law.name: score_law(law, m, s_fit, e) for law, e in zip(laws, evaluated, strict=True)}
    rows = differences(m, laws, s_fit, evaluated)
    return {
        "laws": scores,
        "differences": rows,
        "best": leaders(scores, rows),
        "s_fit": s_fit,
        "n_windows": m.r.n_windows,
        "n_seeds": min(m.r.n_seeds[:-1]),
    }
