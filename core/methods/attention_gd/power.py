"""Detection power of the assumption rule (diagnostics.RULE) at a given step budget.

A verdict of "inconclusive" says little unless one knows whether the rule *could* have said
"supported" at the budget it ran. So the rule is run on controls whose answer is known and whose
conditioning matches the real layers' problems (controls.matched_quadratic: PL with μ = 1e-2,
1e-4 and L = 1, and the spectrum measured on a real group, controls.MEASURED_SPECTRUM;
controls.pl_violating: no PL constant), from ``STARTS`` seeded starts each,
exactly as production runs it: the judged trajectory comes from production's optimiser
(``AttentionGDOptions().optimizer``, Adam by default, with the default options' learning rate,
``tol`` and step cap; ``judged_run``), and the checks use the same check points, Hessian probes
and first step of the independent run. Power = the fraction of PL-satisfying controls that come
out "supported", and of violating ones that come out "contradicted"; each fraction carries a
95 % Wilson interval (a binomial proportion over the starts). Plain GD with backtracking
(``diagnostics.descend``, optimizer="gd") stays available as the budget ladder's other reading.
"""

from __future__ import annotations

import functools
import math
from typing import Any

from torch import Tensor

from core.methods.attention_gd.controls import (
    MATCHED_L,
    MATCHED_MU,
    MEASURED_SPECTRUM,
    matched_quadratic,
    pl_violating,
    start,
)
from core.methods.attention_gd.diagnostics import (
    AutogradObjective,
    Descent,
    Objective,
    check_assumptions,
    descend,
)
from core.methods.attention_gd.options import CHECK_HESSIAN_AT, OPTIMIZERS, AttentionGDOptions
from core.methods.attention_gd.steppers import ADAM_LR, adam_steps, lbfgs_steps

PRODUCTION_STEPS = AttentionGDOptions().steps
PRODUCTION_OPTIMIZER = AttentionGDOptions().optimizer
OPTIMIZER_NAMES = {"gd": "plain GD", "adam": "Adam", "lbfgs": "L-BFGS"}
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


def judged_run(
    obj: Objective, x0: Tensor, steps: int, optimizer: str = PRODUCTION_OPTIMIZER
) -> tuple[Descent, float]:
    """The trajectory production would judge from ``x0``: ``optimizer``'s steps (the method's
    own steppers, with the default options' learning rate / first step) until the relative loss
    change is ≤ ``AttentionGDOptions().tol`` or ``steps`` steps; "gd" is ``descend``
    (backtracking). Returns the run and the step size production hands the checks' independent
    run (``eta0``: Adam's learning rate, the last accepted step otherwise)."""
    if optimizer not in OPTIMIZERS:
        raise ValueError(f"optimizer must be one of {OPTIMIZERS}, got {optimizer!r}")
    opts = AttentionGDOptions()
    if optimizer == "gd":
        return descend(obj, x0, steps), 1.0
    run = Descent()
    value, grad = obj.value_grad(x0)

    def record(t: int, x: Tensor, value: float, grad: Tensor) -> None:
        run.values.append(value)
        run.grad_norms.append(grad.norm().item())
        run.xs[t], run.grads[t] = x, grad

    def evaluate(x: Tensor) -> tuple[float, Tensor, None]:
        v, g = obj.value_grad(x)
        return v, g, None

    record(0, x0.clone(), value, grad)
    lr = opts.eta if opts.eta is not None else ADAM_LR
    if optimizer == "adam":
        box = (lambda x: x.clamp(0.0, 1.0)) if opts.clip else None
        stepper = adam_steps(evaluate, x0.clone(), grad, lr, box)
    else:
        stepper = lbfgs_steps(evaluate, x0.clone(), value, grad, first_step=opts.eta)
    eta, t = lr, 0
    for st in stepper:
        prev, t, eta = value, t + 1, st.step_size
        value = st.loss
        record(t, st.x, st.loss, st.grad)
        if abs(prev - value) <= opts.tol * abs(prev) or t >= steps:
            break
    return run, eta


def judge_control(
    f, seed: int, steps: int, optimizer: str = PRODUCTION_OPTIMIZER
) -> dict[str, Any]:
    """``check_assumptions`` on ``optimizer``'s run from start ``seed`` of ``f`` (``judged_run``),
    with production's check settings."""
    opts = AttentionGDOptions()
    obj = AutogradObjective(f)
    run, eta0 = judged_run(obj, start(seed), steps, optimizer)
    return check_assumptions(
        obj,
        run,
        points=opts.check_points,
        power_iters=opts.power_iters,
        hessian_at=CHECK_HESSIAN_AT,
        seed=seed,
        eta0=eta0,
    )


def _rate(verdicts: list[str], wanted: str) -> dict[str, float]:
    hits = sum(v == wanted for v in verdicts)
    lo, hi = wilson(hits, len(verdicts))
    return {"rate": hits / len(verdicts), "lo": lo, "hi": hi, "n": len(verdicts)}


MATCHED = (*((mu, MATCHED_L) for mu in MATCHED_MU), MEASURED_SPECTRUM)  # (μ, L) per control


