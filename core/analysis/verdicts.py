"""The written rules that turn Paper A's fits into verdicts, one place for the CLI and the app.

(A1), perplexity (``a1_verdict``, on the scores of ``core.analysis.laws``). Two questions,
kept apart because a sweep can answer one and not the other:

- **First order.** (A1) is ln PPL = ln PPL₀/(1 − s) = ln PPL₀·(1 + s + s²/(1 − s)), so its
  slope at s = 0 is κ = 1. κ is read from the ``curved`` law (first order plus (A1)'s own
  curvature term; fitted on every point, so (A1)'s curvature does not bias it) and, when that
  law cannot be fitted (fewer than two s > 0), from the ``linear`` law. *supported* when κ's
  95% interval lies inside 1 ± ``KAPPA_TOL`` (0.1, the tolerance fixed before any sweep for
  the slope, core.analysis.uncertainty.TOLERANCE); *contradicted* when it lies wholly outside;
  else *inconclusive*.
- **Curvature and reach.** (A1)'s own prediction PPL₀^{1/(1−s)} against the measured
  perplexity, point by point with 95% intervals: a point *agrees* when its interval of
  PPL_pred/PPL − 1 lies inside ±``PPL_TOL`` (10%), *departs* when it lies wholly outside.
  The reach is the largest s up to which every point agrees. The curvature verdict reads the
  points beyond ``S_CURVE`` = 0.2: *agrees* when all agree, *over-predicts* (or
  *under-predicts*) when some depart and all that depart do so upwards (downwards), else
  *inconclusive*.

The sentence says both in plain words, e.g. "(A1) holds to first order (κ = 1.02 [0.99,
1.05]); its perplexity prediction agrees within ±10% up to s ≈ 0.2, is undecided at s = 0.3
and over-predicts by +103% [..] at s = 0.4 to +1217% [..] at s = 0.6", and names the law that
predicts best out of sample.

(A2), accuracy (``accuracy_verdict``; ``ACCURACY_RULE`` is the same rule in words for the
page): ln(acc/acc₀) = κ·(1 − s) + c must say more than "accuracy falls with s". *supported*
when κ's 95% interval lies above 0 **and** the law predicts held-out points: the 95% upper
bound of the mean |accuracy error| leaving one s out is at most ``ACC_TOL`` = 0.03 (3
accuracy points); *contradicted* when κ's interval lies at or below 0 or that error's lower
bound exceeds ``ACC_TOL``; else *inconclusive* (also with fewer than three pruned points,
where nothing is left to predict).
"""

from __future__ import annotations

import math
from typing import Any

from core.analysis.laws import PPL_TOL
from core.analysis.uncertainty import TOLERANCE, Interval

KAPPA_TOL = TOLERANCE
S_CURVE = 0.2
ACC_TOL = 0.03
ACCURACY_RULE = (
    "(A2) is judged by one rule (core.analysis.verdicts): supported when κ's 95% interval "
    "lies above 0 and the fitted line predicts each s left out within "
    f"{ACC_TOL:.0%} accuracy (95% upper bound of the mean |error|); contradicted when κ ≤ 0 "
    f"with confidence or that error exceeds {ACC_TOL:.0%} with confidence; else inconclusive."
)


def _finite(iv: Interval) -> bool:
    return math.isfinite(iv.lo) and math.isfinite(iv.hi)


def first_order(kappa: Interval, tol: float = KAPPA_TOL) -> str:
    """supported / contradicted / inconclusive: κ's interval against the band 1 ± tol."""
    if not _finite(kappa):
        return "inconclusive"
    if 1 - tol <= kappa.lo and kappa.hi <= 1 + tol:
        return "supported"
    if kappa.hi < 1 - tol or kappa.lo > 1 + tol:
        return "contradicted"
    return "inconclusive"


def departure(lo: float, hi: float, tol: float = PPL_TOL) -> int:
    """+1 / −1 when an error interval lies wholly above +tol / below −tol, 0 otherwise."""
    if not (math.isfinite(lo) and math.isfinite(hi)):
        return 0
    return 1 if lo > tol else (-1 if hi < -tol else 0)


def _agrees(pt: dict[str, Any], tol: float = PPL_TOL) -> bool:
    return -tol <= pt["fit_error_lo"] and pt["fit_error_hi"] <= tol


def curvature(points: list[dict[str, Any]], s_curve: float = S_CURVE) -> str:
    """agrees / over-predicts / under-predicts / inconclusive from (A1)'s errors beyond
    ``s_curve`` (points: score_law(A1)'s, with fit_error_lo/_hi)."""
    beyond = [p for p in points if p["s"] > s_curve + 1e-9]
    if not beyond:
        return "inconclusive"
    signs = {departure(p["fit_error_lo"], p["fit_error_hi"]) for p in beyond}
    if all(_agrees(p) for p in beyond):
        return "agrees"
    if signs == {1} or signs == {0, 1}:
        return "over-predicts"
    if signs == {-1} or signs == {-1, 0}:
        return "under-predicts"
    return "inconclusive"


