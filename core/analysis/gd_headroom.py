"""The headroom table as data: each judged row's attribution, the default's choice, and the
record the pages read (``core.methods.attention_gd.headroom``).

The table's cells come from the headroom protocol (bench/attention_gd_headroom.py):
``res[(n, row)]`` is a list over calibration seeds of {column: mean over layers} at n
calibration windows, and ``held[row][n]`` the held-out errors as (seeds, layers). The
attribution rule is ``core.methods.attention_gd.attribution.RULE``; the default's rule is
``core.analysis.gd_choice``.
"""

from __future__ import annotations

import statistics
from typing import Any

import numpy as np

from core.analysis.gd_choice import COMPARATOR, choose_default, held_differences
from core.methods.attention_gd.attribution import Stages, attribute

JUDGED = ("gd M0=wanda", "gd polytope", "gd anneal", "gd topk")  # rows the attribution judges
CANDIDATES = ("gd polytope", "gd anneal", "gd topk", *(f"{r} + swap" for r in JUDGED[1:]))
EXCLUDED = ("sparsegpt",)  # changes the weights: not a binary mask of the same objective


def mean_sd(rows: list[dict[str, float]], key: str) -> tuple[float, float]:
    """Mean and standard deviation over the seeds of one column (sd 0 for one seed)."""
    xs = [r[key] for r in rows]
    return statistics.mean(xs), statistics.stdev(xs) if len(xs) > 1 else 0.0


def stages(res, n: int, row: str) -> Stages:
    """The attribution's inputs for ``row`` at size n: means over seeds of the layer means;
    B_cal over every binary-mask row of the table."""
    mask_rows = [name for (size, name) in res if size == n and name not in EXCLUDED]
    return Stages(
        wanda_cal=mean_sd(res[(n, "wanda")], "calib")[0],
        wanda_held=mean_sd(res[(n, "wanda")], "held")[0],
        best_binary_cal=min(mean_sd(res[(n, name)], "calib")[0] for name in mask_rows),
        cont_budget=mean_sd(res[(n, row)], "cont")[0],
        bin_cal=mean_sd(res[(n, row)], "calib")[0],
        bin_held=mean_sd(res[(n, row)], "held")[0],
    )


def attributions(res, n: int) -> dict[str, str]:
    """The label of every judged row present at size n."""
    return {row: attribute(stages(res, n, row)) for row in JUDGED if (n, row) in res}


def default_choice(held, sizes) -> tuple[str, str, dict]:
    """(row, sentence, intervals per candidate and size) by ``gd_choice.choose_default``."""
    arrays = {
        row: {n: np.asarray(held[row][n]) for n in sizes}
        for row in (COMPARATOR, *CANDIDATES)
        if row in held
    }
    diffs = held_differences(arrays, tuple(r for r in CANDIDATES if r in arrays))
    row, why = choose_default(diffs)
    return row, why, diffs


def headroom_record(protocol: dict[str, Any], seqlen: int, res, held, sizes) -> dict[str, Any]:
    """The table (mean and std over seeds of every column), the attributions and the choice
    of the default; ``protocol``: the run's settings (model, sparsity, layers, seeds, ...),
    stored as given."""
    rows = sorted({name for (_, name) in res}, key=lambda name: list(held).index(name))
    row, why, diffs = default_choice(held, sizes)
    return {
        **protocol,
        "rule": "core/methods/attention_gd/attribution.py (RULE)",
        "default": {"row": row, "why": why},
        "sizes": [
            {
                "tokens": n * seqlen,
                "attribution": attributions(res, n)["gd M0=wanda"],
                "attributions": attributions(res, n),
                "held_vs_wanda_swap": {
                    cand: [d[n].estimate, d[n].lo, d[n].hi] for cand, d in diffs.items()
                },
                "rows": {
                    name: {k: mean_sd(res[(n, name)], k) for k in res[(n, name)][0]}
                    for name in rows
                },
            }
            for n in sizes
        ],
    }
