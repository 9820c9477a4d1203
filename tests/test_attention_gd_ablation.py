"""The ablation of attention-gd's gain (core/analysis/gd_ablation.py and
bench/attention_gd_ablation.py): the component rule says "earns" for a component whose removal
raises perplexity and not for one whose removal changes nothing (50 synthetic draws each, ≥ 90
%). The bench's smoke run (both families' tables, paired against Wanda) is in
tests/test_bench.py."""

from __future__ import annotations

import numpy as np

from core.analysis.gd_ablation import (
    COMPONENTS,
    READINGS,
    ablation_rows,
    component_verdict,
)
from core.analysis.uncertainty import Bootstrap

DRAWS = 50


def synthetic_nll(rng, swap_gain: float, descent_gain: float, seeds=3, windows=64):
    """Window NLLs of the readings that share windows and seeds: a per-window term common to
    all (the pairing removes it), a per-seed term, and the default's gain from each component
    (the reading without a component lacks its gain)."""
    window = rng.normal(3.6, 0.4, (1, windows))
    seed = rng.normal(0.0, 0.002, (seeds, 1))

    def reading(gain: float) -> np.ndarray:
        return window + seed - gain + rng.normal(0.0, 0.01, (seeds, windows))

    return {
        "wanda": reading(0.0),
        "wanda + swap": reading(swap_gain),
        "adam, no swap": reading(descent_gain),
        "default": reading(swap_gain + descent_gain),
    }


def verdicts(rng, swap_gain: float, descent_gain: float) -> dict[str, str]:
    _, comps = ablation_rows(synthetic_nll(rng, swap_gain, descent_gain), Bootstrap(n_boot=300))
    return {c["component"]: c["verdict"] for c in comps}


def test_a_component_that_lowers_perplexity_earns_and_one_that_does_not_is_not_shown():
    """Swap search worth 0.01 nats, descent worth nothing: the swap search "earns" and the
    descent is "not shown" in ≥ 90 % of 50 draws each."""
    rng = np.random.default_rng(0)
    got = [verdicts(rng, 0.01, 0.0) for _ in range(DRAWS)]
    assert sum(g["swap search"] == "earns" for g in got) / DRAWS >= 0.9
    assert sum(g["descent (Adam)"] == "not shown" for g in got) / DRAWS >= 0.9
    got = [verdicts(rng, 0.0, 0.01) for _ in range(DRAWS)]
    assert sum(g["descent (Adam)"] == "earns" for g in got) / DRAWS >= 0.9
    assert sum(g["swap search"] == "not shown" for g in got) / DRAWS >= 0.9


def test_the_verdict_reads_the_interval():
    from core.analysis.uncertainty import Interval

    assert component_verdict(Interval(-0.02, -0.03, -0.01)) == "earns"
    assert component_verdict(Interval(0.02, 0.01, 0.03)) == "costs"
    assert component_verdict(Interval(-0.01, -0.03, 0.01)) == "not shown"


def test_every_reading_is_a_registered_method_with_valid_options():
    from core.methods import make_method

    for name, (method, options) in READINGS.items():
        assert make_method(method, options).name == method, name
    assert set(COMPONENTS.values()) <= set(READINGS)
