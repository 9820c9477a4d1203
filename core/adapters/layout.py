"""Where a family's decoder layer keeps its parts, declared by each adapter as one frozen value
(``ModelAdapter.layout``). The protocol's verbs read the paths from it, so a family that
differs from Llama only in names and constant traits is one ``Layout`` and no code."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from core.names import ROLES


@dataclass(frozen=True)
class Layout:
    """A family's decoder layer, by attribute paths inside one layer ("a|b": the first that
    exists wins).

    paths: role -> path of its linear; children: what a plain layer contains (anything else
    is computation SliceGPT would drop); roles: the linears a layer has (``ROLES`` names, in
    that order); attn_norm / mlp_norm: the norms before the attention and the MLP; final_norm:
    the norm after the last layer, an attribute of the layer stack; norm: the norm kind
    (``traits.NORM_KINDS``); post_norms: the norms on the attention and the MLP output
    before the residual add (Gemma-3), None where there are none; fixed: traits every model of the
    family has, whatever its config says, as ``Traits`` field -> value (Qwen2: q/k/v biases).
    """

    paths: Mapping[str, str]
    children: frozenset[str]
    roles: tuple[str, ...] = ROLES
    attn_norm: str = "input_layernorm"
    mlp_norm: str = "post_attention_layernorm"
    final_norm: str = "norm"
    norm: str = "rms"
    post_norms: tuple[str, str] | None = None
    fixed: Mapping[str, Any] = field(default_factory=dict)


# The protocol's default: Llama's pre-norm layer with separate q/k/v/o and a SwiGLU MLP.
LLAMA = Layout(
    paths={
        "q": "self_attn.q_proj",
        "k": "self_attn.k_proj",
        "v": "self_attn.v_proj",
        "o": "self_attn.o_proj",
        "gate": "mlp.gate_proj",
        "up": "mlp.up_proj",
        "down": "mlp.down_proj",
    },
    children=frozenset({"self_attn", "mlp", "input_layernorm", "post_attention_layernorm"}),
)
