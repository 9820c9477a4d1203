"""Registry of pruning methods: name -> Method subclass.

Each method lives in its own module, named by its line in ``core.names.METHODS``, and
registers itself with ``@register``; the CLI and the app only ever go through
``get_method`` / ``available_methods`` / ``make_method``.
"""

from __future__ import annotations

import importlib
from typing import Any

from core.errors import ConfigError
from core.methods.base import LayerContext, LinearReport, LinearStats, Method
from core.names import METHODS

_REGISTRY: dict[str, type[Method]] = {}


def register(cls: type[Method]) -> type[Method]:
    if not cls.name:
        raise TypeError(f"{cls.__name__} has no name")
    _REGISTRY[cls.name] = cls
    return cls


def _load_all() -> None:
    """Import every registered method's module (on first use, so importing core stays
    cheap); a module that does not register the name its line gives is an error."""
    for name, module in list(METHODS.items()):
        if name not in _REGISTRY:
            importlib.import_module(module)
        if name not in _REGISTRY:
            raise ConfigError(f"{module} does not register a method named {name!r}")


def available_methods() -> list[str]:
    """The methods' names, in the registry's order (``core.names.METHODS``)."""
    _load_all()
    return list(METHODS)


def get_method(name: str) -> type[Method]:
    _load_all()
    key = name.replace("_", "-").lower()
    for cand in (name, key, key.replace("-", "_")):
        if cand in _REGISTRY:
            return _REGISTRY[cand]
    raise ConfigError(f"unknown method {name!r}; choose one of: {', '.join(available_methods())}")


def make_method(name: str, options: Any = ()) -> Method:
    """An instance of method ``name`` with its options: its options dataclass itself (typed
    at the edge, ``core.methods.options.typed_options``), or pairs / a dict of
    values (a stored config's), validated by its options class."""
    cls = get_method(name)
    if isinstance(options, cls.options_cls):
        return cls(options)
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
