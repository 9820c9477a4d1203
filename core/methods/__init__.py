"""Registry of pruning methods: name -> Method subclass.

Each method lives in its own module and registers itself with ``@register``; the CLI and
the app only ever go through ``get_method`` / ``available_methods``.
"""

from __future__ import annotations

import importlib
from typing import Any

from core.errors import ConfigError
from core.methods.base import LayerContext, LinearReport, LinearStats, Method

_REGISTRY: dict[str, type[Method]] = {}
# Modules imported on first use so that importing core stays cheap.
_MODULES = ("magnitude", "wanda", "sparsegpt", "slicegpt", "attention_gd")


def register(cls: type[Method]) -> type[Method]:
    if not cls.name:
        raise TypeError(f"{cls.__name__} has no name")
    _REGISTRY[cls.name] = cls
    return cls


def _load_all() -> None:
    for mod in _MODULES:
        try:
            importlib.import_module(f"core.methods.{mod}")
        except ModuleNotFoundError as exc:  # a method module not written yet
            if exc.name != f"core.methods.{mod}":
                raise


def available_methods() -> list[str]:
    _load_all()
    return [m for m in _MODULES if m in _REGISTRY] + sorted(set(_REGISTRY) - set(_MODULES))


def get_method(name: str) -> type[Method]:
    _load_all()
    key = name.replace("_", "-").lower()
    for cand in (name, key, key.replace("-", "_")):
        if cand in _REGISTRY:
            return _REGISTRY[cand]
    raise ConfigError(f"unknown method {name!r}; choose one of: {', '.join(available_methods())}")


def make_method(name: str, options: Any = ()) -> Method:
    """An instance of method ``name`` with its options (pairs or a dict) validated by its
    options class: the one place methods are constructed."""
    cls = get_method(name)
    try:
        return cls(cls.options_cls(**dict(options)))
    except TypeError as exc:
        raise ConfigError(f"bad options for {cls.name}: {exc}") from exc


__all__ = [
    "LayerContext",
    "LinearReport",
    "LinearStats",
    "Method",
    "available_methods",
    "get_method",
    "make_method",
    "register",
]
