"""Linear roles: the names users pick targets by, and the view of one role inside a fused
projection.

Every family's decoder layer is described by the same seven roles (q, k, v, o, gate, up,
down); a family without a gate (OPT's fc1/fc2 MLP) simply lacks that role. Families that
fuse projections (Phi-3's qkv_proj and gate_up_proj) expose each role as a ``RowSlice``: a
view of the fused weight's rows, so a method edits it in place exactly as a separate linear.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

from core.errors import ConfigError

ROLES: tuple[str, ...] = ("q", "k", "v", "o", "gate", "up", "down")
# Named groups users pick from ("which linears to prune").
ROLE_GROUPS: dict[str, tuple[str, ...]] = {
    "all": ROLES,
    "attention": ("q", "k", "v", "o"),
    "mlp": ("gate", "up", "down"),
    "qk": ("q", "k"),
}
# Linears that read the same tensor share one set of input statistics.
SHARED_INPUT: dict[str, str] = {"k": "q", "v": "q", "up": "gate"}


def resolve_roles(targets: str) -> tuple[str, ...]:
    """'all' | 'attention' | 'mlp' | 'qk' | comma list of roles -> ordered roles."""
    if targets in ROLE_GROUPS:
        return ROLE_GROUPS[targets]
    roles = tuple(r.strip() for r in targets.split(",") if r.strip())
    bad = [r for r in roles if r not in ROLES]
    if bad or not roles:
        raise ConfigError(
            f"unknown linear role(s) {bad or targets!r}; use one of {sorted(ROLE_GROUPS)} "
            f"or a comma list of {list(ROLES)}"
        )
    return tuple(r for r in ROLES if r in roles)


class RowSlice(nn.Module):
    """Rows [start, stop) of a fused ``nn.Linear``, behaving as a linear of their own.

    ``weight`` (stop − start, in) and ``bias`` are views of the fused parameters' data, so
    ``weight.copy_`` / ``masked_fill_`` write through to the model. Input statistics are
    taken on ``source`` (the fused module), whose input is this role's input.
    """

    def __init__(self, source: nn.Linear, start: int, stop: int) -> None:
        super().__init__()
        object.__setattr__(self, "source", source)  # not a submodule: this is only a view
        self.start, self.stop = start, stop
        self.in_features, self.out_features = source.in_features, stop - start

    @property
    def weight(self) -> torch.Tensor:
        return self.source.weight.data[self.start : self.stop]

    @property
    def bias(self) -> torch.Tensor | None:
        b = self.source.bias
        return None if b is None else b.data[self.start : self.stop]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(x, self.weight, self.bias)

    def extra_repr(self) -> str:
        return (
            f"rows {self.start}:{self.stop} of a ({self.source.out_features}, {self.in_features})"
        )
