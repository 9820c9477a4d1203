"""SliceGPT at a parameter budget: the kept width d′ whose sliced decoder comes nearest to
removing the fraction asked of the decoder's parameters (core.methods.structure.budget).

A sliced layer holds its narrowed readers and writers and two shortcut matrices (d′×d′ and
d′×d′_out), so its parameters are quadratic in d′ (``DecoderCounts.sliced_layer``); the
last layer writes d′_out = d unless the head is sliced too. The embeddings and head shrink
as well but are not decoder parameters, so they do not count here.
"""

from __future__ import annotations

import math

from core.errors import ConfigError
from core.methods.structure.budget import DecoderCounts, Knob
from core.settings.patterns import check_budget


def removed_at(counts: DecoderCounts, width: int, slice_head: bool = False) -> float:
    """The fraction of decoder parameters slicing every layer to ``width`` removes."""
    last = width if slice_head else counts.hidden
    kept = (counts.n_layers - 1) * counts.sliced_layer(width, width)
    kept += counts.sliced_layer(width, last)
    return 1.0 - kept / counts.decoder


def slicing_for_width(d: int, width: int) -> float:
    """The slicing fraction s that ``sliced_width(d, s)`` turns into ``width`` exactly: 1 − d′/d
    rounded down at the sixth decimal, so (1 − s)·d lands in [d′, d′ + 1)."""
    return math.floor((d - width) / d * 1e6) / 1e6


def width_for_budget(
    counts: DecoderCounts, budget: float, round_to: int = 8, slice_head: bool = False
) -> Knob:
    """The multiple of ``round_to`` (at least one head wide) whose slicing removes the
    fraction of decoder parameters nearest ``budget`` (a tie: the wider), as the slicing
    fraction s that gives it."""
    budget = check_budget(budget)
    d = counts.hidden
    widths = [w for w in range(round_to, d + 1, round_to) if w >= counts.head_dim]
    if not widths:
        raise ConfigError(
            f"no multiple of {round_to} up to d = {d} is one head ({counts.head_dim}) wide"
        )
    # widest first: a tie keeps the wider model
    width = min(reversed(widths), key=lambda w: abs(removed_at(counts, w, slice_head) - budget))
    removed = removed_at(counts, width, slice_head)
    what = f"d′ = {width} of {d}"
    if width == widths[0] and removed < budget:  # as far as slicing goes
        what += " (the narrowest: one head wide)"
    return Knob(slicing_for_width(d, width), removed, what)
