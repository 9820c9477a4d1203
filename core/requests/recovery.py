"""The recover command's fields (``core.requests.commands`` lists them under "recover"): which
stored run, the method and its size, the training text and the curve's interval.

Defaults: LoRA of rank 8 (alpha 16, lr 2e-4: the usual LoRA settings of Wanda's and
LLM-Pruner's recoveries), batches of 2 windows of 256 tokens, training windows drawn from
C4 train with the pruning's calibration seed + 1 (another draw than the one the mask was
fitted on), the curve and a checkpoint every 10 steps on 4 held-out windows.
"""

from __future__ import annotations

import dataclasses

from core.names import LORA, RECOVER_METHODS
from core.settings.field import CHOICE, FLOAT, INT, Field


def _group(group: str, *fields: Field) -> tuple[Field, ...]:
    return tuple(dataclasses.replace(f, group=group) for f in fields)


RECOVER_FIELDS = _group(
    "recovery",
    Field("run", "Run", "the stored prune or slice run whose model is fine-tuned (an id prefix)"),
    Field("steps", "Steps", "optimizer steps (at least 1)", 100, INT, range=(1, 10**6)),
    Field(
        "method",
        "Method",
        "lora: adapters on the pruned linears, merged with the parent's zeros re-applied; "
        "masked: the pruned linears themselves, gradient and weight masked every step",
        LORA,
        CHOICE,
        RECOVER_METHODS,
    ),
    Field("rank", "LoRA rank", "rank r of the adapters (lora)", 8, INT, range=(1, 4096)),
    Field(
        "alpha",
        "LoRA alpha",
        "adapter scale alpha (the update is alpha/r·B·A)",
        16.0,
        FLOAT,
        range=(1e-3, 1e4),
        advanced=True,
    ),
    Field("lr", "Learning rate", "AdamW learning rate", 2e-4, FLOAT, range=(1e-7, 0.5)),
    Field("batch_size", "Windows per step", "training windows per step", 2, INT, range=(1, 4096)),
    Field(
        "every",
        "Curve every K steps",
        "record training loss and held-out perplexity, and checkpoint, every K steps",
        10,
        INT,
        range=(1, 10**6),
        advanced=True,
    ),
    Field(
        "curve_windows",
        "Held-out windows of the curve",
        "evaluation windows the curve's perplexity is measured on",
        4,
        INT,
        range=(1, 10**5),
        advanced=True,
    ),
)
RECOVER_CALIB = _group(
    "training text",
    Field("calib", "Training corpus", "training corpus (default c4, train split)", "c4"),
    Field("nsamples", "Training windows", "windows drawn to train on", 128, INT, range=(1, 10**6)),
    Field(
        "calib_seqlen",
        "Tokens per window",
        "tokens per training window",
        256,
        INT,
        range=(2, 131072),
    ),
    Field(
        "seed",
        "Seed",
        "draws the training windows, their order and the adapters (default: the pruning's "
        "calibration seed + 1, another draw than the mask was fitted on)",
        None,
        INT,
        range=(0, 2**31 - 1),
        advanced=True,
    ),
)
