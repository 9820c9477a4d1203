"""The linears a pruning changed, by module name, and their exact zeros.

Recovery must end with exactly the parent's zeros: LoRA merged without the mask fills them
(wanda #83 reports 40% -> 32.7% sparsity after merging), and a fine-tune that does not mask
its gradient moves them (sparsegpt #17). ``ZeroSet`` records the zeros once, before training,
and puts them back (``apply``), holds them during training (``hold_grads``) and checks them
(``same_as``): equality of the whole boolean set, not of a sparsity figure.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from core.errors import ConfigError
from core.models.load import LoadedModel


def pruned_linears(lm: LoadedModel, roles: tuple[str, ...]) -> dict[str, nn.Linear]:
    """Qualified module name -> linear, for the ``roles`` of every decoder layer (the names
    ``peft`` targets). A family whose role is a view inside a fused projection is refused."""
    names = {id(m): n for n, m in lm.model.named_modules()}
    out: dict[str, nn.Linear] = {}
    for layer in lm.adapter.layers:
        for role, lin in lm.adapter.linears(layer, roles).items():
            if not isinstance(lin, nn.Linear) or id(lin) not in names:
                raise ConfigError(
                    f"recovery trains separate linear projections; {role} of this "
                    f"{lm.adapter.family} model is a view inside a fused one"
                )
            out[names[id(lin)]] = lin
    return out


@dataclass
class ZeroSet:
    """name -> boolean tensor of a linear's exact zeros (on the weight's device)."""

    zeros: dict[str, torch.Tensor]

    @classmethod
    def capture(cls, linears: dict[str, nn.Linear]) -> ZeroSet:
        return cls({name: lin.weight.detach() == 0 for name, lin in linears.items()})

    @classmethod
    def empty(cls) -> ZeroSet:
        """Nothing held (a sliced model: its structure is the pruning, its weights dense)."""
        return cls({})

    @torch.no_grad()
    def apply(self, linears: dict[str, nn.Linear]) -> None:
        """Put the recorded zeros back into the weights (exact zeros)."""
        for name, zero in self.zeros.items():
            linears[name].weight.masked_fill_(zero, 0)

    @torch.no_grad()
    def hold_grads(self, linears: dict[str, nn.Linear]) -> None:
        """Zero the gradient of every recorded zero (before the optimizer step)."""
        for name, zero in self.zeros.items():
            grad = linears[name].weight.grad
            if grad is not None:
                grad.masked_fill_(zero, 0)

    def same_as(self, linears: dict[str, nn.Linear]) -> bool:
        """Whether the linears' zeros are exactly the recorded set (no zero lost, none new)."""
        return all(
            torch.equal(linears[name].weight.detach() == 0, zero)
            for name, zero in self.zeros.items()
        )

    def counts(self) -> tuple[int, int]:
        """(zeros, weights) over the recorded linears."""
        zeros = sum(int(z.sum()) for z in self.zeros.values())
        return zeros, sum(z.numel() for z in self.zeros.values())
