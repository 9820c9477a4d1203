"""Which reading the headroom table makes attention-gd's default: the rule, fixed in advance.

A budget-keeping relaxation (relax.py; its row alone or followed by the swap search) replaces
the default reading, Wanda's mask + Adam + swap search ("gd M0=wanda + swap"), only if it
beats **Wanda + swap** ("swap from wanda": the swap search with no descent) on held-out
windows by an interval that excludes 0, at every calibration size of the table:

  for each candidate row and size, d = held-out error(candidate) − held-out error(Wanda +
  swap) per calibration seed and layer (paired: the same seeds, layers and windows);
  its 95 % interval resamples layers and seeds (``core.analysis.uncertainty.paired_difference``);
  a candidate qualifies when the upper limit is < 0 at every size; among the qualifying
  rows the one with the lowest mean d over the sizes becomes the default (its options, one
  line in core/methods/attention_gd/options.py); if none qualifies the default stays and
  the README says so.

Wanda + swap is the comparator rather than the default reading because the ablation's
question is whether the descent adds anything to the swap search it is followed by.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from core.analysis.uncertainty import Interval, paired_difference

COMPARATOR = "swap from wanda"  # Wanda + swap (steps = 0)
CURRENT = "gd M0=wanda + swap"  # the reading the defaults run now (headroom.DEFAULT_ROW)


def held_differences(
    held: Mapping[str, Mapping[int, np.ndarray]], candidates: tuple[str, ...]
) -> dict[str, dict[int, Interval]]:
    """Per candidate row and calibration size, the interval of the mean paired held-out
    difference against ``COMPARATOR``. held[row][size]: (seeds, layers) held-out errors."""
    return {
        row: {n: paired_difference(held[row][n], held[COMPARATOR][n]) for n in held[row]}
        for row in candidates
    }


def choose_default(diffs: Mapping[str, Mapping[int, Interval]]) -> tuple[str, str]:
    """(the row that becomes the default, one sentence why) by the module docstring's rule."""
    ok = {row: d for row, d in diffs.items() if d and all(iv.hi < 0 for iv in d.values())}
    if not ok:
        return CURRENT, (
            f"no budget-keeping reading beats Wanda + swap held out by an interval excluding 0 "
            f"at every calibration size; the default stays {CURRENT!r}"
        )
    best = min(ok, key=lambda row: float(np.mean([iv.estimate for iv in ok[row].values()])))
    sizes = ", ".join(f"{n}: {iv}" for n, iv in sorted(ok[best].items()))
    return best, (
        f"{best!r} beats Wanda + swap held out at every calibration size (held-out error "
        f"difference {sizes}) and becomes the default"
    )
