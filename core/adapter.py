"""One adapter for the architecture differences pruning methods care about.

Every method reaches the model through ``ModelAdapter``: decoder layers, their linears by
role, norms, embeddings, head and the attention geometry (heads, KV heads, head_dim). The
Llama family (Llama 2/3, SmolLM, Mistral, Qwen2 and other Llama-shaped decoders) is covered
by attribute lookup, so a new model of the same shape needs no code; GQA is the general case
(``n_kv_heads <= n_heads``).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from core.errors import ConfigError, ModelLoadError

# role -> attribute path inside one decoder layer (Llama naming, shared by most HF decoders).
ROLE_PATHS: dict[str, str] = {
    "q": "self_attn.q_proj",
    "k": "self_attn.k_proj",
    "v": "self_attn.v_proj",
    "o": "self_attn.o_proj",
    "gate": "mlp.gate_proj",
    "up": "mlp.up_proj",
    "down": "mlp.down_proj",
}
ROLES: tuple[str, ...] = tuple(ROLE_PATHS)
# Named groups users pick from ("which linears to prune").
ROLE_GROUPS: dict[str, tuple[str, ...]] = {
    "all": ROLES,
    "attention": ("q", "k", "v", "o"),
    "mlp": ("gate", "up", "down"),
    "qk": ("q", "k"),
}
# Linears that read the same tensor share one set of input statistics.
SHARED_INPUT: dict[str, str] = {"k": "q", "v": "q", "up": "gate"}


def resolve_roles(targets: str) -> tuple[str, ...]:
    """'all' | 'attention' | 'mlp' | 'qk' | comma list of roles -> ordered roles."""
    if targets in ROLE_GROUPS:
        return ROLE_GROUPS[targets]
    roles = tuple(r.strip() for r in targets.split(",") if r.strip())
    bad = [r for r in roles if r not in ROLE_PATHS]
    if bad or not roles:
        raise ConfigError(
            f"unknown linear role(s) {bad or targets!r}; use one of {sorted(ROLE_GROUPS)} "
            f"or a comma list of {list(ROLES)}"
        )
    return tuple(r for r in ROLES if r in roles)


def _get(obj: object, path: str) -> object | None:
    for part in path.split("."):
        obj = getattr(obj, part, None)
        if obj is None:
            return None
    return obj


@dataclass
class ModelAdapter:
    """View of a Llama-shaped causal LM. Build it with ``ModelAdapter.from_model``."""

    model: nn.Module

    @classmethod
    def from_model(cls, model: nn.Module) -> ModelAdapter:
        adapter = cls(model)
        adapter.validate()
        return adapter

    # ---- structure -------------------------------------------------------------------
    @property
    def config(self):  # transformers PretrainedConfig
        return self.model.config

    @property
    def backbone(self) -> nn.Module:
        return self.model.model

    @property
    def layers(self) -> nn.ModuleList:
        return self.backbone.layers

    @property
    def embed_tokens(self) -> nn.Embedding:
        return self.backbone.embed_tokens

    @property
    def final_norm(self) -> nn.Module:
        return self.backbone.norm

    @property
    def lm_head(self) -> nn.Linear:
        return self.model.lm_head

    @property
    def rotary_emb(self) -> nn.Module | None:
        return getattr(self.backbone, "rotary_emb", None)

    def linears(self, layer: nn.Module, roles: tuple[str, ...] = ROLES) -> dict[str, nn.Linear]:
        """role -> nn.Linear of one decoder layer, in canonical order."""
        return {r: _get(layer, ROLE_PATHS[r]) for r in roles}  # type: ignore[misc]

    @staticmethod
    def qk_norms(layer: nn.Module) -> tuple[nn.Module | None, nn.Module | None]:
        """Per-head norms applied to q and k before RoPE (Qwen3's q_norm/k_norm), or None."""
        return _get(layer, "self_attn.q_norm"), _get(layer, "self_attn.k_norm")

    # ---- geometry --------------------------------------------------------------------
    @property
    def n_layers(self) -> int:
        return len(self.layers)

    @property
    def hidden_size(self) -> int:
        return int(self.config.hidden_size)

    @property
    def n_heads(self) -> int:
        return int(self.config.num_attention_heads)

    @property
    def n_kv_heads(self) -> int:
        return int(getattr(self.config, "num_key_value_heads", None) or self.n_heads)

    @property
    def head_dim(self) -> int:
        hd = getattr(self.config, "head_dim", None)
        return int(hd) if hd else self.hidden_size // self.n_heads

    @property
    def intermediate_size(self) -> int:
        return int(self.config.intermediate_size)

    @property
    def vocab_size(self) -> int:
        return int(self.config.vocab_size)

    @property
    def max_positions(self) -> int:
        return int(getattr(self.config, "max_position_embeddings", 0) or 0)

    @property
    def rms_eps(self) -> float:
        return float(getattr(self.config, "rms_norm_eps", 1e-6))

    def describe(self) -> dict[str, int]:
        return {
            "n_layers": self.n_layers,
            "hidden_size": self.hidden_size,
            "n_heads": self.n_heads,
            "n_kv_heads": self.n_kv_heads,
            "head_dim": self.head_dim,
            "intermediate_size": self.intermediate_size,
            "vocab_size": self.vocab_size,
            "max_positions": self.max_positions,
            "n_params": self.n_params(),
        }

    def n_params(self) -> int:
        return sum(p.numel() for p in self.model.parameters())

    def position_embeddings(
        self, hidden: torch.Tensor, position_ids: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor] | None:
        """RoPE (cos, sin), each (B, L, head_dim), as the model computes them."""
        rotary = self.rotary_emb
        return None if rotary is None else rotary(hidden, position_ids=position_ids)

    def validate(self) -> None:
        """Raise ModelLoadError with a clear message if this is not a Llama-shaped decoder."""
        name = type(self.model).__name__
        layers = _get(self.model, "model.layers")
        if not isinstance(layers, nn.ModuleList) or len(layers) == 0:
            raise ModelLoadError(
                f"{name} has no decoder layers at model.model.layers; PruneScope's adapter "
                "covers Llama-shaped causal LMs (Llama, SmolLM, Mistral, Qwen2, ...)"
            )
        missing = [
            r for r, p in ROLE_PATHS.items() if not isinstance(_get(layers[0], p), nn.Linear)
        ]
        if missing:
            raise ModelLoadError(
                f"{name}: decoder layers lack separate linears for {missing} "
                f"(expected {', '.join(ROLE_PATHS[r] for r in missing)}); architecture not supported"
            )
        for attr in ("input_layernorm", "post_attention_layernorm"):
            if getattr(layers[0], attr, None) is None:
                raise ModelLoadError(f"{name}: decoder layers have no {attr}; not supported")
        if (
            getattr(self.model, "lm_head", None) is None
            or _get(self.model, "model.embed_tokens") is None
        ):
            raise ModelLoadError(f"{name}: no embed_tokens / lm_head; not a causal LM we support")
