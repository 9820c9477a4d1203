"""How much a pruning mask depends on its calibration data: the agreement of two keep sets of
the same linear, beside the floor two random keep sets would reach.

For one linear of n weights, a run that keeps the set A (|A| = k_a) and a re-run with another
calibration draw that keeps B (|B| = k_b):

- **Jaccard** J = |A ∩ B| / |A ∪ B| (1: the same weights kept);
- **kept again** |A ∩ B| / |A|: the fraction of the run's kept weights the re-run keeps too.

**Floor.** Two keep sets drawn at random, independently, with keep fractions p_a = k_a/n and
p_b = k_b/n, share p_a·p_b·n weights in expectation, so their Jaccard is about
p_a·p_b / (p_a + p_b − p_a·p_b), which is p/(2 − p) at equal fractions p (1/3 at 50 %), and
the fraction kept again is p_b. An N:M mask drawn at random within each group of M has the
same expectations (within a group, E|A ∩ B| = N²/M). A layer or a whole model pools its
linears: Σ|A ∩ B| / Σ|A ∪ B| beside Σ E|A ∩ B| / Σ E|A ∪ B|.

Masks are handled as ``np.packbits`` of the keep mask (what a prune run stores, 1 bit a
weight, ``core.runs.restore``); every function here is pure numpy.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from typing import Any

import numpy as np

from core.errors import ConfigError


def _count(bits: np.ndarray) -> int:
    return int(np.unpackbits(bits).sum(dtype=np.int64))


def jaccard_floor(p_a: float, p_b: float) -> float:
    """Expected Jaccard of two independent random keep sets with keep fractions p_a, p_b."""
    union = p_a + p_b - p_a * p_b
    return p_a * p_b / union if union > 0 else 1.0


def mask_agreement(a: np.ndarray, b: np.ndarray, n: int) -> dict[str, float | int]:
    """Agreement of two packed keep masks of the same n weights: kept counts, shared, union,
    Jaccard, the fraction of ``a``'s kept weights kept again, and both floors."""
    if a.shape != b.shape or a.dtype != np.uint8 or b.dtype != np.uint8:
        raise ConfigError("masks to compare must be packed bits of the same linear")
    if n <= 0 or a.size * 8 < n:
        raise ConfigError(f"{a.size * 8} mask bits cannot hold {n} weights")
    kept_a, kept_b, shared = _count(a), _count(b), _count(a & b)
    union = kept_a + kept_b - shared
    p_a, p_b = kept_a / n, kept_b / n
    return {
        "n": n,
        "kept_source": kept_a,
        "kept_draw": kept_b,
        "shared": shared,
        "union": union,
        "jaccard": shared / union if union else 1.0,
        "kept_again": shared / kept_a if kept_a else 1.0,
        "jaccard_floor": jaccard_floor(p_a, p_b),
        "kept_again_floor": p_b,
    }


def pooled(rows: Sequence[dict[str, Any]]) -> dict[str, float]:
    """Several linears' agreement as one: shared and union summed, and the floors from the
    summed expectations (module docstring)."""
    if not rows:
        raise ConfigError("no masks to pool")
    shared = sum(r["shared"] for r in rows)
    union = sum(r["union"] for r in rows)
    kept = sum(r["kept_source"] for r in rows)
    exp_shared = sum(r["kept_source"] * r["kept_draw"] / r["n"] for r in rows)
    exp_union = sum(r["kept_source"] + r["kept_draw"] for r in rows) - exp_shared
    return {
        "jaccard": shared / union if union else 1.0,
        "kept_again": shared / kept if kept else 1.0,
        "jaccard_floor": exp_shared / exp_union if exp_union else 1.0,
        "kept_again_floor": sum(r["kept_draw"] for r in rows) / sum(r["n"] for r in rows),
    }


AGREEMENT_KEYS = ("jaccard", "kept_again", "jaccard_floor", "kept_again_floor")


def per_layer(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per decoder layer: each draw's pooled agreement over the layer's linears, then the mean
    over draws and the lowest draw's Jaccard. ``rows``: ``mask_agreement`` rows with
    ``draw`` and ``layer``."""
    out = []
    for layer in sorted({r["layer"] for r in rows}):
        draws = [
            pooled([r for r in rows if r["layer"] == layer and r["draw"] == d])
            for d in sorted({r["draw"] for r in rows if r["layer"] == layer})
        ]
        row: dict[str, Any] = {"layer": layer}
        row.update({k: statistics.fmean(d[k] for d in draws) for k in AGREEMENT_KEYS})
        row["jaccard_min"] = min(d["jaccard"] for d in draws)
        out.append(row)
    return out


def ppl_spread(ppl: Sequence[float]) -> dict[str, float | int]:
    """The spread of perplexity over calibration draws: mean, standard deviation (n − 1),
    min, max and (max − min)/mean."""
    values = [float(x) for x in ppl]
    if not values:
        raise ConfigError("no perplexities to spread")
    mean = statistics.fmean(values)
    sd = statistics.stdev(values) if len(values) > 1 else math.nan
    return {
        "n": len(values),
        "mean": mean,
        "sd": sd,
        "min": min(values),
        "max": max(values),
        "rel_range": (max(values) - min(values)) / mean,
    }
