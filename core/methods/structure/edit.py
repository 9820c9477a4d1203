"""In-place edits that leave a decoder layer smaller and dense: keep some KV groups (a KV head
with the query heads that read it), keep some MLP channels, add a bias to a residual writer.

Everything goes through the adapter's roles (q, k, v, o; gate, up, down) and verbs, so the
same edit serves every family whose projections are separate linears. Head h of an
nn.Linear-layout projection owns rows [h·hd, (h+1)·hd); query head h reads KV head
h // group_size (transformers' ``repeat_kv``), so KV group g owns query heads
[g·gs, (g+1)·gs), their q rows and o_proj columns, and its own k/v rows.
"""

from __future__ import annotations

import torch
from torch import nn

from core.adapters import ModelAdapter
from core.errors import ConfigError

ATTENTION, MLP_READERS = ("q", "k", "v", "o"), ("gate", "up")


def _resize(lin: nn.Module, rows: torch.Tensor | None = None, cols: torch.Tensor | None = None):
    """Keep rows (outputs, with their bias entries) and/or columns (inputs) of an nn.Linear."""
    if not isinstance(lin, nn.Linear):
        raise ConfigError(
            f"{type(lin).__name__} is not a separate nn.Linear: this family's fused projection "
            "cannot lose heads or channels here"
        )
    W = lin.weight.detach()
    bias = None if lin.bias is None else lin.bias.detach()
    if rows is not None:
        W = W[rows.to(W.device)]
        bias = None if bias is None else bias[rows.to(W.device)]
    if cols is not None:
        W = W[:, cols.to(W.device)]
    lin.weight = nn.Parameter(W.contiguous(), requires_grad=lin.weight.requires_grad)
    if bias is not None:
        lin.bias = nn.Parameter(bias.contiguous(), requires_grad=lin.bias.requires_grad)
    lin.out_features, lin.in_features = W.shape


def group_size(adapter: ModelAdapter, layer: nn.Module) -> tuple[int, int]:
    """(KV groups, query heads per group) of a layer, read off its q and k shapes."""
    lin = adapter.linears(layer, ("q", "k"))
    hd = adapter.head_dim
    n_kv = lin["k"].out_features // hd
    return n_kv, lin["q"].out_features // hd // n_kv


def group_channels(keep: torch.Tensor, n_heads_per_group: int, head_dim: int) -> torch.Tensor:
    """Indices of the query-side channels (q rows, o_proj columns) of the kept groups.
    keep: (n_groups,) bool -> (kept groups · gs · hd,) long."""
    width = n_heads_per_group * head_dim
    groups = keep.nonzero().flatten()
    return (groups[:, None] * width + torch.arange(width)).flatten()


@torch.no_grad()
def keep_groups(adapter: ModelAdapter, layer: nn.Module, keep: torch.Tensor) -> None:
    """Keep the KV groups where ``keep`` (n_groups,) is True, whole: their q/k/v rows and
    o_proj columns; the attention block is told its new head counts."""
    n_kv, gs = group_size(adapter, layer)
    if keep.shape != (n_kv,) or not bool(keep.any()):
        raise ConfigError(f"keep {tuple(keep.shape)} does not keep some of {n_kv} KV groups")
    hd = adapter.head_dim
    q_idx = group_channels(keep, gs, hd)
    kv_idx = group_channels(keep, 1, hd)
    lin = adapter.linears(layer, ATTENTION)
    _resize(lin["q"], rows=q_idx)
    _resize(lin["k"], rows=kv_idx)
    _resize(lin["v"], rows=kv_idx)
    _resize(lin["o"], cols=q_idx)
    kept = int(keep.sum())
    adapter.set_heads(layer, kept * gs, kept)


@torch.no_grad()
def keep_channels(adapter: ModelAdapter, layer: nn.Module, keep: torch.Tensor) -> None:
    """Keep the MLP channels where ``keep`` (intermediate,) is True: their gate/up rows (the
    family's readers) and down_proj columns."""
    if not bool(keep.any()):
        raise ConfigError("an MLP keeps at least one channel")
    idx = keep.nonzero().flatten()
    lin = adapter.linears(layer, (*MLP_READERS, "down"))
    for role in MLP_READERS:
        if role in lin:
            _resize(lin[role], rows=idx)
    _resize(lin["down"], cols=idx)


@torch.no_grad()
def add_bias(lin: nn.Linear, shift: torch.Tensor) -> None:
    """b ← b + shift (out,), computed in float64; a linear without a bias gets one."""
    shift = shift.to(lin.weight.device, torch.float64)
    if lin.bias is None:
        lin.bias = nn.Parameter(shift.to(lin.weight.dtype), requires_grad=False)
    else:
        lin.bias.copy_((lin.bias.detach().double() + shift).to(lin.bias.dtype))


def kept_channels(adapter: ModelAdapter, layer: nn.Module) -> int:
    """The MLP width a layer has now."""
    return adapter.linears(layer, ("down",))["down"].in_features
