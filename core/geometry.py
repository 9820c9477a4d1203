"""A model's shapes read from its config alone: what configuration checks need before any
weight is loaded (``core.runs.plan``), and what the adapter reports once it is."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from core.config import ModelSpec
from core.models import model_config


@dataclass(frozen=True)
class Geometry:
    """Widths of a Llama-shaped decoder: d (hidden), the MLP width, heads and context."""

    n_layers: int
    hidden_size: int
    intermediate_size: int
    n_heads: int
    n_kv_heads: int
    head_dim: int
    max_positions: int  # 0 when the config does not say

    @classmethod
    def from_config(cls, config: Any) -> Geometry:
        """From a transformers config (LlamaConfig and the families sharing its names)."""
        n_heads = int(config.num_attention_heads)
        head_dim = getattr(config, "head_dim", None)
        return cls(
            n_layers=int(config.num_hidden_layers),
            hidden_size=int(config.hidden_size),
            intermediate_size=int(config.intermediate_size),
            n_heads=n_heads,
            n_kv_heads=int(getattr(config, "num_key_value_heads", None) or n_heads),
            head_dim=int(head_dim) if head_dim else int(config.hidden_size) // n_heads,
            max_positions=int(getattr(config, "max_position_embeddings", 0) or 0),
        )

    def in_features(self, role: str) -> int:
        """Input width of the linear of ``role`` (q, k, v, o, gate, up, down)."""
        if role == "o":
            return self.n_heads * self.head_dim
        if role == "down":
            return self.intermediate_size
        return self.hidden_size


def model_geometry(spec: ModelSpec) -> Geometry:
    """The geometry of the model a spec names, from its config.json (no weights loaded)."""
    return Geometry.from_config(model_config(spec.name, spec.trust_remote_code, spec.revision))
