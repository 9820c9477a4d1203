"""What the rule's power means in words: the sentence beside every verdict, the production
tally beside what the controls predict, and Theorem 4.1's step count beside the steps taken.
The figures come from ``power`` (controls matched to a real layer, 64 starts each)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from core.methods.attention_gd.options import AttentionGDOptions
from core.methods.attention_gd.power import (
    OPTIMIZER_NAMES,
    PRODUCTION_OPTIMIZER,
    STARTS,
    VERDICT_KEYS,
    power,
)
from core.methods.attention_gd.synthetic_layer import DIM


def budget_words(steps: int, optimizer: str = PRODUCTION_OPTIMIZER) -> str:
    """ "150 Adam steps (tol 1e-05)": the budget and the optimiser a power figure is for."""
    tol = AttentionGDOptions().tol
    stop = f" (tol {tol:g})" if optimizer != "gd" and tol > 0 else ""
    return f"{steps} {OPTIMIZER_NAMES.get(optimizer, optimizer)} steps{stop}"


def _pct(r: dict[str, float]) -> str:
    return f"{r['rate']:.0%} [{r['lo']:.0%}, {r['hi']:.0%}]"


def power_note(verdict: str, steps: int, optimizer: str = PRODUCTION_OPTIMIZER) -> str:
    """The sentence every verdict row carries: what this rule detects when it judges runs of
    at most ``steps`` ``optimizer`` steps, each fraction with its 95 % Wilson interval, and
    each statement of power or of error bounded by the interval's upper limit."""
    easy, layer = (
        power(steps, "spectrum 1..10", optimizer),
        power(steps, "layer density", optimizer),
    )
    quart, three = power(steps, "x⁴", optimizer), power(steps, "|x|^{3/2}", optimizer)
    return (
        f"{verdict}: at {budget_words(steps, optimizer)}, on controls of dimension {DIM:,} "
        f"({STARTS} starts each), this rule supports PL on a spectrum 1..10 in "
        f"{_pct(easy['supported'])} and on the layer's spectral density (μ = "
        f"{layer['mu']:.2g}, L = {layer['L']:.3g}, negative part included; {layer['density']}) "
        f"in at most {layer['supported']['hi']:.0%} ({layer['supported']['rate']:.0%} "
        f"measured); it contradicts a PL violation (x⁴) in {_pct(quart['contradicted'])} and a "
        f"Lipschitz violation (|x|^{{3/2}}) in {_pct(three['contradicted'])}; it wrongly "
        f"contradicts PL on the layer's density in at most "
        f"{layer['contradicted']['hi']:.0%} ({layer['contradicted']['rate']:.0%} measured) and "
        f"wrongly supports a violation in at most "
        f"{max(quart['supported']['hi'], three['supported']['hi']):.0%}"
    )


def tally_beside_controls(
    counts: Mapping[str, int], steps: int, optimizer: str = PRODUCTION_OPTIMIZER
) -> list[dict[str, Any]]:
    """A run's verdict counts beside what the controls predict for that many groups: per
    verdict, the groups observed, the count expected if PL holds with the layer's density
    (n × the layer-density control's fraction, with n × its interval) and if PL fails as x⁴
    does. A tally inside the "PL holds" interval is what the rule gives when PL holds."""
    n = sum(counts.get(v, 0) for v in VERDICT_KEYS)
    holds, fails = power(steps, "layer density", optimizer), power(steps, "x⁴", optimizer)
    return [
        {
            "verdict": v,
            "groups": counts.get(v, 0),
            "if PL holds": n * holds[v]["rate"],
            "if PL holds lo": n * holds[v]["lo"],
            "if PL holds hi": n * holds[v]["hi"],
            "if PL fails (x⁴)": n * fails[v]["rate"],
        }
        for v in VERDICT_KEYS
    ]


def rate_note(steps_pred: float, steps_taken: int, optimizer: str) -> str:
    """Theorem 4.1's predicted steps beside the steps taken, naming the optimiser that took
    them; the theorem's rate 1 − μ/L is for GD at step 1/L, so another optimiser's count is
    compared with it only as an order of magnitude."""
    name = OPTIMIZER_NAMES.get(optimizer, optimizer)
    text = (
        f"Theorem 4.1's rate 1 − μ̂/L̂ (plain GD at step 1/L̂) predicts {steps_pred:.3g} steps "
        f"to the gap this run reached; it took {steps_taken} {name} steps."
    )
    if optimizer != "gd":
        text += (
            f" The theorem's rate is for GD, not {name}: the comparison says how far "
            f"{name} is from GD's guarantee, not whether the theorem holds."
        )
    return text
