"""The written rules that turn Paper A's fits into verdicts, one place for the CLI and the app.

(A1), perplexity (``a1_verdict``, on core.analysis.first_order's estimands and the laws of
core.analysis.law_compare). The sentence leads with what tests (A1):

- **Joint test.** (A1) is the nesting law at κ = κ₂ = 1; *rejected* when the Wald test's
  p < 0.05 (core.analysis.first_order.joint_test), else *not rejected*, with the smallest
  departures it would detect beside it.
- **Local first order.** κ of the nesting law fitted on nominal 0 < s ≤ 0.15 (the primary
  protocol's estimand 2): *agrees* when its 95% interval lies inside 1 ± ``KAPPA_TOL`` (0.1,
  core.analysis.protocol), *departs* when wholly outside, else *undecided* (also when fewer
  than two points lie in the range).
- **Reach of (A1)'s own prediction.** PPL₀^{1/(1−s)} against the measured perplexity, point
  by point with 95% intervals: a point *agrees* when its interval of PPL_pred/PPL − 1 lies
  inside ±``PPL_TOL`` (10%), *departs* when it lies wholly outside. The reach is the largest
  s up to which every point agrees. The curvature reading takes the points beyond
  ``S_CURVE`` = 0.2: *agrees* when all agree, *over-predicts* (or *under-predicts*) when some
  depart and all that depart do so upwards (downwards), else *inconclusive*.
- **The laws describe the curve** and are not tests of (A1): per out-of-sample score the law
  that predicts best when it is separated from every other, else the laws not separated
  (core.analysis.law_compare).

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
from core.analysis.protocol import KAPPA_TOL
from core.analysis.uncertainty import Interval

FIRST_ORDER = ("agrees", "departs", "undecided")
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
    """agrees / departs / undecided: κ's interval against the band 1 ± tol."""
    if not _finite(kappa):
        return "undecided"
    if 1 - tol <= kappa.lo and kappa.hi <= 1 + tol:
        return "agrees"
    if kappa.hi < 1 - tol or kappa.lo > 1 + tol:
        return "departs"
    return "undecided"


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


def p_text(p: float) -> str:
    """A p-value as printed: 'p < 0.001' below 0.001, else three significant digits."""
    return "p < 0.001" if p < 0.001 else f"p = {p:.3g}"


def joint_words(est: dict[str, Any]) -> str:
    """The joint test in words (est: core.analysis.first_order.joint_test's keys)."""
    head = (
        f"the joint test of κ = κ₂ = 1 in ln PPL/ln PPL₀ = 1 + κ·s + κ₂·s²/(1 − s) "
        f"({est['joint_points']} points with s > 0)"
    )
    if est["joint_rejected"] is None:
        return f"(A1) could not be tested: {head} has too few points or no spread"
    stat = f"W = {est['joint_w']:.4g}, {p_text(est['joint_p'])}"
    if est["joint_rejected"]:
        return f"(A1) is rejected by {head}: {stat}"
    return (
        f"(A1) is not rejected by {head}: {stat} (it would detect, with 80% power, κ off 1 by "
        f"±{est['detect_kappa']:.3g} or κ₂ off 1 by ±{est['detect_kappa2']:.3g})"
    )


def local_words(est: dict[str, Any], order: str) -> str:
    """The local first order in words (est: core.analysis.first_order.local_first_order's)."""
    n = est["local_points"]
    where = f"nominal 0 < s ≤ {est['local_smax']:g}, {n} point{'' if n == 1 else 's'}"
    kappa = Interval(est["kappa_local"], est["kappa_local_lo"], est["kappa_local_hi"])
    if not math.isfinite(kappa.estimate):
        return f"the local first order cannot be fitted ({where}; it needs two)"
    band = f"1 ± {KAPPA_TOL:g}"
    if order == "agrees":
        return f"its local first order agrees: κ = {kappa} ({where}) lies inside {band}"
    if order == "departs":
        pace = "faster" if kappa.estimate > 1 else "slower"
        return (
            f"its local first order departs: κ = {kappa} ({where}) lies outside {band} "
            f"(ln PPL rises {abs(kappa.estimate - 1):.0%} {pace} with s than (A1)'s "
            "ln PPL₀·(1 + s))"
        )
    return f"its local first order is undecided: κ = {kappa} ({where}) straddles {band}"


def _best_words(result: dict[str, Any], kind: str, what: str) -> str:
    names = result["best"][kind]
    if not names:
        return f"{what}, no law could be scored"
    laws = result["laws"]
    err = _ext(laws[names[0]][kind])
    if len(names) == 1:
        return f"{what}, {laws[names[0]]['formula']} predicts best (mean |error| {err})"
    return f"{what}, {', '.join(names)} are not separated ({names[0]}: {err})"


def a1_verdict(result: dict[str, Any], est: dict[str, Any]) -> dict[str, Any]:
    """(A1)'s verdict: the joint test, the local first order, the reach of (A1)'s own
    prediction and the laws that describe the curve best (module docstring). ``result``:
    core.analysis.law_compare.fit_laws; ``est``: core.analysis.first_order's estimands."""
    order = first_order(Interval(est["kappa_local"], est["kappa_local_lo"], est["kappa_local_hi"]))
    points = result["laws"]["a1"]["points"]
    far = reach(points)
    joint = {None: "not computable", True: "rejected", False: "not rejected"}
    laws = "; ".join(
        [
            _best_words(result, "loo", "leaving one s > 0 out"),
            _best_words(result, "extrap", f"extrapolating from s ≤ {result['s_fit']:g}"),
        ]
    )
    sentence = (
        f"{joint_words(est)}; {local_words(est, order)}. "
        f"{_cap(_reach_words(points, far))}. "
        f"Describing the curve (not a test of (A1)): {laws}."
    )
    return {
        "joint": joint[est["joint_rejected"]],
        "first_order": order,
        "curvature": curvature(points),
        "reach": far,
        "best_loo": ", ".join(result["best"]["loo"]) or None,
        "best_extrap": ", ".join(result["best"]["extrap"]) or None,
        "sentence": sentence,
    }


def _cap(text: str) -> str:
    return text[:1].upper() + text[1:]


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
