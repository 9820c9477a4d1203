"""What decoder layer 0 (and the first layer of every other kind) receives on the calibration
batch, captured without running any decoder layer.

The model runs its embeddings (and RoPE tables, masks, positions) as usual; the decoder
layers up to the first of every kind (``adapter.layer_kind``: Gemma-3's sliding-window and
global layers get different masks and RoPE bases) are swapped for recorders that keep their
inputs and pass the hidden states on, the last one stopping the forward. Layer calls go
through ``forward_layer``, which accepts tensor or tuple outputs and the keyword arguments the
model itself passed, so the runner and SliceGPT survive transformers drift.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from core.adapters import ModelAdapter


class _StopForward(Exception):
    """Raised by the layer-0 pre-hook once its inputs are captured."""


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
    """Decoder-layer inputs for the calibration set, one entry per mini-batch.

    hidden[b]: (B, L, d) in the model's dtype, on ``store_device``.
    kwargs[b]: the keyword arguments the model passes to decoder layer 0 for that batch
        (attention mask, position ids, RoPE (cos, sin), ...), kept on ``store_device``.
    kind_kwargs[kind][b]: the same for every layer kind (``adapter.layer_kind``): Gemma-3's
        sliding-window layers get another mask and RoPE base than its global ones.
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


def model_device(model: nn.Module) -> torch.device:
    return next(model.parameters()).device


class _Recorder(nn.Module):
    """Stands in for decoder layer ``index`` during capture: keeps what the model passes and
    hands the hidden states on unchanged (no layer computes); the last one stops the forward."""

    def __init__(self, index: int, keep: Callable[[int, tuple, dict], None], last: bool) -> None:
        super().__init__()
        self.index, self.keep, self.last = index, keep, last

    def forward(self, *args: Any, **kw: Any) -> Any:
        self.keep(self.index, args, kw)
        if self.last:
            raise _StopForward
        return args[0] if args else kw["hidden_states"]


@torch.no_grad()
def capture_layer_inputs(
    adapter: ModelAdapter,
    input_ids: torch.Tensor,
    device: torch.device,
    batch_size: int = 8,
    store_device: torch.device | None = None,
) -> LayerInputs:
    """Run the model up to its decoder layers and keep what they receive.

    input_ids: (N, L) calibration tokens. Layers up to the first of every kind are replaced
    by recorders for the call, so no decoder layer runs; only the modules before layer 0
    (``adapter.pre_modules``) move to ``device``, and go back afterwards.
    """
    store_device = store_device or device
    model, layers = adapter.model, adapter.layers
    kinds = [adapter.layer_kind(i) for i in range(len(layers))]
    first = {kind: kinds.index(kind) for kind in dict.fromkeys(kinds)}  # kind -> first layer
    stop = max(first.values())
    hidden: list[torch.Tensor] = []
    kind_kwargs: dict[str, list[dict[str, Any]]] = {kind: [] for kind in first}

    def keep(index: int, args: tuple, kw: dict) -> None:
        kw = dict(kw)
        h = args[0] if args else kw.pop("hidden_states")
        kw = {k: v for k, v in kw.items() if k not in ("hidden_states", "cache", "past_key_values")}
        if index == 0:
            hidden.append(h.to(store_device))
        if first[kinds[index]] == index:
            kind_kwargs[kinds[index]].append(move(kw, store_device))

    pre_modules = adapter.pre_modules()
    homes = [model_device(m) if any(True for _ in m.parameters()) else None for m in pre_modules]
    for m in pre_modules:
        m.to(device)
    originals = [layers[i] for i in range(stop + 1)]
    for i in range(stop + 1):
        layers[i] = _Recorder(i, keep, last=i == stop)
    try:
        for start in range(0, input_ids.shape[0], batch_size):
            batch = input_ids[start : start + batch_size].to(device)
            with contextlib.suppress(_StopForward):
                model(input_ids=batch, use_cache=False)
    finally:
        for i, layer in enumerate(originals):
            layers[i] = layer
        for m, home in zip(pre_modules, homes, strict=True):
            if home is not None:
                m.to(home)
    return LayerInputs(hidden, kind_kwargs[kinds[0]], kind_kwargs, kinds)


def forward_layer(layer: nn.Module, hidden: torch.Tensor, kwargs: dict[str, Any]) -> torch.Tensor:
    """Call a decoder layer the way the model does; accept tensor or tuple outputs."""
    out = layer(hidden, **kwargs)
    return out[0] if isinstance(out, tuple) else out
