"""The former single Llama adapter's import path, kept so code written against it still
imports: adapters now live one per family in ``core.adapters``. Build them with
``adapter_for(model)``; ``ModelAdapter.from_model`` refuses a model of another family."""

from core.adapters import (
    ROLE_GROUPS,
    ROLES,
    SHARED_INPUT,
    ModelAdapter,
    adapter_for,
    resolve_roles,
)

__all__ = ["ROLES", "ROLE_GROUPS", "SHARED_INPUT", "ModelAdapter", "adapter_for", "resolve_roles"]
