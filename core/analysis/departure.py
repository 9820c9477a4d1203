"""The one-sentence readings of a dense/pruned comparison, each by a written rule.

- **Departure layer** (``departure_layer``): the first layer ℓ from which the logit lens's
  KL(dense ‖ pruned), averaged over the text's positions, is at least ``DEPART_KL`` at ℓ and at
  every later layer. 0.05 nats is the KL between two next-token distributions that differ by
  about a 5 % change of the top token's probability mass, below what changes a greedy choice
  on ordinary text. None: the run does not depart (a model against itself gives KL = 0).
- **Agreement of continuations** (``agreeing_prefix``): how many leading new tokens are equal.
- **Token NLL** (``nll_reading``): the mean difference in nats a token and the ratio of
  perplexities it implies over this text, exp(mean Δ), and the token with the largest rise.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

DEPART_KL = 0.05  # nats


def departure_layer(kl: Sequence[float], threshold: float = DEPART_KL) -> int | None:
    """First layer from which KL stays ≥ threshold to the last layer, or None."""
    start = None
    for i, value in enumerate(kl):
        start = (i if start is None else start) if value >= threshold else None
    return start


def departure_reading(kl: Sequence[float], name: str) -> str:
    layer = departure_layer(kl)
    if layer is None:
        return (
            f"{name} does not part from the dense model: the lens's KL stays below "
            f"{DEPART_KL:g} nats at the last layer(s)."
        )
    return (
        f"{name} departs from the dense model from layer {layer} on (KL ≥ {DEPART_KL:g} "
        f"nats there and at every later layer; {kl[-1]:.3g} nats at the last)."
    )


def agreeing_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    """Leading tokens on which two continuations agree."""
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


def generation_reading(dense: Sequence[int], pruned: Sequence[int], name: str) -> str:
    n = agreeing_prefix(dense, pruned)
    total = max(len(dense), len(pruned))
    if n == total:
        return f"{name} continues exactly as the dense model for all {total} new tokens."
    return f"{name} agrees with the dense model for the first {n} of {total} new tokens."


def nll_reading(mean_diff: float, worst: list[dict], name: str) -> str:
    ratio = math.exp(mean_diff)
    text = (
        f"Over this text {name} pays {mean_diff:+.3f} nats a token against the dense model "
        f"(perplexity × {ratio:.3g})"
    )
    if worst and worst[0]["nll_diff"] > 0:
        text += f"; its hardest token is “{worst[0]['token']}” (+{worst[0]['nll_diff']:.2f} nats)"
    return text + "."
