"""The sweep's ``--protocol``: the field values a named protocol fixes.

``primary`` is Paper A's primary protocol (core.analysis.protocol, docs/statistics.md): its s
grid (s = 0 is the dense model's own evaluation run, which every slice run makes, so no slice
run at s = 0), the model's calibration seeds, the evaluation and calibration data and sizes,
and lean measurement. Each point of such a sweep is the slice run that
``python -m core slice --model M --sparsity S --seed SEED`` with the same values plans, so a
sweep reuses the runs made one by one and the other way round. ``none`` leaves the fields as
given. The constants are read when a sweep is planned, never copied.
"""

from __future__ import annotations

from typing import Any

from core.analysis import protocol as paper_a
from core.names import NO_PROTOCOL
from core.settings.field import CHOICE, Field

PROTOCOLS = (NO_PROTOCOL, paper_a.PRIMARY)
PROTOCOL = Field(
    "protocol",
    "Protocol",
    "primary: Paper A's primary protocol, fixed before its sweeps (core.analysis.protocol: its "
    "s grid without 0, the model's calibration seeds, the first 16 WikiText-2 test windows of "
    "2048 tokens, calibration 32 x 512 tokens of WikiText-2 train, lean measurement; a flag "
    "that sets any of these otherwise is an error); none: the fields as given",
    NO_PROTOCOL,
    CHOICE,
    PROTOCOLS,
)


def protocol_seeds(model: str) -> tuple[int, ...]:
    """The primary protocol's calibration seeds of ``model`` (0, 1, ... MIN_SEEDS − 1 for a
    model the protocol does not name)."""
    return tuple(paper_a.SEEDS.get(model, range(paper_a.MIN_SEEDS)))


def primary_values(model: str) -> dict[str, Any]:
    """The sweep command's field values the primary protocol fixes for ``model``."""
    return {
        "sparsities": ",".join(f"{s:g}" for s in paper_a.GRID),
        "seeds": ",".join(str(k) for k in protocol_seeds(model)),
        "calib": paper_a.CALIB_DATASET,
        "calib_sampler": paper_a.CALIB_SAMPLER,
        "nsamples": paper_a.CALIB_NSAMPLES,
        "calib_seqlen": paper_a.CALIB_SEQLEN,
        "eval": paper_a.EVAL_DATASET,
        "split": paper_a.EVAL_SPLIT,
        "seqlen": paper_a.EVAL_SEQLEN,
        "max_windows": paper_a.EVAL_WINDOWS,
        "measure": paper_a.MEASURE,
    }


# Fields a protocol sweep measures without: zero-shot tasks and method options would give its
# points other run ids than the protocol's slice runs.
UNSET_UNDER_PROTOCOL = ("tasks", "limit", "option")
