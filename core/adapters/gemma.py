"""Gemma-3 (text model ``Gemma3ForCausalLM``, model_type gemma3_text).

Differences from Llama the protocol exposes: four norms per layer (input and post-attention
around the attention block, pre- and post-feedforward around the MLP; the "post" norms act on
the block output before the residual add), RMSNorm computing (1 + w)·N(x), embeddings scaled
by √d inside the embedding module, per-head q/k RMSNorms, attention scaled by
query_pre_attn_scalar^(-1/2), sliding-window layers with their own RoPE base, and optional
tanh soft-capping of the logits.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any, ClassVar

import torch
from torch import nn

from core.adapters.base import ModelAdapter
from core.adapters.layout import LLAMA, Layout
from core.adapters.traits import Traits


class Gemma3Adapter(ModelAdapter):
    """Gemma-3 text decoders (270M, 1B, ... and the text tower of the larger ones)."""

    family: ClassVar[str] = "gemma3"
    model_types: ClassVar[tuple[str, ...]] = ("gemma3_text",)
    # a "post" norm on each block's output, and the MLP's input norm named "pre_feedforward"
    layout: ClassVar[Layout] = replace(
        LLAMA,
        # a sliced layer (core.methods.slicegpt) names its MLP norm as Llama's does and keeps
        # the post norms in its writers ``attn_post`` / ``mlp_post``: the paths accept both
        mlp_norm="pre_feedforward_layernorm|post_attention_layernorm",
        post_norms=(
            "attn_post.norm|post_attention_layernorm",
            "mlp_post.norm|post_feedforward_layernorm",
        ),
        children=LLAMA.children | {"pre_feedforward_layernorm", "post_feedforward_layernorm"},
        norm="rms_1p",
        fixed={"post_norms": True, "qk_norm": True},
    )

    @classmethod
    def traits(cls, config: Any) -> Traits:
        scalar = getattr(config, "query_pre_attn_scalar", None) or cls.shape(config)["head_dim"]
        return replace(
            super().traits(config),
            embed_scale=math.sqrt(int(config.hidden_size)),
            attn_scale=float(scalar) ** -0.5,
        )

    @property
    def embed_scale(self) -> float:
        return float(getattr(self.embed_tokens, "scalar_embed_scale", self.hidden_size**0.5))

    def norm_affine(self, norm: nn.Module) -> tuple[torch.Tensor, torch.Tensor | None]:
        return 1.0 + norm.weight.detach().float(), None

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        out = self.lm_head(hidden)
        cap = getattr(self.config, "final_logit_softcapping", None)
        return out if cap is None else torch.tanh(out / cap) * cap

    def position_embeddings(
        self, hidden: torch.Tensor, position_ids: torch.Tensor, layer: int = 0
    ) -> tuple[torch.Tensor, torch.Tensor] | None:
        return self.rotary_emb(hidden, position_ids, self.layer_kind(layer))
