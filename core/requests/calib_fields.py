"""The calibration fields (corpus, sequences, tokens, seed, sampler) and SliceGPT's reference
calibration; core.requests.commands adds them to the prune, slice and sweep commands."""

from __future__ import annotations

import dataclasses

from core.names import CALIB_SAMPLERS, WINDOW
from core.settings.field import CHOICE, INT, Field

CALIB = tuple(
    dataclasses.replace(f, group="calibration")
    for f in (
        Field("calib", "Calibration corpus", "calibration corpus (default c4, train split)", "c4"),
        Field(
            "nsamples",
            "Calibration sequences",
            "calibration sequences (default 32)",
            32,
            INT,
            range=(1, 100_000),
        ),
        Field(
            "calib_seqlen",
            "Tokens per sequence",
            "tokens per sequence (default: --seqlen)",
            None,
            INT,
            range=(2, 131072),
        ),
        Field(
            "seed",
            "Calibration seed",
            "sampler seed (default 0; 42 for SliceGPT)",
            0,
            INT,
            range=(0, 2**31 - 1),
            advanced=True,
        ),
        Field(
            "calib_sampler",
            "Calibration sampler",
            "window: a random window of a random long document (Wanda/SparseGPT; default); "
            "documents: whole documents from their start, joined by blank lines (SliceGPT's "
            "reference code)",
            WINDOW,
            CHOICE,
            CALIB_SAMPLERS,
            advanced=True,
        ),
    )
)

# SliceGPT's commands keep its reference calibration (WikiText-2 train, seed 42).
SLICEGPT_CALIB = {
    "calib": {
        "default": "wikitext2",
        "help": "calibration corpus (default wikitext2, train split)",
    },
    "seed": {"default": 42},
}
