"""A family's traits: what its decoder computes beyond the plain Llama form, read from the
config alone, so run planning can refuse a method for a family before any weight loads."""

from __future__ import annotations

from dataclasses import dataclass

NORM_KINDS = ("rms", "rms_1p", "layernorm")  # γ·N(x); (1 + w)·N(x); LayerNorm with bias


@dataclass(frozen=True)
class Traits:
    """What a family computes beyond the plain Llama form, read from its config.

    norm: the norm kind (NORM_KINDS); positions: "rope", "rope_partial" (RoPE on part of
    each head) or "learned"; pre_norm: every block reads a normed residual and adds its output
    unnormed (SliceGPT's computational invariance needs it); post_norms: extra norms on the
    block outputs before the residual add (Gemma-3); fused: fused projections;
    attn_scale: the factor of q·kᵀ; sliding_window: tokens a sliding layer sees (None: all
    layers attend globally).
    """

    family: str
    roles: tuple[str, ...]
    norm: str
    positions: str
    pre_norm: bool
    post_norms: bool
    qk_norm: bool
    qkv_bias: bool
    fused: tuple[str, ...]
    tied: bool
    embed_scale: float
    attn_scale: float
    sliding_window: int | None
    embed_proj: bool = False  # embeddings narrower than d, projected in and out (OPT-350m)
