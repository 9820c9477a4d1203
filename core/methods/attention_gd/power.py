"""Detection power of the assumption rule (diagnostics.RULE) at a given step budget.

A verdict of "inconclusive" says little unless one knows whether the rule *could* have said
"supported" at the budget it ran. So the rule is run on controls whose answer is known and that
match a real layer (``synthetic_layer``: dimension 10⁴, ``STARTS`` = 64 seeded draws each):

  "spectrum 1..10"  PL holds, μ = 1, L = 10 (the truth is "supported": the rule's power);
  "layer density"   PL holds with the real group's spectral density, negative part
                    included (``synthetic_layer.density``; μ = 8.6e-6, L = 382 for the
                    provisional one): "supported" is right, "contradicted" a false alarm;
  "x⁴"              PL violated (no μ > 0): the truth is "contradicted";
  "|x|^{3/2}"       the gradient is not Lipschitz: the truth is "contradicted";

exactly as production judges a group: the judged trajectory comes from production's optimiser
(``AttentionGDOptions().optimizer``, Adam by default, with the default options' learning rate,
``tol`` and step cap; ``judged_run``), and the checks use the same check points, Hessian
probes and first step of the independent run. Each rate carries a 95 % Wilson interval over
the starts; a power statement gives its upper limit (``verdict_notes``). The production
budget's table is stored beside this module (``power_production.json``, written by
a retired bench script, docs/design-notes.md) so a page reads it instead of judging 512 starts.
"""

from __future__ import annotations

import functools
import json
import math
from pathlib import Path
from typing import Any

from torch import Tensor

from core.methods.attention_gd import synthetic_layer as lc
from core.methods.attention_gd.controls import start as small_start
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
STARTS = 64  # seeded draws (Q, c, start, eigenvalue order) per control
Z95 = 1.96
STORED = Path(__file__).resolve().parent / "power_production.json"
# control -> (synthetic_layer kind, density or None, the verdict its truth calls for)
CONTROLS = {
    "spectrum 1..10": ("pl", "easy", "supported"),
    "layer density": ("pl", "layer", "supported"),
    "x⁴": ("quartic", None, "contradicted"),
    "|x|^{3/2}": ("threehalves", None, "contradicted"),
}
VERDICT_KEYS = ("supported", "contradicted", "inconclusive")


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


def judge(
    obj: Objective, x0: Tensor, seed: int, steps: int, optimizer: str = PRODUCTION_OPTIMIZER
) -> dict[str, Any]:
    """``check_assumptions`` on ``optimizer``'s run of ``obj`` from ``x0`` (``judged_run``),
    with production's check settings."""
    opts = AttentionGDOptions()
    run, eta0 = judged_run(obj, x0, steps, optimizer)
    return check_assumptions(
        obj,
        run,
        points=opts.check_points,
        power_iters=opts.power_iters,
        hessian_at=CHECK_HESSIAN_AT,
        seed=seed,
        eta0=eta0,
    )


def judge_control(
    f, seed: int, steps: int, optimizer: str = PRODUCTION_OPTIMIZER
) -> dict[str, Any]:
    """``judge`` of an 8-dimensional control function f (controls.py) from start ``seed``."""
    return judge(AutogradObjective(f), small_start(seed), seed, steps, optimizer)


def layer_control(name: str, seed: int) -> lc.SeparableControl:
    """Draw ``seed`` of the layer-matched control ``name`` (``CONTROLS``)."""
    kind, dens, _ = CONTROLS[name]
    return lc.SeparableControl(kind, seed, lc.density() if dens == "layer" else lc.EASY)


def rate(hits: int, n: int) -> dict[str, float]:
    """A fraction with its 95 % Wilson interval."""
    lo, hi = wilson(hits, n)
    return {"rate": hits / n if n else math.nan, "lo": lo, "hi": hi, "n": n, "hits": hits}


