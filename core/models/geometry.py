"""A model's shapes and family traits read from its config alone: what configuration checks
need before any weight is loaded (``core.runs.plan``), and what the adapter reports once it is.
The family's adapter class (``core.adapters.adapter_class``, by ``config.model_type``) knows
where each family keeps these numbers; an unknown model_type fails here, naming the families.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from core.adapters import Traits, adapter_class
from core.models.load import model_config
from core.settings.config import ModelSpec


@dataclass(frozen=True)
class Geometry:
    """Widths of a decoder: d (hidden), the MLP width, heads and context, plus its traits."""

    n_layers: int
    hidden_size: int
    intermediate_size: int
    n_heads: int
    n_kv_heads: int
    head_dim: int
    max_positions: int  # 0 when the config does not say
    traits: Traits

    @classmethod
    def from_config(cls, config: Any) -> Geometry:
        """From a transformers config of any family the adapters know (ModelLoadError else)."""
        family = adapter_class(config)
        return cls(**family.shape(config), traits=family.traits(config))

    @property
    def family(self) -> str:
        return self.traits.family

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
