"""Matched-budget comparison (core.analysis.budget): interpolation inside the covered range only,
and a winner only when intervals separate (controls: clearly apart -> a winner, overlapping ->
none)."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from core.analysis.budget import matched_table, winner
from core.errors import ConfigError


def points(spread: float) -> pd.DataFrame:
    rows = []
    for kept, a, b in ((0.9, 20.0, 30.0), (0.7, 40.0, 90.0), (0.5, 100.0, 400.0)):
        for series, ppl in (("wanda", a), ("slicegpt", b)):
            rows.append(
                {
                    "series": series,
                    "kept_params": kept,
                    "ppl": ppl,
                    "ppl_lo": ppl / spread,
                    "ppl_hi": ppl * spread,
                }
            )
    return pd.DataFrame(rows)


def test_log_linear_interpolation_between_neighbours() -> None:
    table = matched_table(points(1.05), levels=(0.8,))
    wanda = table[table["series"] == "wanda"].iloc[0]
    assert wanda["ppl"] == pytest.approx(math.sqrt(20.0 * 40.0))  # halfway in ln PPL
    assert wanda["ppl_lo"] == pytest.approx(wanda["ppl"] / 1.05)


def test_no_extrapolation_outside_the_covered_range() -> None:
    table = matched_table(points(1.05), levels=(0.95, 0.4, 0.7))
    assert table["level"].tolist() == [0.7, 0.7]


def test_winner_controls() -> None:
    apart = matched_table(points(1.05), levels=(0.7,))
    assert winner(apart, 0.7) == "wanda"  # 40 [38, 42] vs 90 [86, 95]: separated
    overlap = matched_table(points(3.0), levels=(0.7,))
    assert winner(overlap, 0.7) is None  # 40 [13, 120] vs 90 [30, 270]: not separated
    assert winner(apart, 0.95) is None  # nobody reaches it


def test_bad_input() -> None:
    with pytest.raises(ConfigError):
        matched_table(points(1.05), budget="sparsity")
    with pytest.raises(ConfigError):
        matched_table(pd.DataFrame({"series": ["a"], "ppl": [3.0]}))
