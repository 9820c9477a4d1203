"""Which component of attention-gd earns its perplexity gain over Wanda: the ablation's
readings, the paired comparison and the rule (the runner: ``bench/attention_gd_ablation.py``).

Readings of W_Q/W_K (every one a registered method with options, so the CLI runs each):
  magnitude, wanda, sparsegpt (restricted to q/k by ``targets``);
  obd           attention-gd, init="obd_mask", steps=0, no swap: keep per row the largest
                ½·[∇²L]_mm at M = 1 of Paper B's objective (Optimal Brain Damage: a diagonal
                Hessian saliency, here the exact diagonal of the attention error's Hessian);
  wanda + swap  attention-gd, steps=0: Wanda's mask, then the swap search;
  adam, no swap attention-gd, refine="none": the descent alone;
  default       attention-gd's defaults: Adam from Wanda's mask, then the swap search.

Comparison: per reading, Δ = ln PPL(reading) − ln PPL(Wanda) as the mean over the same
evaluation windows and calibration seeds of the per-window NLL difference, with the 95 %
interval of ``core.analysis.uncertainty.paired_difference`` (windows and seeds resampled).

Rule (``RULE``). A component earns (part of) the default's gain when removing it moves the
perplexity difference by an interval that excludes 0: with δ = ln PPL(default) − ln PPL(the
default without the component), paired likewise,
  earns     the interval of δ lies below 0 (removing the component raises perplexity);
  costs     the interval of δ lies above 0 (removing it lowers perplexity);
  not shown otherwise (the interval contains 0: this ablation cannot credit it).
The swap search's δ is default − "adam, no swap"; the descent's is default − "wanda + swap".
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from core.analysis.uncertainty import DEFAULT_BOOT, Bootstrap, Interval, paired_difference

RULE = __doc__.split("Rule (``RULE``). ")[1]
BASE = "wanda"
DEFAULT = "default"
QUIET = (("checks", "none"),)  # the assumption checks do not change the mask
# reading -> (method, options)
READINGS: dict[str, tuple[str, tuple]] = {
    "magnitude": ("magnitude", ()),
    "wanda": ("wanda", ()),
    "obd": ("attention-gd", (("init", "obd_mask"), ("steps", 0), ("refine", "none"), *QUIET)),
    "sparsegpt": ("sparsegpt", ()),
    "wanda + swap": ("attention-gd", (("steps", 0), *QUIET)),
    "adam, no swap": ("attention-gd", (("refine", "none"), *QUIET)),
    "default": ("attention-gd", QUIET),
}
# component -> the reading that is the default without it
COMPONENTS = {"swap search": "adam, no swap", "descent (Adam)": "wanda + swap"}


def component_verdict(delta: Interval) -> str:
    """``RULE`` on δ = ln PPL(default) − ln PPL(default without the component)."""
    if delta.hi < 0:
        return "earns"
    if delta.lo > 0:
        return "costs"
    return "not shown"


def ablation_rows(
    nll: Mapping[str, np.ndarray], boot: Bootstrap = DEFAULT_BOOT
) -> tuple[list[dict], list[dict]]:
    """nll[reading]: (seeds, windows) per-window NLLs of one family and sparsity, on the same
    seeds and windows. Returns (per reading: ppl, Δ against Wanda with its interval; per
    component: δ with its interval and the verdict)."""
    base = nll[BASE]
    readings = []
    for name, arr in nll.items():
        delta = paired_difference(arr, base, boot)
        readings.append(
            {"reading": name, "ppl": float(np.exp(np.mean(arr))), **delta.as_dict("delta")}
        )
    components = []
    for comp, without in COMPONENTS.items():
        if DEFAULT in nll and without in nll:
            delta = paired_difference(nll[DEFAULT], nll[without], boot)
            verdict = component_verdict(delta)
            components.append({"component": comp, **delta.as_dict("delta"), "verdict": verdict})
    return readings, components
