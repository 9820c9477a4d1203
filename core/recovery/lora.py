"""Low-rank adapters on the pruned linears through ``peft``, and their merge.

W' = W + (alpha / r)·B·A (LoRA, Hu et al. 2021, eq. 3): trained with W frozen, then merged
into W; the caller re-applies the parent's zeros afterwards (``ZeroSet.apply``), since B·A is
dense. ``peft`` is imported here only: the rest of core runs without it.
"""

from __future__ import annotations

import torch
from torch import nn


def add_lora(
    model: nn.Module, names: list[str], rank: int, alpha: float, seed: int, master: bool
) -> list[tuple[str, nn.Parameter]]:
    """Freeze ``model`` and wrap the linears ``names`` with LoRA adapters (A random from
    ``seed``, B zero, so the model is unchanged at step 0); return the adapters' parameters.
    master: keep them in float32 whatever the model's dtype (bfloat16 autocast on CUDA)."""
    from peft import LoraConfig, inject_adapter_in_model

    for p in model.parameters():
        p.requires_grad_(False)
    config = LoraConfig(
        r=rank, lora_alpha=alpha, lora_dropout=0.0, target_modules=list(names), bias="none"
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        inject_adapter_in_model(config, model)
    params = [(n, p) for n, p in model.named_parameters() if "lora_" in n]
    for _, p in params:
        if master:
            p.data = p.data.float()
        p.requires_grad_(True)
    return params


@torch.no_grad()
def merge_lora(model: nn.Module) -> int:
    """Merge every LoRA adapter into its linear and put the plain linear back in its place
    (the same module object the model had); returns how many were merged."""
    from peft.tuners.lora import LoraLayer

    merged = 0
    for name, module in list(model.named_modules()):
        if not isinstance(module, LoraLayer):
            continue
        module.merge()
        parent_name, _, child = name.rpartition(".")
        setattr(model.get_submodule(parent_name), child, module.get_base_layer())
        merged += 1
    if hasattr(model, "peft_config"):
        del model.peft_config
    return merged