def reach(points: list[dict[str, Any]]) -> float | None:
    """The largest s up to which every point's (A1) error agrees within ±PPL_TOL (None when
    the smallest s already does not)."""
    out = None
    for p in sorted(points, key=lambda p: p["s"]):
        if not _agrees(p):
            break
        out = p["s"]
    return out


def _pct(v: float) -> str:
    return f"{v:+.0%}"


def _err(p: dict[str, Any]) -> str:
    return f"{_pct(p['fit_error'])} [{_pct(p['fit_error_lo'])}, {_pct(p['fit_error_hi'])}]"


def a1_verdict(result: dict[str, Any]) -> dict[str, Any]:
    """(A1)'s verdict from ``core.analysis.laws.fit_laws``: first order, curvature, reach
    and the sentence (module docstring)."""
    laws = result["laws"]
    kappa, source = laws["curved"]["kappa"], "curved"
    if not _finite(kappa):
        kappa, source = laws["linear"]["kappa"], "linear"
    order = first_order(kappa)
    points = laws["a1"]["points"]
    far = reach(points)
    curve = curvature(points)
    words = {
        "supported": f"(A1) holds to first order (κ = {kappa}, within 1 ± {KAPPA_TOL:g})",
        "contradicted": (
            f"(A1) fails at first order: κ = {kappa} lies outside 1 ± {KAPPA_TOL:g} "
            f"(ln PPL rises {abs(kappa.estimate - 1):.0%} "
            f"{'faster' if kappa.estimate > 1 else 'slower'} with s than (A1)'s ln PPL₀·(1 + s))"
        ),
        "inconclusive": f"(A1) at first order is undecided: κ = {kappa} straddles 1 ± "
        f"{KAPPA_TOL:g} or could not be fitted",
    }
    tail = _reach_words(points, far)
    best = result.get("best")
    if best is not None:
        b = laws[best]
        tail += f". Best out of sample: {b['formula']} (mean |error| extrapolating "
        tail += f"{_ext(b['extrap'])}, leaving one s out {_ext(b['loo'])})"
    return {
        "first_order": order,
        **kappa.as_dict("kappa"),
        "kappa_law": source,
        "curvature": curve,
        "reach": far,
        "best_law": best,
        "sentence": f"{words[order]}; {tail}.",
    }


def _ext(iv: Interval) -> str:
    if not math.isfinite(iv.estimate):
        return "not computable"
    return f"{iv.estimate:.1%} [{iv.lo:.1%}, {iv.hi:.1%}]"


def _reach_words(points: list[dict[str, Any]], far: float | None) -> str:
    """How far (A1)'s own prediction agrees, where it is undecided, and where and which way
    it departs, each departure with its interval."""
    pts = sorted(points, key=lambda p: p["s"])
    head = "its perplexity prediction PPL₀^(1/(1−s))"
    tol = f"±{PPL_TOL:.0%}"
    if far is not None and far >= pts[-1]["s"]:
        return f"{head} agrees within {tol} up to s = {far:.3g} (the largest measured)"
    parts = []
    if far is not None:
        only = far <= pts[0]["s"]
        parts.append(
            f"agrees within {tol} " + (f"only at s = {far:.3g}" if only else f"up to s ≈ {far:.3g}")
        )
    after = [p for p in pts if far is None or p["s"] > far]
    sign = {id(p): departure(p["fit_error_lo"], p["fit_error_hi"]) for p in after}
    first_off = next((i for i, p in enumerate(after) if sign[id(p)]), len(after))
    undecided = [p["s"] for p in after[:first_off]]
    if undecided:
        parts.append("is undecided at s = " + ", ".join(f"{s:.3g}" for s in undecided))
    for direction, word in ((-1, "under-predicts"), (1, "over-predicts")):
        off = [p for p in after if sign[id(p)] == direction]
        if not off:
            continue
        span = f"by {_err(off[0])} at s = {off[0]['s']:.3g}"
        if len(off) > 1:
            span += f" to {_err(off[-1])} at s = {off[-1]['s']:.3g}"
        parts.append(f"{word} {span}")
    if not any(sign.values()):
        parts.append(f"is not shown to miss by more than {tol} anywhere")
    body = ", ".join(parts[:-1]) + (" and " if len(parts) > 1 else "") + parts[-1]
    return f"{head} {body}"


def accuracy_verdict(kappa: Interval, loo: Interval, tol: float = ACC_TOL) -> str:
    """(A2)'s one rule (module docstring): κ above 0 and held-out points predicted."""
    if _finite(kappa) and kappa.hi <= 0:
        return "contradicted"
    if _finite(loo) and loo.lo > tol:
        return "contradicted"
    if _finite(kappa) and kappa.lo > 0 and _finite(loo) and loo.hi <= tol:
        return "supported"
    return "inconclusive"
