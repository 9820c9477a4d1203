"""Every pruning method's options as fields in the user's words: label, help, range or
choices, and whether the option is an expert's (drawn in an expander).

Defaults are not repeated here: each field takes its default from the method's options
dataclass (``Method.options_cls``), so the form, the CLI's ``--option KEY=VALUE`` and the
resolved config agree. ``option_pairs`` turns widget values back into the KEY=VALUE list
the one request path (``core.requests``) reads; values at their default are left out, since
the config fills them anyway (the run id does not change).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from core.errors import ConfigError
from core.field import CHOICE, FLAG, FLOAT, INT, Field
from core.masks import SCOPES
from core.methods import available_methods, get_method
from core.methods.attention_gd.options import (
    BINARIZE_RULES,
    CHECKS,
    INITS,
    LAM_SCHEDULES,
    OTHERS,
    STEP_RULES,
)
from core.methods.attention_gd.options import DTYPES as GD_DTYPES
from core.methods.slicegpt.procedure import ORIENTATIONS
from core.methods.sparsegpt import MASK_SELECTIONS

_SCOPE = ("Compare scores within", "each output row, or the whole weight matrix", CHOICE, SCOPES)

# method -> option -> (label, help, kind, choices or range[, expert])
_TEXT: dict[str, dict[str, tuple]] = {
    "magnitude": {"scope": _SCOPE},
    "wanda": {"scope": _SCOPE},
    "sparsegpt": {
        "percdamp": (
            "Hessian damping",
            "added to the diagonal as a fraction of its mean (reference 0.01)",
            FLOAT,
            (0.0, 1.0),
        ),
        "blocksize": ("Columns per update block", "lazy-update block width", INT, (1, 8192)),
        "selection": (
            "Mask selection",
            "'threshold' as the reference; 'exact' for an exact count per block",
            CHOICE,
            MASK_SELECTIONS,
            True,
        ),
    },
    "slicegpt": {
        "round_to": (
            "Round d′ to a multiple of",
            "kept width rounding (reference 8)",
            INT,
            (1, 512),
        ),
        "damp": ("PCA damping", "fraction of the covariance's mean diagonal", FLOAT, (0.0, 1.0)),
        "slice_head": ("Slice the output head too", "the final norm and LM head input", FLAG, None),
        "orientation": (
            "Kept directions",
            "'pca': the principal directions; 'random': a seeded random basis (a control)",
            CHOICE,
            ORIENTATIONS,
        ),
        "seed": (
            "Seed of the random basis",
            "used with 'random' directions",
            INT,
            (0, 2**31 - 1),
            True,
        ),
        "batch_size": ("Sequences per forward", "calibration batch", INT, (1, 1024), True),
        "center_embeddings": (
            "Center the embeddings first",
            "as the reference does (changes an RMSNorm model's function)",
            FLAG,
            None,
            True,
        ),
    },
    "attention-gd": {
        "lam": (
            "Mask penalty λ",
            "relative weight of ½λ‖M‖² (per attention row)",
            FLOAT,
            (0.0, 10.0),
        ),
        "steps": ("Gradient steps (at most)", "cap on GD steps per group", INT, (1, 1000)),
        "init": ("Starting mask", "the mask GD refines ('wanda_mask': Wanda's)", CHOICE, INITS),
        "checks": (
            "Assumption checks",
            "smoothness and PL judged on one GQA group per layer ('sample'), every group "
            "('full', about twice the time) or none",
            CHOICE,
            CHECKS,
        ),
        "others": (
            "Prune V, O and the MLP with",
            "'none' keeps them dense",
            CHOICE,
            OTHERS,
        ),
        "max_seq": ("Calibration sequences used", "the first ones (paper: 8)", INT, (1, 1024)),
        "max_len": ("Tokens per sequence used", "a step costs O(tokens²)", INT, (2, 8192)),
        "tol": (
            "Stop when the loss changes less than",
            "relative, 0 = run every step",
            FLOAT,
            (0.0, 1.0),
            True,
        ),
        "lam_schedule": ("λ schedule", "'anneal': λ·10, λ, λ/10", CHOICE, LAM_SCHEDULES, True),
        "step": ("Step size rule", "'auto': 1/curvature", CHOICE, STEP_RULES, True),
        "eta": ("Fixed or first step", "empty: from the curvature", FLOAT, (0.0, 1e6), True),
        "power_iters": ("Curvature probes", "Hessian-vector products", INT, (1, 100), True),
        "binarize": ("Keep entries by", "M or |M∘W|", CHOICE, BINARIZE_RULES, True),
        "scope": (*_SCOPE, True),
        "rope": (
            "Rotary positions before the product",
            "as the model computes it",
            FLAG,
            None,
            True,
        ),
        "causal": ("Causal softmax", "as the model computes it", FLAG, None, True),
        "clip": ("Keep M in [0, 1]", "project after each step", FLAG, None, True),
        "check_points": ("Check points per group", "off-path points", INT, (1, 100), True),
        "dtype": ("Precision of the descent", "float32 or float64", CHOICE, tuple(GD_DTYPES), True),
        "seed": (
            "Seed of a random start",
            "used with the 'random' start",
            INT,
            (0, 2**31 - 1),
            True,
        ),
    },
}
EXPERT = "expert"  # Field.group of an expert's option


def option_fields(method: str) -> tuple[Field, ...]:
    """The options of ``method`` as fields, defaults from its options dataclass."""
    cls = get_method(method)
    text = _TEXT.get(cls.name, {})
    out = []
    for f in dataclasses.fields(cls.options_cls):
        if f.name not in text:
            raise ConfigError(f"option {f.name!r} of {cls.name} has no label (core.option_fields)")
        label, help_, kind, limits, *expert = text[f.name]
        choices = limits if kind == CHOICE else None
        span = limits if kind in (INT, FLOAT) else None
        group = EXPERT if expert and expert[0] else ""
        out.append(Field(f.name, label, help_, f.default, kind, choices, span, group))
    return tuple(out)


def option_pairs(method: str, values: dict[str, Any], prefix: str = "") -> list[str]:
    """Widget values -> ['key=value', ...] for the ones that differ from the default;
    ``prefix`` ('sparsegpt.') scopes them to one method of a grid sweep."""
    out = []
    for f in option_fields(method):
        value = values.get(f.name, f.default)
        if value is None or value == f.default:
            continue
        if f.kind == FLAG:
            value = "true" if value else "false"
        out.append(f"{prefix}{f.name}={value}")
    return out


def all_option_fields() -> dict[str, tuple[Field, ...]]:
    return {m: option_fields(m) for m in available_methods()}