@functools.lru_cache(maxsize=64)
def detection_power(
    steps: int,
    mu: float,
    starts: int = STARTS,
    optimizer: str = PRODUCTION_OPTIMIZER,
    lip: float = MATCHED_L,
) -> dict[str, Any]:
    """At a cap of ``steps`` ``optimizer`` steps: the fraction of matched quadratics with PL
    constant ``mu`` and top curvature ``lip`` that the rule calls "supported" (and, wrongly,
    "contradicted"), and the
    fraction of PL-violating controls it calls "contradicted" (and, wrongly, "supported"), each
    with its interval; "steps_taken": the mean steps the judged runs took (tol may stop them)."""
    if steps < 1 or starts < 1 or not 0 < mu <= lip:
        raise ValueError(f"need steps, starts >= 1, 0 < mu <= lip; got {steps}, {starts}, {mu}")
    pl = [judge_control(matched_quadratic(mu, s, lip), s, steps, optimizer) for s in range(starts)]
    bad = [judge_control(pl_violating(s), s, steps, optimizer) for s in range(starts)]
    taken = [r["steps_taken"] for r in pl + bad]
    pl, bad = [r["verdict"] for r in pl], [r["verdict"] for r in bad]
    return {
        "steps": steps,
        "mu": mu,
        "L": lip,
        "optimizer": optimizer,
        "steps_taken": sum(taken) / len(taken),
        "supported": _rate(pl, "supported"),
        "false_contradicted": _rate(pl, "contradicted"),
        "contradicted": _rate(bad, "contradicted"),
        "false_supported": _rate(bad, "supported"),
    }


def detecting_budget(
    mu: float, target: float = TARGET, optimizer: str = PRODUCTION_OPTIMIZER
) -> int | None:
    """The smallest budget of ``BUDGETS`` at which the rule, judging ``optimizer``'s runs,
    supports PL with ``mu`` and contradicts the violating control each in ≥ ``target`` of the
    controls (None: none does)."""
    for steps in BUDGETS:
        p = detection_power(steps, mu, optimizer=optimizer)
        if p["supported"]["rate"] >= target and p["contradicted"]["rate"] >= target:
            return steps
    return None


def budget_words(steps: int, optimizer: str = PRODUCTION_OPTIMIZER) -> str:
    """ "150 Adam steps (tol 1e-05)": the budget and the optimiser a power figure is for."""
    tol = AttentionGDOptions().tol
    stop = f" (tol {tol:g})" if optimizer != "gd" and tol > 0 else ""
    return f"{steps} {OPTIMIZER_NAMES.get(optimizer, optimizer)} steps{stop}"


def power_note(verdict: str, steps: int, optimizer: str = PRODUCTION_OPTIMIZER) -> str:
    """The sentence every verdict row carries: what this rule detects when it judges runs of
    at most ``steps`` ``optimizer`` steps."""
    parts = []
    for mu in MATCHED_MU:
        r = detection_power(steps, mu, optimizer=optimizer)["supported"]
        parts.append(f"PL with μ = {mu:g} in {r['rate']:.0%} [{r['lo']:.0%}, {r['hi']:.0%}]")
    mu, lip = MEASURED_SPECTRUM
    r = detection_power(steps, mu, optimizer=optimizer, lip=lip)["supported"]
    parts.append(
        f"the measured layer spectrum (μ = {mu:.2g}, L = {lip:.3g}) in {r['rate']:.0%} "
        f"[{r['lo']:.0%}, {r['hi']:.0%}]"
    )
    c = detection_power(steps, MATCHED_MU[0], optimizer=optimizer)["contradicted"]
    # A "contradicted" is only as good as the rule's false alarms on PL-holding controls: the
    # worst control's rate is stated with its interval (the measured spectrum's is not 0).
    f, worst = max(
        ((detection_power(steps, m, optimizer=optimizer, lip=lip)["false_contradicted"], m)
         for m, lip in MATCHED),
        key=lambda pair: pair[0]["rate"],
    )  # fmt: skip
    return (
        f"{verdict}: at {budget_words(steps, optimizer)} this rule detects "
        f"{', '.join(parts[:-1])} and {parts[-1]} of controls "
        f"(n = {STARTS} each), and a PL violation (x⁴) in {c['rate']:.0%} "
        f"[{c['lo']:.0%}, {c['hi']:.0%}]; it wrongly contradicts PL in up to {f['rate']:.0%} "
        f"[{f['lo']:.0%}, {f['hi']:.0%}] of PL-holding controls (μ = {worst:.2g})"
    )


def power_table(
    budgets: tuple[int, ...] = (PRODUCTION_STEPS,),
    optimizers: tuple[str, ...] = (PRODUCTION_OPTIMIZER,),
) -> list[dict[str, Any]]:
    """Rows (optimiser, steps, μ, L, power to support, false contradictions, power to
    contradict, false supports) for the page and the report: one per control of ``MATCHED``."""
    rows = []
    for optimizer in optimizers:
        for steps in budgets:
            for mu, lip in MATCHED:
                p = detection_power(steps, mu, optimizer=optimizer, lip=lip)
                rows.append(
                    {
                        "optimizer": optimizer,
                        "steps": steps,
                        "mu": mu,
                        "L": lip,
                        "steps_taken": p["steps_taken"],
                        "supported": p["supported"]["rate"],
                        "supported_lo": p["supported"]["lo"],
                        "supported_hi": p["supported"]["hi"],
                        "false_contradicted": p["false_contradicted"]["rate"],
                        "contradicted": p["contradicted"]["rate"],
                        "false_supported": p["false_supported"]["rate"],
                    }
                )
    return rows


def judged_optimizer(config: dict[str, Any]) -> str:
    """The optimiser whose steps a stored attention-gd run's verdicts judged (its config's
    ``optimizer`` option; "gd" for runs from before the option existed)."""
    options = dict((config.get("prune") or {}).get("options") or ())
    return str(options.get("optimizer", "gd"))


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
