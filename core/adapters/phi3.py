"""Phi-3: the Llama layout with fused projections, qkv_proj (rows q | k | v) and
gate_up_proj (rows gate | up). Each role is a ``RowSlice`` of the fused weight, so the
layer-wise methods prune q, k, v, gate and up as separate matrices (same inputs, same
statistics) and write through to the fused parameter; SliceGPT rotates the fused linears
whole."""

from __future__ import annotations

from dataclasses import replace
from typing import ClassVar

from torch import nn

from core.adapters.base import ModelAdapter
from core.adapters.layout import LLAMA, Layout
from core.adapters.roles import RowSlice


class Phi3Adapter(ModelAdapter):
    """Phi-3 / Phi-3.5 / Phi-4-mini decoders."""

    family: ClassVar[str] = "phi3"
    model_types: ClassVar[tuple[str, ...]] = ("phi3",)
    layout: ClassVar[Layout] = replace(
        LLAMA,
        paths={
            **LLAMA.paths,
            "q": "self_attn.qkv_proj",
            "k": "self_attn.qkv_proj",
            "v": "self_attn.qkv_proj",
            "gate": "mlp.gate_up_proj",
            "up": "mlp.gate_up_proj",
        },
        children=LLAMA.children | {"resid_attn_dropout", "resid_mlp_dropout"},
        fixed={"fused": ("qkv_proj", "gate_up_proj")},
    )

    def _rows(self, role: str) -> tuple[int, int]:
        """Rows of ``role`` inside its fused projection (the order Phi-3's forward splits)."""
        g = self.geometry
        nq, nkv = g["n_heads"] * g["head_dim"], g["n_kv_heads"] * g["head_dim"]
        inter = g["intermediate_size"]
        return {
            "q": (0, nq),
            "k": (nq, nq + nkv),
            "v": (nq + nkv, nq + 2 * nkv),
            "gate": (0, inter),
            "up": (inter, 2 * inter),
        }[role]

    def _linear(self, layer: nn.Module, role: str) -> nn.Module:
        lin = super()._linear(layer, role)
        if role in ("o", "down") or not isinstance(lin, nn.Linear):
            return lin
        return RowSlice(lin, *self._rows(role))
