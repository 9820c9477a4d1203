"""OPT (SliceGPT's original family): LayerNorm with bias, learned absolute positions added to
the token embeddings, q/k/v/out_proj with biases, a ReLU MLP of fc1/fc2 (no gate), a tied head.

The layout differs from Llama throughout: layers live at ``model.decoder.layers``, the norms
are ``self_attn_layer_norm`` / ``final_layer_norm``, and the MLP is not a module of its own,
so ``mlp_block`` wraps fc1 → activation → fc2 as ``OPTMlp`` (a sliced layer keeps it as
``mlp``; the role paths accept both places).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, ClassVar

import torch
from torch import nn

from core.adapters.base import ModelAdapter
from core.adapters.layout import LLAMA, Layout
from core.adapters.traits import Traits


class OPTMlp(nn.Module):
    """fc2(act(fc1(x))) for x (..., d): OPT's MLP as one callable block."""

    def __init__(self, fc1: nn.Linear, act: nn.Module, fc2: nn.Linear) -> None:
        super().__init__()
        self.fc1, self.activation_fn, self.fc2 = fc1, act, fc2

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(self.activation_fn(self.fc1(x)))


class OPTAdapter(ModelAdapter):
    """facebook/opt-* decoders (pre-LN ones for SliceGPT: every size but 350m)."""

    family: ClassVar[str] = "opt"
    model_types: ClassVar[tuple[str, ...]] = ("opt",)
    layout: ClassVar[Layout] = Layout(
        # Llama's paths but for the output projection's name and the gate-less fc1/fc2 MLP
        paths={
            **{r: p for r, p in LLAMA.paths.items() if r != "gate"},
            "o": "self_attn.out_proj",
            "up": "fc1|mlp.fc1",
            "down": "fc2|mlp.fc2",
        },
        children=frozenset(
            {"self_attn", "self_attn_layer_norm", "fc1", "fc2", "final_layer_norm", "activation_fn"}
        ),
        roles=("q", "k", "v", "o", "up", "down"),
        # (a sliced layer names them as the Llama layout does)
        attn_norm="self_attn_layer_norm|input_layernorm",
        mlp_norm="final_layer_norm|post_attention_layernorm",
        final_norm="final_layer_norm",
        norm="layernorm",
    )

    @classmethod
    def shape(cls, config: Any) -> dict[str, int]:
        d, n_heads = int(config.hidden_size), int(config.num_attention_heads)
        return {
            "n_layers": int(config.num_hidden_layers),
            "hidden_size": d,
            "intermediate_size": int(config.ffn_dim),
            "n_heads": n_heads,
            "n_kv_heads": n_heads,
            "head_dim": d // n_heads,
            "max_positions": int(config.max_position_embeddings),
        }

    @classmethod
    def traits(cls, config: Any) -> Traits:
        return replace(
            super().traits(config),
            positions="learned",
            pre_norm=bool(config.do_layer_norm_before),
            qkv_bias=bool(getattr(config, "enable_bias", True)),
            tied=bool(getattr(config, "tie_word_embeddings", True)),
            embed_proj=int(config.word_embed_proj_dim) != int(config.hidden_size),
        )

    @classmethod
    def positions(cls, config: Any) -> str:
        return "learned"

    @property
    def stack(self) -> nn.Module:
        return self.model.model.decoder

    @property
    def position_table(self) -> nn.Embedding:
        return self.stack.embed_positions

    @property
    def rotary_emb(self) -> None:
        return None

    @property
    def rms_eps(self) -> float:
        return float(getattr(self.final_norm, "eps", 1e-5))

    def norm_affine(self, norm: nn.Module) -> tuple[torch.Tensor, torch.Tensor | None]:
        d = self.hidden_size
        w, b = getattr(norm, "weight", None), getattr(norm, "bias", None)
        gamma = torch.ones(d) if w is None else w.detach().float()
        return gamma, (torch.zeros_like(gamma) if b is None else b.detach().float())

    def position_embeddings(self, hidden, position_ids, layer: int = 0) -> None:
        return None

    def set_heads(self, layer: nn.Module, n_heads: int, n_kv_heads: int) -> None:
        """OPT's attention reshapes by its own head count."""
        self.attention_block(layer).num_heads = n_heads

    def write_widths(self, n_heads: int, n_kv_heads: int, intermediate: int) -> bool:
        """OPT's config derives the head width from hidden_size / heads: only a change of
        the MLP width (ffn_dim) is expressible."""
        if n_heads != self.n_heads:
            return False
        self.config.ffn_dim = intermediate
        return True

    def mlp_block(self, layer: nn.Module) -> nn.Module:
        mlp = getattr(layer, "mlp", None)
        return mlp if mlp is not None else OPTMlp(layer.fc1, layer.activation_fn, layer.fc2)
