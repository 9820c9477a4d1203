"""What the structured methods measure on calibration tokens, layer by layer.

- ``WriterMoments``: per input channel of a layer's residual writers (o_proj, down_proj):
  the token count, Σx and Σx² in float64, hence the mean, the sample variance (FLAP's
  fluctuation) and the squared norm ‖x_j‖² (structured Wanda);
- ``block_influence_walk``: each layer's Block Influence from its input and output hidden
  states (ShortGPT);
- ``writer_walk``: every layer's ``WriterMoments`` on the dense model, or layer by layer
  with the layer changed by a callback before its outputs feed the next one (sequential
  calibration, as structured Wanda's reference does).

Walks go through ``core.models.layer_inputs`` (the inputs the model itself passes its
layers, replayed exactly) and an ``Offload``, so one decoder layer visits the device at a
time.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from torch import nn
from torch.nn import functional as F

from core.adapters import ModelAdapter
from core.models.layer_inputs import capture_layer_inputs, forward_layer, move, walk_layers
from core.models.offload import Offload
from core.progress import ProgressFn, report


@dataclass
class Moments:
    """Running float64 sums over the tokens that passed one linear's input (in,)."""

    n: int = 0
    total: torch.Tensor | None = None
    squares: torch.Tensor | None = None

    def add(self, x: torch.Tensor) -> None:
        flat = x.reshape(-1, x.shape[-1]).double()
        s, q = flat.sum(0).cpu(), flat.pow(2).sum(0).cpu()
        self.total = s if self.total is None else self.total + s
        self.squares = q if self.squares is None else self.squares + q
        self.n += flat.shape[0]

    @property
    def mean(self) -> torch.Tensor:
        return self.total / self.n

    @property
    def variance(self) -> torch.Tensor:
        """Sample variance over the tokens, Σ(x − x̄)²/(n − 1)."""
        return (self.squares - self.n * self.mean.pow(2)).clamp_min(0.0) / max(self.n - 1, 1)

    @property
    def sq_norm(self) -> torch.Tensor:
        """‖x_j‖² = Σ_tokens x_j²."""
        return self.squares


@dataclass
class WriterMoments:
    """The input moments of one layer's attention writer (o_proj) and MLP writer (down_proj)."""

    attn: Moments = field(default_factory=Moments)
    mlp: Moments = field(default_factory=Moments)

    def hooks(self, adapter: ModelAdapter, layer: nn.Module) -> list:
        """Forward pre-hooks that add every input of the two writers; remove them after."""
        pairs = ((adapter.attn_writer(layer), self.attn), (adapter.mlp_writer(layer), self.mlp))
        return [
            lin.register_forward_pre_hook(lambda _m, args, acc=acc: acc.add(args[0].detach()))
            for lin, acc in pairs
        ]


def _inputs(adapter, calib_ids, device, batch_size, offload):
    return capture_layer_inputs(adapter, calib_ids, device, batch_size, offload=offload)


@torch.no_grad()
def block_influence_walk(
    adapter: ModelAdapter,
    calib_ids: torch.Tensor,
    device: torch.device,
    batch_size: int = 8,
    progress: ProgressFn | None = None,
) -> list[float]:
    """BI_i = 1 − mean over calibration tokens of cos(x_i, x_{i+1}) for every decoder layer
    i, x_i its input hidden state and x_{i+1} its output (ShortGPT Eq. 1), on the dense
    model. The mean is taken in float64 over every token of every sequence."""
    offload = Offload(adapter.model, device)
    inputs = _inputs(adapter, calib_ids, device, batch_size, offload)
    n = adapter.n_layers
    out: list[float] = []
    for i, layer in enumerate(list(adapter.layers)):
        offload.fetch(layer)
        total, count = 0.0, 0
        for b, (h, kw) in enumerate(zip(inputs.hidden, inputs.for_layer(i), strict=True)):
            x = h.to(device)
            y = forward_layer(layer, x, move(kw, device))
            total += float(cosine(x, y).double().sum())
            count += x.shape[0] * x.shape[1]
            inputs.hidden[b] = y.to(h.device)
        offload.release(layer)
        out.append(1.0 - total / count)
        report(progress, "structure", i + 1, n, f"block influence of layer {i + 1}/{n}")
    return out


def cosine(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """cos(x_t, y_t) per token of (..., d) hidden states, in float32 at least: (...)."""
    dtype = torch.promote_types(x.dtype, torch.float32)
    return F.cosine_similarity(x.to(dtype), y.to(dtype), dim=-1)


LayerEdit = Callable[[int, nn.Module, WriterMoments], None]


@torch.no_grad()
def writer_walk(
    adapter: ModelAdapter,
    calib_ids: torch.Tensor,
    device: torch.device,
    batch_size: int = 8,
    edit: LayerEdit | None = None,
    progress: ProgressFn | None = None,
) -> list[WriterMoments]:
    """Every layer's writer input moments. Without ``edit``: on the dense model, one
    forward per layer. With ``edit``: layer i's moments are taken on the inputs the edited
    layers 0..i−1 produce, then ``edit(i, layer, moments)`` changes the layer before its
    outputs feed layer i + 1 (two forwards per layer)."""
    offload = Offload(adapter.model, device)
    inputs = _inputs(adapter, calib_ids, device, batch_size, offload)
    n = adapter.n_layers
    stats: list[WriterMoments] = []
    hooks: list = []

    def visit(i: int, layer: nn.Module) -> None:
        for h in hooks:
            h.remove()
        hooks.clear()
        moments = WriterMoments()
        stats.append(moments)
        hooks.extend(moments.hooks(adapter, layer))
        if edit is not None:  # the moments of this layer's own inputs, then the change
            for h, kw in zip(inputs.hidden, inputs.for_layer(i), strict=True):
                forward_layer(layer, h.to(device), move(kw, device))
            for h in hooks:
                h.remove()
            hooks.clear()
            edit(i, layer, moments)
        report(progress, "structure", i + 1, n, f"layer {i + 1}/{n}")

    try:
        walk_layers(adapter, inputs, offload, visit)
    finally:
        for h in hooks:
            h.remove()
    return stats
