"""The axes of a sweep as fields (methods, sparsities, patterns, allocations, calibration
seeds), and the calibration a sweep defaults to; core.requests.commands adds them to the sweep
command."""

from __future__ import annotations

from typing import Any

from core.names import PATTERNS, method_names
from core.settings.field import MULTI, SEED_MENU, SPARSITY_MENU, Field, method_list

BUDGET_MENU = tuple(round(0.05 * i, 2) for i in range(1, 15))  # the app's parameter budgets

SWEEP_GRID = (
    Field(
        "method",
        "Methods",
        "the methods run at every point of the grid (CLI: a comma list); slicegpt alone is "
        "the representation-dimension sweep with Paper A's relation",
        "slicegpt",
        MULTI,
        method_names(),
    ),
    Field(
        "sparsities",
        "Sparsities",
        "comma list of s (an N:M pattern has its own, (M-N)/M)",
        "0,0.1,0.2,0.3,0.4,0.5,0.6",
        MULTI,
        SPARSITY_MENU,
    ),
    Field(
        "budgets",
        "Parameter budgets",
        "comma list of fractions of decoder parameters to remove (structured methods and "
        "slicegpt: each mapped to the method's own knob, as prune --budget params=F); "
        "replaces the sparsities",
        "",
        MULTI,
        BUDGET_MENU,
    ),
    Field(
        "patterns",
        "Patterns",
        "comma list: unstructured and/or N:M (2:4, 4:8)",
        "unstructured",
        MULTI,
        PATTERNS,
    ),
    Field(
        "allocations",
        "Layer allocations",
        "comma list: uniform, owl",
        "uniform",
        MULTI,
        ("uniform", "owl"),
    ),
    Field(
        "seeds",
        "Calibration seeds",
        "comma list of calibration seeds, one run per point and seed; intervals resample "
        "them (empty: --seed alone)",
        "",
        MULTI,
        SEED_MENU,
    ),
)


# A sweep's calibration follows its methods' reference protocol (``sweep_reference``).
SWEEP_CALIB = {
    "calib": {
        "default": None,
        "help": "calibration corpus (default: c4 train; wikitext2 train for slicegpt alone)",
    },
    "seed": {"default": None, "help": "sampler seed (default 0; 42 for slicegpt alone)"},
}


def sweep_reference(methods: Any) -> dict[str, Any]:
    """The calibration a sweep defaults to: SliceGPT's reference (WikiText-2 train, seed 42)
    when it sweeps slicegpt alone, else Wanda/SparseGPT's (C4 train, seed 0), so a grid
    point gets the run id of the same choice made on the Prune page."""
    alone = method_list(methods) == ["slicegpt"]
    return {"calib": "wikitext2" if alone else "c4", "seed": 42 if alone else 0}
