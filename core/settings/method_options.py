"""Every pruning method's options as fields in the user's words: label, help, range or
choices, and whether the option is an expert's (drawn in an expander).

Nothing is repeated here: each method's options dataclass (``Method.options_cls``) declares
every option once, with ``core.settings.field.option``: its name, type (the field kind), default and
words. So the form, the CLI's ``--option KEY=VALUE`` and the resolved config agree, and a
new option is one line in its method's module. ``option_pairs`` turns widget values back into the KEY=VALUE list
the one request path (``core.settings.request``) reads; values at their default are left out, since
the config fills them anyway (the run id does not change).
"""

from __future__ import annotations

import dataclasses
import typing
from typing import Any

from core.errors import ConfigError
from core.methods import available_methods, get_method
from core.settings.field import CHOICE, FLAG, FLOAT, INT, WORDS, Field

_KINDS = {bool: FLAG, int: INT, float: FLOAT, str: CHOICE}


def _kind(hint: Any) -> str:
    """The field kind of an option's type in its options dataclass (``float | None``: float)."""
    (base,) = [t for t in typing.get_args(hint) or (hint,) if t is not type(None)]
    return _KINDS[base]


EXPERT = "expert"  # Field.group of an expert's option


def option_fields(method: str) -> tuple[Field, ...]:
    """The options of ``method`` as fields: name, kind, default and words, all from its options
    dataclass."""
    cls = get_method(method)
    types = typing.get_type_hints(cls.options_cls)
    out = []
    for f in dataclasses.fields(cls.options_cls):
        w = f.metadata.get(WORDS)
        if w is None:
            raise ConfigError(
                f"option {f.name!r} of {cls.name} has no label (declare it with core.settings.field.option)"
            )
        kind = _kind(types[f.name])
        choices = w.limits if kind == CHOICE else None
        span = w.limits if kind in (INT, FLOAT) else None
        group = EXPERT if w.expert else ""
        out.append(Field(f.name, w.label, w.help, f.default, kind, choices, span, group))
    return tuple(out)


def option_pairs(method: str, values: dict[str, Any], prefix: str = "") -> list[str]:
    """Widget values -> ['key=value', ...] for the ones that differ from the default;
    ``prefix`` ('sparsegpt.') scopes them to one method of a grid sweep."""
    out = []
    for f in option_fields(method):
        value = values.get(f.name, f.default)
        if value is None or value == f.default:
            continue
        if f.kind == FLAG:
            value = "true" if value else "false"
        out.append(f"{prefix}{f.name}={value}")
    return out


def all_option_fields() -> dict[str, tuple[Field, ...]]:
    return {m: option_fields(m) for m in available_methods()}
