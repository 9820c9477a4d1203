"""The two recovery methods on a pruned (or sliced) model in memory.

- LORA: adapters on the pruned linears (``core.recovery.lora``), trained, merged, and the
  parent's zeros re-applied, so the merged model has exactly its zero set (N:M included).
- MASKED: the pruned linears' weights themselves, the gradient of every zero masked before
  the optimizer step and the weight masked after it (AdamW's decoupled decay is off, so a
  zero never moves; the weight mask makes that exact whatever the optimizer does).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial

import torch
from torch import nn

from core.names import LORA
from core.progress import ProgressFn
from core.recovery.loop import Checkpoint, LoopResult, train
from core.recovery.lora import add_lora, merge_lora
from core.recovery.zero_set import ZeroSet
from core.settings.config import RecoverConfig


@dataclass
class FinetuneResult:
    loop: LoopResult
    trained_params: int  # parameters the optimizer updated
    zero_set_kept: bool  # the held zeros are exactly the parent's after the merge


def _masked_params(linears: dict[str, nn.Linear], master: bool) -> list[tuple[str, nn.Parameter]]:
    params = []
    for name, lin in linears.items():
        if master:
            lin.weight.data = lin.weight.data.float()
        lin.weight.requires_grad_(True)
        params.append((f"{name}.weight", lin.weight))
    return params


def finetune(
    model: nn.Module,
    linears: dict[str, nn.Linear],
    held: ZeroSet,
    windows: torch.Tensor,
    heldout: torch.Tensor,
    rc: RecoverConfig,
    device: torch.device,
    checkpoint: Checkpoint,
    progress: ProgressFn | None = None,
) -> FinetuneResult:
    """Recover ``model`` in place with ``rc.method``; ``linears``: the pruned linears by
    name, ``held``: their zeros (empty for a sliced model)."""
    dtype = next(iter(linears.values())).weight.dtype
    master = device.type == "cuda"  # float32 master weights under bfloat16 autocast
    for p in model.parameters():
        p.requires_grad_(False)
    if rc.method == LORA:
        params = add_lora(model, list(linears), rc.rank, rc.alpha, rc.seed, master)
        loop = train(model, params, windows, heldout, rc, device, checkpoint, progress)
        with torch.no_grad():
            for _, p in params:
                p.data = p.data.to(dtype)
        merge_lora(model)
    else:
        params = _masked_params(linears, master)
        hold = (partial(held.hold_grads, linears), partial(held.apply, linears))
        loop = train(model, params, windows, heldout, rc, device, checkpoint, progress, *hold)
        for _, p in params:
            p.requires_grad_(False)
            p.data = p.data.to(dtype)
    held.apply(linears)
    return FinetuneResult(loop, sum(p.numel() for _, p in params), held.same_as(linears))
