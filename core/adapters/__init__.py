"""One adapter per model family behind one protocol (``base.ModelAdapter``).

``adapter_for(model)`` picks the family by ``config.model_type``; ``adapter_class(config)``
and ``family_traits(config)`` answer the same from a config alone (run planning).
"""

from core.adapters.base import ModelAdapter
from core.adapters.layout import Layout
from core.adapters.registry import (
    FAMILIES,
    adapter_class,
    adapter_for,
    family_traits,
    supported_families,
)
from core.adapters.roles import RowSlice
from core.adapters.traits import NORM_KINDS, Traits
from core.names import ROLE_GROUPS, ROLES, SHARED_INPUT, resolve_roles

__all__ = [
    "FAMILIES",
    "NORM_KINDS",
    "ROLES",
    "ROLE_GROUPS",
    "SHARED_INPUT",
    "Layout",
    "ModelAdapter",
    "RowSlice",
    "Traits",
    "adapter_class",
    "adapter_for",
    "family_traits",
    "resolve_roles",
    "supported_families",
]