@functools.lru_cache(maxsize=32)
def detection_power(
    steps: int, control: str, starts: int = STARTS, optimizer: str = PRODUCTION_OPTIMIZER
) -> dict[str, Any]:
    """The verdicts of ``starts`` draws of ``control`` judged at a cap of ``steps``
    ``optimizer`` steps: per verdict its fraction with interval, the control's truth (the
    verdict it calls for), μ, L, the density used and the mean steps the runs took."""
    if steps < 1 or starts < 1 or control not in CONTROLS:
        raise ValueError(f"need steps, starts >= 1 and a control of {tuple(CONTROLS)}")
    verdicts, taken, obj = [], [], None
    for s in range(starts):
        obj = layer_control(control, s)
        out = judge(obj, lc.start(s, obj.n), s, steps, optimizer)
        verdicts.append(out["verdict"])
        taken.append(out["steps_taken"])
    _, dens, truth = CONTROLS[control]
    return {
        "control": control,
        "steps": steps,
        "optimizer": optimizer,
        "truth": truth,
        "mu": obj.mu,
        "L": obj.lip,
        "dim": obj.n,
        "density": {"layer": lc.density().source, "easy": lc.EASY.source}.get(dens, "-"),
        "steps_taken": sum(taken) / len(taken),
        **{v: rate(verdicts.count(v), starts) for v in VERDICT_KEYS},
    }


@functools.lru_cache(maxsize=1)
def _stored() -> dict[str, Any] | None:
    return json.loads(STORED.read_text()) if STORED.is_file() else None


def stored_table() -> dict[tuple[str, int, str], dict[str, Any]]:
    """The stored production-budget table, keyed (optimizer, steps, control); empty when the
    file is missing or was measured on other controls (dimension, starts, density)."""
    data = _stored()
    if data is None:
        return {}
    if (data["dim"], data["starts"], data["density"]) != (lc.DIM, STARTS, lc.density().source):
        return {}
    return {(r["optimizer"], r["steps"], r["control"]): r for r in data["rows"]}


def power(steps: int, control: str, optimizer: str = PRODUCTION_OPTIMIZER) -> dict[str, Any]:
    """``detection_power`` at the default starts: the stored row when there is one."""
    return stored_table().get((optimizer, steps, control)) or detection_power(
        steps, control, STARTS, optimizer
    )


def power_table(
    budgets: tuple[int, ...] = (PRODUCTION_STEPS,),
    optimizers: tuple[str, ...] = (PRODUCTION_OPTIMIZER,),
) -> list[dict[str, Any]]:
    """Rows (optimiser, steps, control, truth, μ, L, each verdict's fraction with interval)
    for the page and the report: one per control."""
    rows = []
    for optimizer in optimizers:
        for steps in budgets:
            for control in CONTROLS:
                p = power(steps, control, optimizer)
                row = {k: p[k] for k in ("optimizer", "steps", "control", "truth", "mu", "L")}
                for v in VERDICT_KEYS:
                    row |= {v: p[v]["rate"], f"{v}_lo": p[v]["lo"], f"{v}_hi": p[v]["hi"]}
                rows.append(row | {"steps_taken": p["steps_taken"]})
    return rows


def write_stored(optimizers: tuple[str, ...] = (PRODUCTION_OPTIMIZER, "gd")) -> Path:
    """Measure the production budget's table afresh and store it (``STORED``)."""
    rows = [
        detection_power(PRODUCTION_STEPS, control, STARTS, optimizer)
        for optimizer in optimizers
        for control in CONTROLS
    ]
    out = {"dim": lc.DIM, "starts": STARTS, "density": lc.density().source, "rows": rows}
    STORED.write_text(json.dumps(out, indent=1, ensure_ascii=False))
    _stored.cache_clear()
    return STORED


def judged_optimizer(config: dict[str, Any]) -> str:
    """The optimiser whose steps a stored attention-gd run's verdicts judged (its config's
    ``optimizer`` option; "gd" for runs from before the option existed)."""
    options = dict((config.get("prune") or {}).get("options") or ())
    return str(options.get("optimizer", "gd"))
