"""The one place that captures what decoder layers receive and walks them layer by layer.

``capture_layer_inputs`` runs the model only up to decoder layer 0 (a pre-hook stops the
forward, so nothing but the embeddings and rotary module needs the device) and keeps the
hidden states (B, L, d) plus the keyword arguments the model itself passed to the layer
(attention mask, position ids, RoPE (cos, sin), ...). Replaying those kwargs through
``forward_layer`` reproduces the model's own forward exactly, layer after layer, whatever
transformers version built them. The layer-wise runner, SliceGPT, streamed perplexity and
the attention probes all start here, and every module visits the compute device through an
``Offload`` (``core.offload``), so a walk holds one decoder layer's weights at a time.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from core.adapter import ModelAdapter
from core.offload import Offload

# keyword arguments a layer must not receive again when replayed (cache objects)
_DROP_KWARGS = ("hidden_states", "cache", "past_key_values", "past_key_value")


class StopForward(Exception):
    """Raised by a capture hook to end a forward pass early."""


def move(
    obj: Any, device: torch.device | str | None = None, dtype: torch.dtype | None = None
) -> Any:
    """Move tensors (possibly nested in tuples/lists/dicts) to a device; floats to dtype."""
    if isinstance(obj, torch.Tensor):
        if dtype is not None and obj.is_floating_point():
            return obj.to(device=device, dtype=dtype)
        return obj.to(device=device)
    if isinstance(obj, tuple):
        return tuple(move(o, device, dtype) for o in obj)
    if isinstance(obj, list):
        return [move(o, device, dtype) for o in obj]
    if isinstance(obj, dict):
        return {k: move(v, device, dtype) for k, v in obj.items()}
    return obj


@dataclass
class LayerInputs:
    """Decoder-layer inputs for a set of sequences, one entry per mini-batch.

    hidden[b]: (B, L, d) in the model's dtype, on the store device.
    kwargs[b]: the keyword arguments the model passes to a decoder layer for that batch
        (attention mask, position ids, RoPE (cos, sin), ...), on the store device.
    """

    hidden: list[torch.Tensor]
    kwargs: list[dict[str, Any]]

    @property
    def n_tokens(self) -> int:
        return sum(h.shape[0] * h.shape[1] for h in self.hidden)

    def position_embeddings(self, device: torch.device | None = None) -> Any:
        """RoPE (cos, sin) of the first batch, each (B, L, head_dim), or None."""
        pos = self.kwargs[0].get("position_embeddings") if self.kwargs else None
        return move(pos, device)


@torch.no_grad()
def capture_layer_inputs(
    adapter: ModelAdapter,
    input_ids: torch.Tensor,
    device: torch.device | str,
    batch_size: int = 8,
    store_device: torch.device | str | None = None,
    offload: Offload | None = None,
) -> LayerInputs:
    """Run the model up to decoder layer 0 and keep what layer 0 receives.

    input_ids: (N, L) tokens, run ``batch_size`` sequences at a time. Only the embeddings
    and the rotary module visit ``device`` (through ``offload``); inputs are kept on
    ``store_device`` (default: ``device``).
    """
    device = torch.device(device)
    store = torch.device(store_device) if store_device is not None else device
    offload = offload or Offload(adapter.model, device)
    hidden: list[torch.Tensor] = []
    kwargs: list[dict[str, Any]] = []

    def grab(_module: nn.Module, args: tuple, kw: dict) -> None:
        h = args[0] if args else kw["hidden_states"]
        hidden.append(h.to(store))
        kwargs.append(move({k: v for k, v in kw.items() if k not in _DROP_KWARGS}, store))
        raise StopForward

    pre = [adapter.embed_tokens] + ([adapter.rotary_emb] if adapter.rotary_emb else [])
    for m in pre:
        offload.fetch(m)
    handle = adapter.layers[0].register_forward_pre_hook(grab, with_kwargs=True)
    try:
        for start in range(0, input_ids.shape[0], batch_size):
            batch = input_ids[start : start + batch_size].to(device)
            with contextlib.suppress(StopForward):
                adapter.model(input_ids=batch, use_cache=False)
    finally:
        handle.remove()
        for m in pre:
            offload.release(m)
    return LayerInputs(hidden, kwargs)


def forward_layer(layer: nn.Module, hidden: torch.Tensor, kwargs: dict[str, Any]) -> torch.Tensor:
    """Call a decoder layer the way the model does; accept tensor or tuple outputs."""
    out = layer(hidden, **kwargs)
    return out[0] if isinstance(out, tuple) else out


@torch.no_grad()
def propagate(layer: nn.Module, inputs: LayerInputs, device: torch.device) -> None:
    """Run one layer over every batch, overwriting each batch's inputs with its outputs:
    they are the next layer's inputs. Batch b is read in full before it is overwritten, so
    one activation buffer serves the whole walk (unless the layer changes the width, as
    SliceGPT's last layer does: that batch then gets a new buffer)."""
    for b, (h, kw) in enumerate(zip(inputs.hidden, inputs.kwargs, strict=True)):
        out = forward_layer(layer, h.to(device), move(kw, device))
        if out.shape == h.shape:
            h.copy_(out)
        else:
            inputs.hidden[b] = out.to(h.device)


VisitFn = Callable[[int, nn.Module], None]


@torch.no_grad()
def walk_layers(
    adapter: ModelAdapter,
    inputs: LayerInputs,
    offload: Offload,
    visit: VisitFn | None = None,
    upto: int | None = None,
) -> None:
    """Bring decoder layers 0..upto-1 to the device one at a time, call ``visit(i, layer)``
    (hooks may be set there), propagate ``inputs`` through the layer, release it unchanged."""
    for i, layer in enumerate(list(adapter.layers)[:upto]):
        offload.fetch(layer)
        try:
            if visit is not None:
                visit(i, layer)
            propagate(layer, inputs, offload.device)
        finally:
            offload.release(layer)


@torch.no_grad()
def linear_inputs(
    adapter: ModelAdapter,
    ids: torch.Tensor,
    role: str,
    device: torch.device | str,
    layers: range | None = None,
    offload: Offload | None = None,
) -> tuple[dict[int, torch.Tensor], Any]:
    """The input of linear ``role`` in each decoder layer of ``layers`` for ids (N, L), one
    sequence per call as the model would see it alone: {layer: (N, L, in) float32 on the
    CPU}, and the RoPE (cos, sin) of one sequence, each (L, head_dim) float32 (or None).
    Layers after the last one asked for are not run."""
    device = torch.device(device)
    offload = offload or Offload(adapter.model, device)
    layers = layers if layers is not None else range(adapter.n_layers)
    inputs = capture_layer_inputs(adapter, ids, device, 1, device, offload)
    got: dict[int, list[torch.Tensor]] = {i: [] for i in layers}
    handles = []

    def visit(i: int, layer: nn.Module) -> None:
        for h in handles:
            h.remove()
        handles.clear()
        if i in got:
            lin = adapter.linears(layer, (role,))[role]
            hook = lin.register_forward_pre_hook(
                lambda _m, args: got[i].append(args[0].detach().float().cpu())
            )
            handles.append(hook)

    try:
        walk_layers(adapter, inputs, offload, visit, upto=max(layers, default=-1) + 1)
    finally:
        for h in handles:
            h.remove()
    rope = inputs.position_embeddings()
    rope = None if rope is None else tuple(t[0].float().cpu() for t in rope)
    return {i: torch.cat(x) for i, x in got.items()}, rope
