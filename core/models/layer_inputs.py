"""The one place that captures what decoder layers receive and walks them layer by layer.

``capture_layer_inputs`` runs the model only up to its decoder layers: the layers up to the
first of every kind (``adapter.layer_kind``: Gemma-3's sliding-window and global layers get
different masks and RoPE bases) are swapped for recorders that keep their inputs and pass
the hidden states on, the last one stopping the forward. No decoder layer runs, and only
the modules before layer 0 (``adapter.pre_modules``: embeddings, learned positions, rotary
tables) visit the device. Kept: the hidden states (B, L, d) and, per layer kind, the keyword
arguments the model itself passed (attention mask, position ids, RoPE (cos, sin), ...).
Replaying those through ``forward_layer`` reproduces the model's own forward exactly, layer
after layer, whatever transformers version built them. The layer-wise runner, SliceGPT,
streamed perplexity and the attention probes all start here, and every module visits the
compute device through an ``Offload`` (``core.models.offload``), so a walk holds one decoder
layer's weights at a time.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from core.adapters import ModelAdapter
from core.models.offload import Offload, module_device

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


def model_device(model: nn.Module) -> torch.device:
    """Where a module's weights live (CPU for one without any)."""
    return module_device(model) or torch.device("cpu")


@dataclass
class LayerInputs:
    """Decoder-layer inputs for a set of sequences, one entry per mini-batch.

    hidden[b]: (B, L, d) in the model's dtype, on the store device.
    kwargs[b]: the keyword arguments the model passes to decoder layer 0 for that batch
        (attention mask, position ids, RoPE (cos, sin), ...), on the store device.
    kind_kwargs[kind][b]: the same for every layer kind (``adapter.layer_kind``).
    kinds[i]: the kind of decoder layer i.
    """

    hidden: list[torch.Tensor]
    kwargs: list[dict[str, Any]]
    kind_kwargs: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    kinds: list[str] = field(default_factory=list)

    @property
    def n_tokens(self) -> int:
        return sum(h.shape[0] * h.shape[1] for h in self.hidden)

    def for_layer(self, index: int) -> list[dict[str, Any]]:
        """Per-batch keyword arguments of decoder layer ``index``."""
        if not self.kinds:
            return self.kwargs
        return self.kind_kwargs[self.kinds[index]]

    def position_embeddings(self, device: torch.device | None = None, index: int = 0) -> Any:
        """RoPE (cos, sin) of decoder layer ``index`` for the first batch, each
        (B, L, head_dim), or None."""
        kw = self.for_layer(index)
        pos = kw[0].get("position_embeddings") if kw else None
        return move(pos, device)


class _Recorder(nn.Module):
    """Stands in for decoder layer ``index`` during capture: keeps what the model passes and
    hands the hidden states on unchanged (no layer computes); the last one stops the forward."""

    def __init__(self, index: int, keep: Callable[[int, tuple, dict], None], last: bool) -> None:
        super().__init__()
        self.index, self.keep, self.last = index, keep, last

    def forward(self, *args: Any, **kw: Any) -> Any:
        self.keep(self.index, args, kw)
        if self.last:
            raise StopForward
        return args[0] if args else kw["hidden_states"]


@torch.no_grad()
def capture_layer_inputs(
    adapter: ModelAdapter,
    input_ids: torch.Tensor,
    device: torch.device | str,
    batch_size: int = 8,
    store_device: torch.device | str | None = None,
    offload: Offload | None = None,
) -> LayerInputs:
    """Run the model up to its decoder layers and keep what they receive.

    input_ids: (N, L) tokens, run ``batch_size`` sequences at a time. Only
    ``adapter.pre_modules()`` visit ``device`` (through ``offload``); inputs are kept on
    ``store_device`` (default: ``device``).
    """
    device = torch.device(device)
    store = torch.device(store_device) if store_device is not None else device
    offload = offload or Offload(adapter.model, device)
    layers = adapter.layers
    kinds = [adapter.layer_kind(i) for i in range(len(layers))]
    first = {kind: kinds.index(kind) for kind in dict.fromkeys(kinds)}  # kind -> first layer
    stop = max(first.values())
    hidden: list[torch.Tensor] = []
    kind_kwargs: dict[str, list[dict[str, Any]]] = {kind: [] for kind in first}

    def keep(index: int, args: tuple, kw: dict) -> None:
        kw = dict(kw)
        h = args[0] if args else kw.pop("hidden_states")
        if index == 0:
            hidden.append(h.to(store))
        if first[kinds[index]] == index:
            kept = {k: v for k, v in kw.items() if k not in _DROP_KWARGS}
            kind_kwargs[kinds[index]].append(move(kept, store))

    pre = adapter.pre_modules()
    for m in pre:
        offload.fetch(m)
    originals = [layers[i] for i in range(stop + 1)]
    for i in range(stop + 1):
        layers[i] = _Recorder(i, keep, last=i == stop)
    try:
        for start in range(0, input_ids.shape[0], batch_size):
            batch = input_ids[start : start + batch_size].to(device)
            with contextlib.suppress(StopForward):
                adapter.model(input_ids=batch, use_cache=False)
    finally:
        for i, layer in enumerate(originals):
            layers[i] = layer
        for m in reversed(pre):
            offload.release(m)
    return LayerInputs(hidden, kind_kwargs[kinds[0]], kind_kwargs, kinds)


def forward_layer(layer: nn.Module, hidden: torch.Tensor, kwargs: dict[str, Any]) -> torch.Tensor:
    """Call a decoder layer the way the model does; accept tensor or tuple outputs."""
    out = layer(hidden, **kwargs)
    return out[0] if isinstance(out, tuple) else out


@torch.no_grad()
def propagate(layer: nn.Module, inputs: LayerInputs, device: torch.device, index: int = 0) -> None:
    """Run decoder layer ``index`` over every batch, overwriting each batch's inputs with its
    outputs: they are the next layer's inputs. Batch b is read in full before it is
    overwritten, so one activation buffer serves the whole walk (unless the layer changes the
    width, as SliceGPT's last layer does: that batch then gets a new buffer)."""
    for b, (h, kw) in enumerate(zip(inputs.hidden, inputs.for_layer(index), strict=True)):
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
            propagate(layer, inputs, offload.device, i)
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
    CPU}, and the RoPE (cos, sin) of one sequence per layer, {layer: (L, head_dim) pair or
    None}. Hooks sit on ``adapter.input_module`` (a fused projection's physical linear).
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
            mod = adapter.input_module(layer, role)
            hook = mod.register_forward_pre_hook(
                lambda _m, args: got[i].append(args[0].detach().float().cpu())
            )
            handles.append(hook)

    try:
        walk_layers(adapter, inputs, offload, visit, upto=max(layers, default=-1) + 1)
    finally:
        for h in handles:
            h.remove()
    ropes = {}
    for i in layers:
        rope = inputs.position_embeddings(index=i)
        ropes[i] = None if rope is None else tuple(t[0].float().cpu() for t in rope)
    return {i: torch.cat(x) for i, x in got.items()}, ropes
