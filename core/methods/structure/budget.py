"""A parameter budget: what it is counted in and what a structured method maps it to.

A budget is the fraction of decoder-layer parameters to remove (``--budget params=0.25``;
embeddings, the final norm and the head are left out, so the methods that never touch them
and SliceGPT, which also narrows them, are matched on the same count). Every structured
method maps it to its own knob with one pure function of ``DecoderCounts`` (its module):
ShortGPT a whole number of layers, structured Wanda a uniform ratio of KV groups and MLP
channels, FLAP the parameters its global ranking removes, SliceGPT the kept width d′.

``DecoderCounts`` holds the parameters one decoder layer spends on each structure, measured
on the modules themselves (``measure_counts``: biases, q/k norms and the family's own
layout included), so a mapping is exact for every family the adapters know; run planning
measures them on a meta-device copy built from the config alone (``config_counts``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from accelerate import init_empty_weights
from torch import nn
from transformers import AutoModelForCausalLM

from core.adapters import ModelAdapter, adapter_for

EPS = 1e-9  # a product of a decimal fraction and a count that is meant to be whole


@dataclass(frozen=True)
class DecoderCounts:
    """Parameters of a decoder whose layers are alike (every family here), per structure.

    layer: one dense decoder layer. group: one KV group (a KV head and the query heads that
    read it: their q/k/v rows with biases and their o_proj columns); n_groups per layer.
    channel: one MLP channel (its gate/up rows with biases and its down_proj column);
    n_channels per layer. writer_bias: what a bias on o_proj and down_proj adds where the
    family has none (FLAP's compensation). SliceGPT's sliced layer of kept widths
    (w_in = w_mid = w, w_out) holds slice_in·w + slice_out·w_out + w² + w·w_out + slice_const
    (readers narrowed, writers narrowed or written through post-block projections, the two
    shortcut matrices; folded norms hold nothing).
    """

    n_layers: int
    hidden: int
    head_dim: int
    layer: int
    n_groups: int
    group: int
    n_channels: int
    channel: int
    writer_bias: int
    slice_in: int
    slice_out: int
    slice_const: int

    @property
    def decoder(self) -> int:
        """Parameters of every decoder layer together."""
        return self.n_layers * self.layer

    def sliced_layer(self, w: int, w_out: int) -> int:
        """Parameters of one SliceGPT layer of kept widths (w, w, w_out)."""
        return self.slice_in * w + self.slice_out * w_out + w * w + w * w_out + self.slice_const


@dataclass(frozen=True)
class Knob:
    """A budget mapped to a method: ``sparsity`` is the value of the method's own knob (its
    ``--sparsity``), ``removed`` the fraction of decoder parameters it removes, ``what`` the
    structures in words ("8 of 30 layers")."""

    sparsity: float
    removed: float
    what: str


def nearest_count(x: float) -> int:
    """The whole number nearest to x ≥ 0, a tie going to the smaller one (fewer structures
    removed than asked rather than more)."""
    n = math.floor(x + EPS)
    return n + 1 if x - n > 0.5 + EPS else n


def floor_count(ratio: float, n: int) -> int:
    """⌊ratio·n⌋ of a decimal ratio (the references' int(ratio·n)), not one short when the
    product is meant to be whole."""
    return math.floor(ratio * n + EPS)


def _params(module: nn.Module | None) -> int:
    return 0 if module is None else sum(p.numel() for p in module.parameters())


def _row(lin: nn.Module) -> int:
    """Parameters of one output row of a linear: its inputs and its bias entry."""
    return lin.in_features + (lin.bias is not None)


def measure_counts(adapter: ModelAdapter) -> DecoderCounts:
    """The counts of a model's decoder, read off its first layer's modules through the
    adapter (real or meta tensors alike)."""
    layer = adapter.layers[0]
    lin = adapter.linears(layer)
    d, hd = adapter.hidden_size, adapter.head_dim
    n_groups = lin["k"].out_features // hd
    q_rows = lin["q"].out_features // n_groups  # the query rows of one group
    o = lin["o"]
    group = q_rows * _row(lin["q"]) + hd * (_row(lin["k"]) + _row(lin["v"]))
    group += o.out_features * q_rows
    down = lin["down"]
    readers = [lin[r] for r in ("gate", "up") if r in lin]
    channel = sum(_row(r) for r in readers) + down.out_features
    writer_bias = sum(w.out_features for w in (o, down) if w.bias is None)
    # SliceGPT: readers read w, writers write w (or d through post-block projections)
    attn_r, mlp_r = adapter.attn_readers(layer), adapter.mlp_readers(layer)
    attn_w, mlp_w = adapter.attn_writer(layer), adapter.mlp_writer(layer)
    post = any(n is not None for n in adapter.post_norms(layer))
    norms = [adapter.attn_norm(layer), adapter.mlp_norm(layer), *adapter.post_norms(layer)]
    linears = [*attn_r, *mlp_r, attn_w, mlp_w]
    other = _params(layer) - sum(_params(m) for m in linears) - sum(_params(n) for n in norms)
    reader_bias = sum(r.out_features for r in (*attn_r, *mlp_r) if r.bias is not None)
    slice_in = sum(r.out_features for r in (*attn_r, *mlp_r))
    if post:
        slice_in += d
        slice_out = d
        other += _params(attn_w) + _params(mlp_w)
    else:
        slice_in += _row(attn_w)
        slice_out = _row(mlp_w)
    return DecoderCounts(
        n_layers=adapter.n_layers,
        hidden=d,
        head_dim=hd,
        layer=_params(layer),
        n_groups=n_groups,
        group=group,
        n_channels=down.in_features,
        channel=channel,
        writer_bias=writer_bias,
        slice_in=slice_in,
        slice_out=slice_out,
        slice_const=other + reader_bias,
    )


def config_counts(config: Any) -> DecoderCounts:
    """``measure_counts`` of the model a transformers config describes, built on the meta
    device (no weight is allocated or read)."""
    with init_empty_weights(include_buffers=False):
        model = AutoModelForCausalLM.from_config(config)
    return measure_counts(adapter_for(model))
