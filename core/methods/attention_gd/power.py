"""Detection power of the assumption rule (diagnostics.RULE) at a given step budget.

A verdict of "inconclusive" says little unless one knows whether the rule *could* have said
"supported" at the budget it ran: the production budget (``AttentionGDOptions().steps``) is
short. So the rule is run on controls whose answer is known and whose conditioning matches the
real layers' problems (controls.matched_quadratic: PL with μ = 1e-2, 1e-4 and L = 1;
controls.pl_violating: no PL constant), from ``STARTS`` seeded starts each, exactly as
production runs it (same check points, Hessian probes). Power = the fraction of PL-satisfying
controls that come out "supported", and of violating ones that come out "contradicted"; each
fraction carries a 95 % Wilson interval (a binomial proportion over the starts).
"""

from __future__ import annotations

import functools
import math
from typing import Any

from core.methods.attention_gd.controls import MATCHED_MU, matched_quadratic, pl_violating, start
from core.methods.attention_gd.diagnostics import AutogradObjective, check_assumptions, descend
from core.methods.attention_gd.options import CHECK_HESSIAN_AT, AttentionGDOptions

PRODUCTION_STEPS = AttentionGDOptions().steps
STARTS = 8  # seeded starts (and draws of Q, c) per control
BUDGETS = (20, 50, 100, 200, 500, 1000)  # the ladder on which the budget that detects is sought
TARGET = 0.8  # power at which a budget "detects"
Z95 = 1.96


def wilson(hits: int, n: int) -> tuple[float, float]:
    """95 % Wilson score interval of a binomial proportion hits/n."""
    if n == 0:
        return math.nan, math.nan
    p = hits / n
    den = 1 + Z95**2 / n
    mid = (p + Z95**2 / (2 * n)) / den
    half = Z95 * math.sqrt(p * (1 - p) / n + Z95**2 / (4 * n * n)) / den
    return max(0.0, mid - half), min(1.0, mid + half)


def judge_control(f, seed: int, steps: int) -> dict[str, Any]:
    """``check_assumptions`` on GD from start ``seed`` of ``f``, with production's settings."""
    opts = AttentionGDOptions()
    obj = AutogradObjective(f)
    return check_assumptions(
        obj,
        descend(obj, start(seed), steps),
        points=opts.check_points,
        power_iters=opts.power_iters,
        hessian_at=CHECK_HESSIAN_AT,
        seed=seed,
    )


def _rate(verdicts: list[str], wanted: str) -> dict[str, float]:
    hits = sum(v == wanted for v in verdicts)
    lo, hi = wilson(hits, len(verdicts))
    return {"rate": hits / len(verdicts), "lo": lo, "hi": hi, "n": len(verdicts)}


@functools.lru_cache(maxsize=64)
def detection_power(steps: int, mu: float, starts: int = STARTS) -> dict[str, Any]:
    """At ``steps`` GD steps: the fraction of matched quadratics with PL constant ``mu`` that
    the rule calls "supported" (and, wrongly, "contradicted"), and the fraction of PL-violating
    controls it calls "contradicted" (and, wrongly, "supported"), each with its interval."""
    if steps < 1 or starts < 1 or not mu > 0:
        raise ValueError(f"need steps >= 1, starts >= 1, mu > 0; got {steps}, {starts}, {mu}")
    pl = [judge_control(matched_quadratic(mu, s), s, steps)["verdict"] for s in range(starts)]
    bad = [judge_control(pl_violating(s), s, steps)["verdict"] for s in range(starts)]
    return {
        "steps": steps,
        "mu": mu,
        "supported": _rate(pl, "supported"),
        "false_contradicted": _rate(pl, "contradicted"),
        "contradicted": _rate(bad, "contradicted"),
        "false_supported": _rate(bad, "supported"),
    }


def detecting_budget(mu: float, target: float = TARGET) -> int | None:
    """The smallest budget of ``BUDGETS`` at which the rule supports PL with ``mu`` and
    contradicts the violating control each in ≥ ``target`` of the controls (None: none does)."""
    for steps in BUDGETS:
        p = detection_power(steps, mu)
        if p["supported"]["rate"] >= target and p["contradicted"]["rate"] >= target:
            return steps
    return None


def power_note(verdict: str, steps: int) -> str:
    """The sentence every verdict row carries: what this rule detects at ``steps`` steps."""
    parts = []
    for mu in MATCHED_MU:
        r = detection_power(steps, mu)["supported"]
        parts.append(f"PL with μ = {mu:g} in {r['rate']:.0%} [{r['lo']:.0%}, {r['hi']:.0%}]")
    c = detection_power(steps, MATCHED_MU[0])["contradicted"]
    return (
        f"{verdict}: at {steps} steps this rule detects {' and '.join(parts)} of controls "
        f"(n = {STARTS} each), and a PL violation (x⁴) in {c['rate']:.0%} "
        f"[{c['lo']:.0%}, {c['hi']:.0%}]"
    )


def power_table(budgets: tuple[int, ...] = (PRODUCTION_STEPS,)) -> list[dict[str, Any]]:
    """Rows (steps, μ, power to support, false contradictions, power to contradict, false
    supports) for the page and the report."""
    rows = []
    for steps in budgets:
        for mu in MATCHED_MU:
            p = detection_power(steps, mu)
            rows.append(
                {
                    "steps": steps,
                    "mu": mu,
                    "supported": p["supported"]["rate"],
                    "supported_lo": p["supported"]["lo"],
                    "supported_hi": p["supported"]["hi"],
                    "false_contradicted": p["false_contradicted"]["rate"],
                    "contradicted": p["contradicted"]["rate"],
                    "false_supported": p["false_supported"]["rate"],
                }
            )
    return rows
