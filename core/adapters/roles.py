"""A linear role's view inside a fused projection (the role names: ``core.names``).

Families that fuse projections (Phi-3's qkv_proj and gate_up_proj) expose each role as a
``RowSlice``: a view of the fused weight's rows, so a method edits it in place exactly as a
separate linear.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F


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
