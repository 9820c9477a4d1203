"""Where a moving reading of attention-gd loses its gain over Wanda: the attribution rule.

The headroom table (``bench/attention_gd_headroom.py``) judges one reading R (a GD row from
Wanda's mask) at each calibration size. Its inputs, relative attention errors as means over
the layers and seeds:

  W_cal, W_held  Wanda's mask on the calibration and the held-out windows;
  B_cal          the lowest calibration error of any k-sparse binary mask the table's readings
                 found on the attention objective (the swap searches, R's own binarisation):
                 the in-sample headroom the objective demonstrably offers near Wanda's mask;
  C              R's continuous end point M_T projected onto the budget's polytope
                 {0 ≤ M ≤ 1, each row keeps k} (``relax.project_rows``; the identity for a
                 reading that descends on it): the relaxation's own value at the budget. A
                 dense M_T is never compared with a sparse mask (M = 1 has error 0);
  G_cal, G_held  R's binarised mask.

Gains over Wanda (positive = better): g_obj = W_cal − B_cal, g_cont = W_cal − C,
g_bin = W_cal − G_cal, g_held = W_held − G_held; m = 1 % of W_cal is the resolution.

Rule (``RULE``), the first that applies:
  1. objective    g_obj < m: no binary mask near Wanda's that the search found is better on
                  the calibration data itself; nothing is there for an optimiser to find;
  2. optimiser    g_cont < g_obj/2: R's own relaxed point at the budget holds less than half
                  of the gain a feasible point (a binary mask lies on the polytope) shows: it
                  did not minimise its own problem;
  3. relaxation   g_bin < g_cont/2: rounding M_T loses more than half of its relaxed gain;
  4. overfitting  g_held < g_bin/2: more than half of the binarised mask's in-sample gain
                  over Wanda is gone on held-out windows (Wanda's own in-sample optimism
                  cancels in the difference), so a held-out gain > 0 is no longer enough;
  5. none         every stage keeps at least half of what reached it.
"Half" is the point at which a stage loses more than it passes on; it and m were fixed
before the rule was run on any table. Every label is reachable from M₀ = Wanda: a descent
that does not move has g_cont ≈ 0 and is "optimiser" wherever the swap search finds gain.
``control_stages`` builds, for each label, inputs from the mechanism that should produce it;
tests/test_attention_gd_attribution.py runs each over 50 draws.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

RULE = __doc__.split("Rule (``RULE``), the first that applies:\n")[1].split('\n"Half"')[0]
LABELS = ("objective", "optimiser", "relaxation", "overfitting", "none")
MARGIN = 0.01  # m, relative to W_cal
SHARE = 0.5  # the share of a gain a stage must pass on


@dataclass(frozen=True)
class Stages:
    """The rule's inputs at one calibration size (module docstring), relative errors."""

    wanda_cal: float
    wanda_held: float
    best_binary_cal: float  # B_cal: includes R's own binarisation
    cont_budget: float  # C: M_T on the budget polytope
    bin_cal: float  # G_cal
    bin_held: float  # G_held

    def gains(self) -> dict[str, float]:
        """g_obj, g_cont, g_bin, g_held (positive = better than Wanda) and m."""
        best = min(self.best_binary_cal, self.bin_cal)
        return {
            "obj": self.wanda_cal - best,
            "cont": self.wanda_cal - self.cont_budget,
            "bin": self.wanda_cal - self.bin_cal,
            "held": self.wanda_held - self.bin_held,
            "m": MARGIN * self.wanda_cal,
        }


def attribute(stages: Stages) -> str:
    """The label of ``RULE`` for one calibration size."""
    g = stages.gains()
    if g["obj"] < g["m"]:
        return "objective"
    if g["cont"] < SHARE * g["obj"]:
        return "optimiser"
    if g["bin"] < SHARE * g["cont"]:
        return "relaxation"
    if g["held"] < SHARE * g["bin"]:
        return "overfitting"
    return "none"


def control_stages(label: str, rng: np.random.Generator, seeds: int = 3, layers: int = 8):
    """Synthetic inputs built to produce ``label``: per seed and layer, Wanda's errors near
    the headroom table's (0.087 ± 0.004 calibration, held-out 0.001 lower ± 0.002) and a
    headroom h ~ U(3m, 40m) a binary search finds, then the mechanism:
      objective    no headroom: search, relaxed point and rounding all within noise of Wanda;
      optimiser    the relaxed point keeps ≤ 30 % of h, rounding and transfer keep the rest;
      relaxation   the relaxed point holds 80–150 % of h, rounding keeps ≤ 30 % of it;
      overfitting  relaxed and rounded keep ≥ 70 %, held-out keeps ≤ 30 % of the rounded gain;
      none         every stage keeps ≥ 60–70 % of what reached it.
    Each error carries its own noise N(0, (0.1 m)²) per seed and layer; returns the means."""
    if label not in LABELS:
        raise ValueError(f"label must be one of {LABELS}, got {label!r}")
    n = (seeds, layers)
    w_cal = rng.normal(0.087, 0.004, n)
    w_held = w_cal - 0.001 + rng.normal(0.0, 0.002, n)
    m = MARGIN * 0.087
    h = 0.0 if label == "objective" else rng.uniform(3 * m, 40 * m)

    def noise() -> np.ndarray:
        return rng.normal(0.0, 0.1 * m, n)

    keep_cont, keep_bin, keep_held = {
        "objective": (0.0, 1.0, 1.0),
        "optimiser": (rng.uniform(0.0, 0.3), rng.uniform(0.7, 1.0), rng.uniform(0.6, 1.0)),
        "relaxation": (rng.uniform(0.8, 1.5), rng.uniform(0.0, 0.3), rng.uniform(0.6, 1.0)),
        "overfitting": (rng.uniform(0.8, 1.2), rng.uniform(0.7, 1.0), rng.uniform(0.0, 0.3)),
        "none": (rng.uniform(0.8, 1.2), rng.uniform(0.7, 1.0), rng.uniform(0.6, 1.0)),
    }[label]
    search = w_cal - h + np.abs(noise())
    cont = w_cal - keep_cont * h + noise()
    binary = w_cal - keep_bin * keep_cont * h + noise()
    held = w_held - keep_held * (w_cal - binary) + noise()
    return Stages(
        float(w_cal.mean()),
        float(w_held.mean()),
        float(search.mean()),
        float(cont.mean()),
        float(binary.mean()),
        float(held.mean()),
    )
