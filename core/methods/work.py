"""What a pruning method declares about its own cost: its work on one decoder layer, counted
from the model's shapes and the run's calibration size (no weights, no tensors).

The duration estimate (``core.planning.cost``) asks every method for these terms
(``Method.layer_work``) instead of keying on method names, so a new method states its cost
where it is written, and one that states none fails the registry's test (a method without
cost terms raises ``MissingCostTerms``) rather than silently taking another method's cost.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from core.names import SHARED_INPUT


class MissingCostTerms(NotImplementedError):
    """A registered method that does not declare its work (``Method.layer_work``)."""


@dataclass(frozen=True)
class WorkShape:
    """What a method's cost terms are computed from.

    geo: the model's ``core.models.geometry.Geometry`` (widths, heads, layers, traits).
    linears: every linear of one decoder layer the family has, role -> (out, in).
    roles: the roles the run targets (those the family has, in ``ROLES`` order).
    nsamples, seqlen: the calibration sequences and their length in tokens.
    """

    geo: Any
    linears: dict[str, tuple[int, int]]
    roles: tuple[str, ...]
    nsamples: int
    seqlen: int

    @property
    def tokens(self) -> int:
        return self.nsamples * self.seqlen

    def input_groups(self) -> list[list[str]]:
        """The targeted roles by the input they read (``SHARED_INPUT``), in ``roles`` order."""
        groups: dict[str, list[str]] = {}
        for role in self.roles:
            groups.setdefault(SHARED_INPUT.get(role, role), []).append(role)
        return list(groups.values())

    def shares_input(self, role: str, seen: set[str]) -> bool:
        """Whether ``role`` reads an input whose statistics a role in ``seen`` already
        collected (q/k/v read one tensor, gate/up another: ``SHARED_INPUT``); adds its own."""
        group = SHARED_INPUT.get(role, role)
        shared = group in seen
        seen.add(group)
        return shared


@dataclass(frozen=True)
class LayerWork:
    """A method's work on one decoder layer.

    products: FLOPs of its batched tensor products (Gram matrices, inverses, updates,
        eigendecompositions), run at the device's batched rate.
    weights_chosen: weights it scores, sorts and masks (their cost per weight, which does not
        shrink with calibration tokens, is fitted in ``core.planning.cost``).
    columns_looped: input columns it visits one at a time in a Python loop (SparseGPT's OBS
        sweep), likewise priced per column in ``core.planning.cost``.
    """

    products: float = 0.0
    weights_chosen: int = 0
    columns_looped: int = 0
