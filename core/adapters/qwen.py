"""Qwen2 and Qwen3: the Llama layout plus q/k/v biases (Qwen2) or per-head q/k RMSNorms
(Qwen3's q_norm / k_norm, applied to q and k before RoPE).

Both enter the attention objective (attention-GD) and are untouched by SliceGPT: biases sit
on the output side of q/k/v, the q/k norms act inside a head, after the rotated input.
"""

from __future__ import annotations

from dataclasses import replace
from typing import ClassVar

from core.adapters.base import ModelAdapter
from core.adapters.layout import LLAMA, Layout


class Qwen2Adapter(ModelAdapter):
    """Qwen2 / Qwen2.5: biases on q_proj, k_proj and v_proj (not on o_proj)."""

    family: ClassVar[str] = "qwen2"
    model_types: ClassVar[tuple[str, ...]] = ("qwen2",)
    layout: ClassVar[Layout] = replace(LLAMA, fixed={"qkv_bias": True})


class Qwen3Adapter(ModelAdapter):
    """Qwen3: an RMSNorm over head_dim on every query and key head (q_norm, k_norm)."""

    family: ClassVar[str] = "qwen3"
    model_types: ClassVar[tuple[str, ...]] = ("qwen3",)
    layout: ClassVar[Layout] = replace(LLAMA, fixed={"qk_norm": True})
